"""An index writes and removes only its own files, refuses a folder of the user's, and locks its builds.

Issue #30, items 1 and 2: `crag_lab/kb/_owned.py` (the ledger ``crag-lab-owned.json``, the build lock
``crag-lab.lock``, `check_folder`) and its use by `crag_lab/kb/_store.py` and `KnowledgeBase.build`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crag_lab.cli import main
from crag_lab.errors import CragLabError
from crag_lab.kb import IndexFolderError, KnowledgeBase, _embedding, _owned, _store

FILES = {
    "gateway.md": "# Gateway\n\nThe gateway terminates TLS on port 8443.\n",
    "database.md": "# Database\n\nNightly backups run at 02:00 UTC.\n",
    "team/oncall.txt": "On-call rotation changes every Monday.\n",
}
OURS = {_owned.LEDGER_FILE, _owned.LOCK_FILE}

# Names a user may well give their own files: every one matches a pattern the index uses internally.
LOOK_ALIKES: dict[str, str | None] = {  # name -> file content, None: a folder (with a file inside)
    "index-2024.md": "# My index of 2024\n",
    "index-notes.md": "my notes\n",
    "index-archive": None,
    "index-0123abcd": None,
    ".tmp-draft.md": "a draft\n",
    ".tmp-CURRENT-cafe0123": "not a pointer\n",
    ".tmp-scratch": None,
}


def _plant(folder: Path, entries: dict[str, str | None]) -> None:
    for name, content in entries.items():
        if content is None:
            (folder / name).mkdir()
            (folder / name / "keep.md").write_text(f"inside {name}\n", encoding="utf-8")
        else:
            (folder / name).write_bytes(content.encode("utf-8"))


def _survived(folder: Path, entries: dict[str, str | None]) -> list[str]:
    """The planted entries that are gone or changed (empty: all survived intact)."""
    lost = []
    for name, content in entries.items():
        path = folder / name
        intact = ((path / "keep.md").is_file() and (path / "keep.md").read_text(encoding="utf-8") == f"inside {name}\n"
                  if content is None else path.is_file() and path.read_bytes() == content.encode("utf-8"))
        if not intact:
            lost.append(name)
    return lost


def _index_folders(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if p.name.startswith("index-") and (p / "manifest.json").is_file())


def _live(cache: Path) -> str:
    return (cache / "CURRENT").read_text(encoding="utf-8").strip()


# --- files the user put beside the index survive builds, rebuilds and clean-ups -----------------------------


def test_look_alike_files_in_the_index_folder_survive_builds_and_rebuilds(make_kb, hash_embed_model) -> None:
    root = make_kb(FILES)
    first = KnowledgeBase.build(root, embed_model=hash_embed_model)
    cache = first.cache_dir
    _plant(cache, LOOK_ALIKES)
    old_live = _live(cache)
    (root / "gateway.md").write_text("# Gateway\n\nThe gateway now listens on 9443.\n", encoding="utf-8")
    second = KnowledgeBase.build(root, embed_model=hash_embed_model)  # writes a new folder, cleans up
    assert second.build_report is not None and second.build_report["chunks_embedded"] == 1
    third = KnowledgeBase.build(root, embed_model=hash_embed_model)  # nothing changed: reuse, clean up
    assert third.build_report is not None and third.build_report["chunks_embedded"] == 0
    assert _survived(cache, LOOK_ALIKES) == []
    assert not (cache / old_live).exists()  # what the index did write is still cleaned up
    assert [n for n in _index_folders(cache) if n not in LOOK_ALIKES] == [_live(cache)]
    assert KnowledgeBase.load(root, embed_model=hash_embed_model).chunks == third.chunks


_SUFFIX = st.text(alphabet="0123456789abcdefABCDEF-_.xyz", min_size=0, max_size=12)
_LOOK_ALIKE_NAMES = st.one_of(
    st.builds(lambda s: "index-" + s, _SUFFIX),
    st.builds(lambda s: ".tmp-" + s, _SUFFIX),
    st.builds(lambda s: ".tmp-CURRENT-" + s, _SUFFIX),
)
_ENTRIES = st.dictionaries(_LOOK_ALIKE_NAMES, st.one_of(st.none(), st.text(max_size=20)), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=_ENTRIES, built=st.integers(min_value=1, max_value=3))
def test_clean_up_removes_only_what_the_ledger_names(entries: dict[str, str | None], built: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        cache.mkdir()
        with _owned.build_lock(cache) as ledger:
            ours = [ledger.create_dir(_store._INDEX_PREFIX) for _ in range(built)]  # earlier builds' folders
            leftover = ledger.create_dir(_store._TMP_PREFIX)  # a killed build's
            _store.swap_current(cache, ours[-1].name, ledger)
            user = {name: content for name, content in entries.items() if not (cache / name).exists()}
            _plant(cache, user)
            _store.cleanup(cache, keep=ours[-1].name, ledger=ledger)
            assert _survived(cache, user) == []
            assert [p.name for p in ours if p.exists()] == [ours[-1].name] and not leftover.exists()
            assert ledger.entries == {ours[-1].name}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=_ENTRIES)
def test_hypothesis_look_alikes_survive_real_rebuilds(entries: dict[str, str | None], hash_embed_model) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "kb"
        root.mkdir()
        for rel, text in FILES.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text, encoding="utf-8")
        cache = Path(tmp) / "index"
        KnowledgeBase.build(root, embed_model=hash_embed_model, cache_dir=cache)
        _plant(cache, entries)
        (root / "database.md").write_text("# Database\n\nBackups run hourly.\n", encoding="utf-8")
        KnowledgeBase.build(root, embed_model=hash_embed_model, cache_dir=cache)
        KnowledgeBase.build(root, embed_model=hash_embed_model, cache_dir=cache)
        assert _survived(cache, entries) == []


# --- a folder that would mix the index with the user's files is refused --------------------------------------


def test_the_reported_command_is_refused_with_one_line_and_nothing_is_touched(
        make_kb, monkeypatch, capsys) -> None:
    root = make_kb(FILES)
    _plant(root, LOOK_ALIKES)
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))

    def no_embedding(model: Any, texts: list[str]) -> np.ndarray:
        raise AssertionError("the refused build embedded something")

    monkeypatch.setattr(_embedding, "embed_texts", no_embedding)
    status = main(["index", str(root), "--cache-dir", str(root)])
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and str(root) in err and "--cache-dir" in err and "knowledge-base folder" in err
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before  # not even a lock file
    assert _survived(root, LOOK_ALIKES) == []


@pytest.mark.parametrize("where", ["the root", "a parent of the root", "a folder of the user's", "a file",
                                   "the default folder, made by the user"])
def test_a_cache_folder_that_is_not_ours_is_refused(make_kb, hash_embed_model, where: str) -> None:
    root = make_kb(FILES)
    cache = {"the root": root, "a parent of the root": root.parent, "a folder of the user's": root.parent / "mine",
             "a file": root.parent / "mine.txt", "the default folder, made by the user": root / ".crag_index"}[where]
    if where in ("a folder of the user's", "the default folder, made by the user"):
        cache.mkdir()
        _plant(cache, {"index-archive": None, "report.txt": "mine\n"})
    if where == "a file":
        cache.write_text("mine\n", encoding="utf-8")
    listing = sorted(str(p) for p in cache.parent.rglob("*"))
    with pytest.raises(IndexFolderError, match="--cache-dir") as info:
        KnowledgeBase.build(root, embed_model=hash_embed_model, cache_dir=None if where.startswith("the default") else cache)
    assert isinstance(info.value, CragLabError) and "\n" not in str(info.value) and str(cache) in str(info.value)
    assert sorted(str(p) for p in cache.parent.rglob("*")) == listing


def test_a_new_or_empty_folder_and_the_default_are_accepted(make_kb, tmp_path: Path, hash_embed_model) -> None:
    root = make_kb(FILES)
    empty = tmp_path / "empty"
    empty.mkdir()
    for cache in (empty, tmp_path / "new" / "deeper", None):
        kb = KnowledgeBase.build(root, embed_model=hash_embed_model, cache_dir=cache)
        assert kb.cache_dir == (cache if cache is not None else root / ".crag_index")
        ledger = json.loads((kb.cache_dir / _owned.LEDGER_FILE).read_text(encoding="utf-8"))
        assert ledger["written_by"] == "crag_lab" and _live(kb.cache_dir) in ledger["entries"]
    # The user may keep files in a folder the index owns; they are never touched.
    (empty / "notes.md").write_text("mine\n", encoding="utf-8")
    (root / "gateway.md").write_text("# Gateway\n\nChanged.\n", encoding="utf-8")
    KnowledgeBase.build(root, embed_model=hash_embed_model, cache_dir=empty)
    assert (empty / "notes.md").read_text(encoding="utf-8") == "mine\n"


def test_an_index_of_the_previous_version_loads_and_its_old_folders_are_kept(make_kb, hash_embed_model) -> None:
    root = make_kb(FILES)
    built = KnowledgeBase.build(root, embed_model=hash_embed_model)
    cache = built.cache_dir
    for name in OURS:  # what the previous version left: CURRENT and index-* only
        (cache / name).unlink(missing_ok=True)
    legacy = _live(cache)
    assert KnowledgeBase.load(root, embed_model=hash_embed_model).chunks == built.chunks
    (root / "gateway.md").write_text("# Gateway\n\nRewritten.\n", encoding="utf-8")
    rebuilt = KnowledgeBase.build(root, embed_model=hash_embed_model)
    assert rebuilt.build_report is not None and rebuilt.build_report["chunks_reused"] > 0
    assert (cache / legacy / "manifest.json").is_file()  # no ledger names it: never removed
    assert _live(cache) != legacy and (cache / _owned.LEDGER_FILE).is_file()
    (root / "gateway.md").write_text("# Gateway\n\nRewritten again.\n", encoding="utf-8")
    KnowledgeBase.build(root, embed_model=hash_embed_model)
    assert _index_folders(cache) == sorted([legacy, _live(cache)])  # the ledger's own old folder is gone


def test_an_unreadable_ledger_is_refused_not_guessed(make_kb, hash_embed_model) -> None:
    root = make_kb(FILES)
    cache = KnowledgeBase.build(root, embed_model=hash_embed_model).cache_dir
    (cache / _owned.LEDGER_FILE).write_text("{not json", encoding="utf-8")
    with pytest.raises(IndexFolderError, match=_owned.LEDGER_FILE):
        KnowledgeBase.build(root, embed_model=hash_embed_model)


# --- two builds of one folder at once --------------------------------------------------------------------


CONCURRENT_BUILD = """
import json, os, sys, time
sys.path.insert(0, {tests!r})
from conftest import HashEmbedding
from llama_index.core import StorageContext
from crag_lab.kb import KnowledgeBase

me, pause = {me!r}, {pause!r}
persist = StorageContext.persist

def slow_persist(self, *args, **kwargs):  # widens the window in which the other build finishes
    persist(self, *args, **kwargs)
    time.sleep(pause)

StorageContext.persist = slow_persist
open(os.path.join({sync!r}, me), "w").close()
while len(os.listdir({sync!r})) < 2:  # start both builds together
    time.sleep(0.01)
kb = KnowledgeBase.build({root!r}, embed_model=HashEmbedding(), cache_dir={cache!r})
print(json.dumps(kb.build_report))
"""


def test_two_concurrent_builds_of_one_folder_both_succeed(make_kb, tmp_path: Path, hash_embed_model) -> None:
    root = make_kb(FILES)
    cache, sync = tmp_path / "index", tmp_path / "sync"
    sync.mkdir()
    scripts = [textwrap.dedent(CONCURRENT_BUILD.format(tests=str(Path(__file__).parent), me=me, pause=pause,
                                                       sync=str(sync), root=str(root), cache=str(cache)))
               for me, pause in (("fast", 0.2), ("slow", 2.5))]
    procs = [subprocess.Popen([sys.executable, "-c", s], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for s in scripts]
    outs = [p.communicate(timeout=300) for p in procs]
    for proc, (_, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err
        assert "FileNotFoundError" not in err
    reports = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    # One build embedded everything; the other waited for the lock and reused its result.
    assert sorted(r["chunks_embedded"] for r in reports) == [0, 3]
    kb = KnowledgeBase.load(root, embed_model=hash_embed_model, cache_dir=cache)
    assert kb.files == ["database.md", "gateway.md", "team/oncall.txt"]
    assert sorted(p.name for p in cache.iterdir() if p.name not in OURS) == ["CURRENT", _live(cache)]
    shutil.rmtree(sync)
