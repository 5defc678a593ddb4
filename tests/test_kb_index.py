"""The persisted index (crag_lab/kb/index.py): build, load, incremental rebuilds, repairs, primitives."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from crag_lab.kb import (
    ChunkSettings,
    EmbeddingModelMismatchError,
    EmptyKnowledgeBaseError,
    FileNotInKnowledgeBaseError,
    IndexCorruptError,
    IndexMissingError,
    KnowledgeBase,
    PathOutsideKnowledgeBaseError,
    _embedding,
)
from crag_lab.tools import ToolError

FILES = {
    "gateway.md": (
        "# Gateway\n\n"
        "The gateway terminates TLS and routes requests to the services.\n\n"
        "## Certificates\n\n"
        "Rotate the gateway certificates every 90 days with `certctl rotate --all`.\n"
        "Expired certificates make clients fail with error E4012 (see RFC 5280).\n"
    ),
    "database.md": (
        "# Database\n\n"
        "PostgreSQL 16 stores the orders.\n\n"
        "## Backups\n\n"
        "Nightly backups run at 02:00 UTC and are kept for 30 days.\n"
    ),
    "team/oncall.txt": "On-call rotation changes every Monday.\nPage the on-call engineer through PagerDuty.\n",
    "notes.rst": "Release notes\n=============\n\nVersion 2.4 adds rate limiting to the gateway.\n",
}


def lines_of(root: Path, rel: str, start: int, end: int) -> str:
    return "\n".join((root / rel).read_text(encoding="utf-8").split("\n")[start - 1 : end])


def cache_entries(kb: KnowledgeBase) -> list[str]:
    """The index folder's entries but its ledger and build lock (`crag_lab.kb._owned`)."""
    return sorted(p.name for p in kb.cache_dir.iterdir() if p.name not in ("crag-lab-owned.json", "crag-lab.lock"))


@pytest.fixture
def kb_root(make_kb) -> Path:
    return make_kb(FILES)


class EmbedSpy:
    """Counts the texts each build embeds (wraps ``_embedding.embed_texts``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[list[str]] = []
        real = _embedding.embed_texts

        def spy(model: Any, texts: list[str]) -> np.ndarray:
            self.calls.append(list(texts))
            return real(model, texts)

        monkeypatch.setattr(_embedding, "embed_texts", spy)

    @property
    def texts(self) -> list[str]:
        return [t for call in self.calls for t in call]


# --- build and load -------------------------------------------------------------------------


def test_build_then_load_round_trips_without_embedding(kb_root: Path, embed_model) -> None:
    built = KnowledgeBase.build(kb_root, embed_model=embed_model)
    assert built.files == ["database.md", "gateway.md", "notes.rst", "team/oncall.txt"]
    report = built.build_report
    assert report is not None
    assert report["files_total"] == 4 and report["files_changed"] == 4 and report["files_removed"] == 0
    assert report["chunks_embedded"] == report["chunks_total"] == len(built.chunks)
    assert report["chunks_reused"] == 0 and report["warnings"] == []
    assert report["full_rebuild_reason"] == "no previous index"

    loaded = KnowledgeBase.load(kb_root)  # default model: the same bundled MiniLM
    assert loaded.chunks == built.chunks
    assert loaded.files == built.files
    assert loaded.build_report is None
    assert loaded.embed_model.loaded is False  # type: ignore[attr-defined]
    assert not loaded.is_stale()
    for chunk in loaded.chunks:
        assert chunk.text == lines_of(kb_root, chunk.path, chunk.line_start, chunk.line_end)

    manifest = json.loads(
        (loaded.cache_dir / (loaded.cache_dir / "CURRENT").read_text().strip() / "manifest.json").read_text()
    )
    assert manifest["embedding"] == {"model": "sentence-transformers/all-MiniLM-L6-v2", "dim": 384}
    assert manifest["chunking"]["max_tokens"] == ChunkSettings().max_tokens
    assert set(manifest["files"]) == set(built.files)
    assert str(kb_root) not in json.dumps(manifest)


def test_vector_retriever_returns_cosine_scored_nodes_with_line_metadata(kb_root: Path, embed_model) -> None:
    kb = KnowledgeBase.build(kb_root, embed_model=embed_model)
    hits = kb.vector_retriever(top_k=3).retrieve("how often must the TLS certificates be rotated?")
    assert len(hits) == 3
    top = hits[0]
    meta = top.node.metadata
    assert meta["path"] == "gateway.md" and meta["title"] == "Gateway > Certificates"
    assert top.node.get_content() == lines_of(kb_root, "gateway.md", meta["line_start"], meta["line_end"])
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert all(s is not None and -1.0 <= s <= 1.0 + 1e-6 for s in scores)
    assert top.score is not None and top.score > 0.4


def test_keyword_retriever_is_bm25_over_the_same_nodes(kb_root: Path, embed_model) -> None:
    kb = KnowledgeBase.build(kb_root, embed_model=embed_model)
    hits = kb.keyword_retriever(top_k=2).retrieve("E4012")
    assert hits[0].node.metadata["path"] == "gateway.md"
    assert hits[0].score is not None and hits[0].score > 0
    assert hits[0].node.metadata["line_start"] == 5
    # a top_k above the number of chunks is fine
    assert len(kb.keyword_retriever(top_k=50).retrieve("backups")) == len(kb.chunks)
    assert kb.keyword_retriever(1).bm25 is kb.keyword_retriever(2).bm25  # type: ignore[attr-defined]  # one shared BM25
    with pytest.raises(ValueError, match="top_k"):
        kb.keyword_retriever(0)


def test_chunk_ids_are_the_same_across_builds_and_folders(make_kb, embed_model) -> None:
    first = KnowledgeBase.build(make_kb(FILES, name="one"), embed_model=embed_model)
    second = KnowledgeBase.build(make_kb(FILES, name="two"), embed_model=embed_model)
    assert [c.id for c in first.chunks] == [c.id for c in second.chunks]


def test_a_custom_cache_dir_is_used_and_never_indexed(kb_root: Path, tmp_path: Path, hash_embed_model) -> None:
    inside = kb_root / "index_here"
    kb = KnowledgeBase.build(kb_root, embed_model=hash_embed_model, cache_dir=inside)
    assert (inside / "CURRENT").is_file() and not (kb_root / ".crag_index").exists()
    rebuilt = KnowledgeBase.build(kb_root, embed_model=hash_embed_model, cache_dir=inside)
    assert rebuilt.build_report is not None and rebuilt.build_report["chunks_embedded"] == 0
    assert all(not f.startswith("index_here") for f in kb.files)
    outside = tmp_path / "elsewhere"
    KnowledgeBase.build(kb_root, embed_model=hash_embed_model, cache_dir=outside)
    assert KnowledgeBase.load(kb_root, embed_model=hash_embed_model, cache_dir=outside).files == kb.files


# --- incremental rebuilds -------------------------------------------------------------------


def test_editing_one_file_re_embeds_only_its_chunks(kb_root: Path, embed_model, monkeypatch) -> None:
    before = KnowledgeBase.build(kb_root, embed_model=embed_model)
    spy = EmbedSpy(monkeypatch)
    (kb_root / "database.md").write_text(
        "# Database\n\nPostgreSQL 16 stores the orders.\n\n## Backups\n\nBackups run hourly and are kept for 7 days.\n"
    )
    after = KnowledgeBase.build(kb_root, embed_model=embed_model)
    report = after.build_report
    assert report is not None
    db_chunks = [c for c in after.chunks if c.path == "database.md"]
    assert report["files_changed"] == 1 and report["files_removed"] == 0
    assert report["chunks_embedded"] == len(db_chunks) == len(spy.texts)
    assert report["chunks_reused"] == len(after.chunks) - len(db_chunks)
    assert report["full_rebuild_reason"] is None
    assert all("path: database.md" in t for t in spy.texts)
    # unchanged files keep their chunks (ids included)
    assert [c for c in after.chunks if c.path != "database.md"] == [c for c in before.chunks if c.path != "database.md"]
    # and the results reflect the edit
    top = after.vector_retriever(1).retrieve("how long are backups kept?")[0]
    assert "hourly" in top.node.get_content()
    assert after.keyword_retriever(1).retrieve("hourly")[0].node.metadata["path"] == "database.md"
    assert [p.path for p in after.grep("nightly")] == []
    reloaded = KnowledgeBase.load(kb_root)
    assert reloaded.chunks == after.chunks
    assert "hourly" in reloaded.vector_retriever(1).retrieve("how long are backups kept?")[0].node.get_content()


def test_texts_go_to_the_model_longest_first_and_come_back_in_order(hash_embed_model, monkeypatch) -> None:
    # Longest first is how SentenceTransformer.encode batches: each batch pads to similar lengths.
    sent: list[str] = []
    real = type(hash_embed_model)._get_text_embeddings

    def record(self: Any, texts: list[str]) -> Any:
        sent.extend(texts)
        return real(self, texts)

    monkeypatch.setattr(type(hash_embed_model), "_get_text_embeddings", record)
    texts = ["port 8443", "the gateway listens on port 8443 for TLS", "", "rotate certificates"]
    vectors = _embedding.embed_texts(hash_embed_model, texts)
    assert sent == [texts[1], texts[3], texts[0], texts[2]]
    expected = np.asarray([hash_embed_model._vector(t) for t in texts], dtype=np.float32)
    np.testing.assert_array_equal(vectors, expected)
    assert _embedding.embed_texts(hash_embed_model, []).shape[0] == 0


def test_reused_vectors_stay_with_their_chunks(kb_root: Path, tmp_path: Path, hash_embed_model) -> None:
    KnowledgeBase.build(kb_root, embed_model=hash_embed_model)
    (kb_root / "database.md").write_text("# Database\n\nNow on MySQL.\n")
    (kb_root / "notes.rst").unlink()
    (kb_root / "added.md").write_text("# Added\n\nA new page.\n")
    incremental = KnowledgeBase.build(kb_root, embed_model=hash_embed_model)
    fresh = KnowledgeBase.build(kb_root, embed_model=hash_embed_model, cache_dir=tmp_path / "fresh")
    assert fresh.build_report is not None and fresh.build_report["chunks_reused"] == 0
    assert incremental.chunks == fresh.chunks

    def vectors(kb: KnowledgeBase) -> np.ndarray:
        faiss_index = kb.index.vector_store.client  # type: ignore[attr-defined]
        return faiss_index.reconstruct_n(0, faiss_index.ntotal)

    np.testing.assert_array_equal(vectors(incremental), vectors(fresh))


def test_a_rebuild_with_nothing_changed_embeds_nothing(kb_root: Path, embed_model, monkeypatch) -> None:
    first = KnowledgeBase.build(kb_root, embed_model=embed_model)
    spy = EmbedSpy(monkeypatch)
    again = KnowledgeBase.build(kb_root, embed_model=embed_model)
    assert spy.calls == []
    report = again.build_report
    assert report is not None
    assert (report["files_changed"], report["chunks_embedded"], report["chunks_reused"]) == (0, 0, len(first.chunks))
    assert again.chunks == first.chunks


def test_new_and_deleted_files(kb_root: Path, embed_model, monkeypatch) -> None:
    KnowledgeBase.build(kb_root, embed_model=embed_model)
    (kb_root / "database.md").unlink()
    (kb_root / "runbook.md").write_text("# Runbook\n\nRestart the gateway with `systemctl restart gw`.\n")
    spy = EmbedSpy(monkeypatch)
    kb = KnowledgeBase.build(kb_root, embed_model=embed_model)
    report = kb.build_report
    assert report is not None
    assert (report["files_changed"], report["files_removed"]) == (1, 1)
    assert report["chunks_embedded"] == len(spy.texts) == 1
    assert "database.md" not in kb.files and "runbook.md" in kb.files
    assert all(c.path != "database.md" for c in kb.chunks)
    paths = {h.node.metadata["path"] for h in kb.vector_retriever(len(kb.chunks)).retrieve("PostgreSQL backups")}
    assert "database.md" not in paths
    assert all(p.path != "database.md" for p in kb.grep("PostgreSQL"))


def test_changed_chunk_settings_or_model_mean_a_full_rebuild(kb_root: Path, embed_model, hash_embed_model) -> None:
    first = KnowledgeBase.build(kb_root, embed_model=embed_model)
    other = KnowledgeBase.build(
        kb_root,
        embed_model=embed_model,
        chunk_settings=ChunkSettings(target_tokens=20, max_tokens=40, overlap_tokens=8),
    )
    assert other.build_report is not None
    assert other.build_report["full_rebuild_reason"] == "chunk settings changed"
    assert other.build_report["chunks_reused"] == 0
    hashed = KnowledgeBase.build(kb_root, embed_model=hash_embed_model)
    assert hashed.build_report is not None
    assert hashed.build_report["full_rebuild_reason"].startswith("embedding model changed")
    assert hashed.build_report["chunks_embedded"] == len(first.chunks)
    with pytest.raises(EmbeddingModelMismatchError, match="hash-64"):
        KnowledgeBase.load(kb_root)  # the default model is not the one the index was built with
    assert KnowledgeBase.load(kb_root, embed_model=hash_embed_model).chunks == hashed.chunks


def test_is_stale_notices_edits_additions_and_deletions(kb_root: Path, hash_embed_model) -> None:
    KnowledgeBase.build(kb_root, embed_model=hash_embed_model)
    kb = KnowledgeBase.load(kb_root, embed_model=hash_embed_model)
    assert not kb.is_stale()
    (kb_root / "notes.rst").write_text("Release notes\n=============\n\nVersion 2.5.\n")
    assert kb.is_stale()
    KnowledgeBase.build(kb_root, embed_model=hash_embed_model)
    assert not KnowledgeBase.load(kb_root, embed_model=hash_embed_model).is_stale()
    (kb_root / "extra.md").write_text("# Extra\n")
    assert KnowledgeBase.load(kb_root, embed_model=hash_embed_model).is_stale()


def test_build_report_lists_warnings_on_every_build(make_kb, hash_embed_model) -> None:
    root = make_kb({"a.md": "# A\n\ntext\n", "bin.md": b"\x00\x00", "latin.txt": "caf\xe9\n".encode("latin-1")})
    for _ in range(2):  # the second build reuses everything but still reports the same warnings
        report = KnowledgeBase.build(root, embed_model=hash_embed_model).build_report
        assert report is not None
        assert [(w["event"], w["path"]) for w in report["warnings"]] == [
            ("file_skipped", "bin.md"),
            ("file_decoded_with_replacement", "latin.txt"),
        ]


def test_an_empty_knowledge_base_cannot_be_built(make_kb, hash_embed_model) -> None:
    root = make_kb({"empty.md": "\n"})
    with pytest.raises(EmptyKnowledgeBaseError, match=str(root)):
        KnowledgeBase.build(root, embed_model=hash_embed_model)
    assert not (root / ".crag_index" / "CURRENT").exists()


# --- missing, corrupt and interrupted indexes -----------------------------------------------


def test_loading_without_an_index_says_which_command_builds_it(kb_root: Path) -> None:
    with pytest.raises(IndexMissingError, match=r"crag-lab index .*KnowledgeBase\.build") as info:
        KnowledgeBase.load(kb_root)
    assert str(kb_root) in str(info.value)


def _live_folder(root: Path) -> Path:
    cache = root / ".crag_index"
    return cache / (cache / "CURRENT").read_text().strip()


@pytest.mark.parametrize(
    "damage",
    [
        lambda folder: (folder / "default__vector_store.json").write_bytes(
            (folder / "default__vector_store.json").read_bytes()[:100]
        ),
        lambda folder: (folder / "manifest.json").write_text((folder / "manifest.json").read_text()[:40]),
        lambda folder: (folder / "docstore.json").write_text("{"),
        lambda folder: (folder / "manifest.json").unlink(),
    ],
    ids=["truncated-faiss", "truncated-manifest", "corrupt-docstore", "missing-manifest"],
)
def test_a_damaged_index_raises_on_load_and_build_repairs_it(kb_root: Path, hash_embed_model, damage) -> None:
    good = KnowledgeBase.build(kb_root, embed_model=hash_embed_model)
    damage(_live_folder(kb_root))
    with pytest.raises(IndexCorruptError, match="crag-lab index"):
        KnowledgeBase.load(kb_root, embed_model=hash_embed_model)
    repaired = KnowledgeBase.build(kb_root, embed_model=hash_embed_model)
    assert repaired.build_report is not None
    assert repaired.build_report["full_rebuild_reason"].startswith("previous index unreadable")
    assert repaired.build_report["chunks_embedded"] == len(good.chunks)
    assert KnowledgeBase.load(kb_root, embed_model=hash_embed_model).chunks == good.chunks
    assert len(cache_entries(repaired)) == 2  # CURRENT and one index folder


def test_a_manifest_that_disagrees_with_the_vectors_is_corrupt(kb_root: Path, hash_embed_model) -> None:
    KnowledgeBase.build(kb_root, embed_model=hash_embed_model)
    manifest_path = _live_folder(kb_root) / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["files"]["gateway.md"]["chunks"].pop()
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(IndexCorruptError, match="FAISS file holds"):
        KnowledgeBase.load(kb_root, embed_model=hash_embed_model)


def test_a_build_that_fails_while_embedding_leaves_the_previous_index(
    kb_root: Path, hash_embed_model, monkeypatch
) -> None:
    before = KnowledgeBase.build(kb_root, embed_model=hash_embed_model)
    (kb_root / "gateway.md").write_text("# Gateway\n\nCompletely rewritten.\n")

    def boom(model: Any, texts: list[str]) -> np.ndarray:
        raise RuntimeError("embedding server went away")

    monkeypatch.setattr(_embedding, "embed_texts", boom)
    with pytest.raises(RuntimeError, match="went away"):
        KnowledgeBase.build(kb_root, embed_model=hash_embed_model)
    monkeypatch.undo()
    survivor = KnowledgeBase.load(kb_root, embed_model=hash_embed_model)
    assert survivor.chunks == before.chunks
    assert survivor.is_stale()
    assert not any(name.startswith(".tmp-") for name in cache_entries(survivor))
    after = KnowledgeBase.build(kb_root, embed_model=hash_embed_model)
    assert any("Completely rewritten." in c.text for c in after.chunks)


KILLED_BUILD = """
import os, sys
sys.path.insert(0, {tests!r})
from conftest import HashEmbedding
from crag_lab.kb import KnowledgeBase
from crag_lab.kb import _store

def die(*args, **kwargs):
    os._exit(9)  # like SIGKILL: no cleanup, no exception handlers

_store.swap_current = die
KnowledgeBase.build({root!r}, embed_model=HashEmbedding())
"""


def test_a_killed_build_leaves_the_previous_index_and_the_next_build_cleans_up(kb_root: Path, hash_embed_model) -> None:
    before = KnowledgeBase.build(kb_root, embed_model=hash_embed_model)
    (kb_root / "gateway.md").write_text("# Gateway\n\nRewritten before the crash.\n")
    script = KILLED_BUILD.format(tests=str(Path(__file__).parent), root=str(kb_root))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 9, proc.stderr
    leftovers = [n for n in cache_entries(before) if n != "CURRENT" and n != _live_folder(kb_root).name]
    assert leftovers, "the killed build should have left a complete but unused folder behind"

    survivor = KnowledgeBase.load(kb_root, embed_model=hash_embed_model)
    assert survivor.chunks == before.chunks
    after = KnowledgeBase.build(kb_root, embed_model=hash_embed_model)
    assert any("Rewritten before the crash." in c.text for c in after.chunks)
    assert cache_entries(after) == sorted(["CURRENT", _live_folder(kb_root).name])


def test_loading_500_chunks_takes_well_under_a_second(make_kb, hash_embed_model) -> None:
    files = {
        f"doc{i:02d}.md": "\n\n".join(
            f"## Topic {i}.{j}\n\nDetails of topic {i}.{j}: setting {j} controls behaviour {i * j}." for j in range(10)
        )
        for i in range(50)
    }
    root = make_kb(files)
    built = KnowledgeBase.build(root, embed_model=hash_embed_model)
    assert len(built.chunks) >= 500
    timings = []
    for _ in range(3):
        started = time.perf_counter()
        loaded = KnowledgeBase.load(root, embed_model=hash_embed_model)
        timings.append(time.perf_counter() - started)
    assert len(loaded.chunks) == len(built.chunks)
    assert min(timings) < 0.5, timings


# --- read and grep --------------------------------------------------------------------------


@pytest.fixture
def small_kb(kb_root: Path, hash_embed_model) -> KnowledgeBase:
    return KnowledgeBase.build(kb_root, embed_model=hash_embed_model)


def test_read_returns_exact_lines(small_kb: KnowledgeBase, kb_root: Path) -> None:
    whole = small_kb.read("gateway.md")
    assert whole.text == (kb_root / "gateway.md").read_text().rstrip("\n")
    assert (whole.line_start, whole.line_end, whole.total_lines, whole.title) == (1, 8, 8, "Gateway")
    part = small_kb.read("gateway.md", 5, 6)
    assert part.text == lines_of(kb_root, "gateway.md", 5, 6)
    assert (part.line_start, part.line_end) == (5, 6)
    clipped = small_kb.read("./team/oncall.txt", 2, 99)
    assert (clipped.path, clipped.text, clipped.line_end) == (
        "team/oncall.txt",
        "Page the on-call engineer through PagerDuty.",
        2,
    )
    capped = small_kb.read("gateway.md", max_lines=3)
    assert (capped.line_start, capped.line_end, capped.total_lines) == (1, 3, 8)


def test_read_rejects_impossible_ranges(small_kb: KnowledgeBase) -> None:
    with pytest.raises(ValueError, match="has 8 lines"):
        small_kb.read("gateway.md", 9)
    with pytest.raises(ValueError, match="start_line must be >= 1"):
        small_kb.read("gateway.md", 0)
    with pytest.raises(ValueError, match="end_line"):
        small_kb.read("gateway.md", 5, 4)


def test_paths_that_escape_the_root_are_refused(small_kb: KnowledgeBase, kb_root: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("# Secret\n")
    (kb_root / "escape.md").symlink_to(secret)
    (kb_root / "linkdir").symlink_to(tmp_path)
    for bad in ["../secret.md", "team/../../secret.md", "/etc/passwd", str(secret), "escape.md", "linkdir/secret.md"]:
        with pytest.raises(PathOutsideKnowledgeBaseError) as info:
            small_kb.read(bad)
        assert repr(bad) in str(info.value)
        assert isinstance(info.value, ToolError)
    with pytest.raises(PathOutsideKnowledgeBaseError):
        small_kb.grep("secret", path="../secret.md")


def test_hidden_missing_and_binary_files_are_not_readable(small_kb: KnowledgeBase, kb_root: Path) -> None:
    (kb_root / ".env.md").write_text("TOKEN=abc\n")
    (kb_root / "blob.md").write_bytes(b"\x00\x01")
    (kb_root / "script.py").write_text("print(1)\n")
    with pytest.raises(FileNotInKnowledgeBaseError, match="hidden"):
        small_kb.read(".env.md")
    with pytest.raises(FileNotInKnowledgeBaseError, match="hidden"):
        small_kb.read(".crag_index/CURRENT")
    with pytest.raises(FileNotInKnowledgeBaseError, match=r"did you mean 'gateway\.md'"):
        small_kb.read("gatway.md")
    for name in ("blob.md", "script.py"):
        with pytest.raises(FileNotInKnowledgeBaseError, match="not a knowledge-base text file"):
            small_kb.read(name)


def test_grep_returns_merged_blocks_with_context(make_kb, hash_embed_model) -> None:
    lines = [f"line {n}" for n in range(1, 31)]
    for n in (5, 7, 20):
        lines[n - 1] = f"line {n} has the NEEDLE"
    root = make_kb({"hay.txt": "\n".join(lines) + "\n"})
    kb = KnowledgeBase.build(root, embed_model=hash_embed_model)
    blocks = kb.grep("needle", context=2)
    assert [(b.line_start, b.line_end, b.match_lines) for b in blocks] == [(3, 9, (5, 7)), (18, 22, (20,))]
    for block in blocks:
        assert block.text == lines_of(root, "hay.txt", block.line_start, block.line_end)
    assert [(b.line_start, b.line_end) for b in kb.grep("needle", context=0)] == [(5, 5), (7, 7), (20, 20)]
    limited = kb.grep("needle", context=1, max_matches=2)
    assert [b.match_lines for b in limited] == [(5, 7)]
    assert limited[0].line_end == 8


def test_grep_falls_back_to_a_literal_search_and_can_be_limited_to_one_file(small_kb: KnowledgeBase) -> None:
    assert [p.line_start for p in small_kb.grep("E4012 (see", context=0)] == [8]  # an invalid regex
    assert [p.path for p in small_kb.grep(r"gate\w+", context=0)] == [
        "gateway.md",
        "gateway.md",
        "gateway.md",
        "notes.rst",
    ]
    assert [p.path for p in small_kb.grep("gateway", context=0, path="notes.rst")] == ["notes.rst"]
    hit = small_kb.grep("E4012", context=0)[0]
    assert (hit.line_start, hit.title) == (8, "Gateway > Certificates")
    assert small_kb.grep("no such text anywhere") == []
