"""Hardening, second round (issue 14): each class of hostile or odd input gets a test, and a generated
family of cases where the class is open.

- **untrusted patterns**: a ``grep`` pattern from a model or a user costs bounded time and memory;
  a refused one is a ``PatternTooExpensiveError`` (a ``ToolError``) that the graph audits.
- **filesystem oddities**: symlink loops, dangling symlinks, FIFOs, sockets, unreadable files and
  folders, undecodable file names are skipped with a warning in the build report; nothing hangs.
- **odd strings**: a lone surrogate in a question is refused at the door, at once; text that only
  gets stored (answers, audit events) is saved and loaded back exactly.
- **non-string questions**: ``None``, numbers, lists, bytes are a ``TypeError`` at every public door.
- **config changes**: every way of changing a ``CragConfig`` validates like the constructor.
- **corrupt experiment files**: the error names file and line; ``skip_invalid=True`` keeps the rest.
- **CLI errors**: one line on stderr, exit status 2, and the cheap checks before the model loads.
"""

from __future__ import annotations

import copy
import errno
import json
import os
import re
import socket
import tempfile
import threading
import time
import unicodedata
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from conftest import HashEmbedding
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import crag_lab.embeddings
from crag_lab import CragConfig, Experiment, Lab, build_graph
from crag_lab._text import check_question, encodable, json_line, lone_surrogate
from crag_lab.audit import JsonlSink
from crag_lab.cli import main
from crag_lab.errors import CragLabError, ExperimentFileError, InvalidQuestionError
from crag_lab.graph import initial_state
from crag_lab.kb import (
    EmptyKnowledgeBaseError,
    FileNotInKnowledgeBaseError,
    KnowledgeBase,
    KnowledgeBaseError,
    PatternTooExpensiveError,
    _files,
    load_documents,
)
from crag_lab.kb._regex import MAX_PATTERN_CHARS, MAX_REPEAT, Matcher
from crag_lab.testing import ScriptedLLM, StaticTool
from crag_lab.tools import ToolError
from crag_lab.tools.kb_tools import GrepTool, kb_tools

COMPLEX = '{"query_type": "fact", "complexity": "complex", "suggested_tools": ["grep", "vector_search"]}'
ITEMS = [{"text": "The gateway listens on port 8443.", "path": "gw.md", "line": 1, "line_end": 1, "score": 0.9}]
FAST = CragConfig(retry_backoff_s=0.0, model_timeout_s=5.0, max_iterations=1)
EVIL = "(a|aa)+$"  # exponential backtracking against a run of "a" that does not end the line
EVIL_LINE = "a" * 60 + "!"


def scripted_lab(**kwargs: Any) -> Lab:
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": '[{"tool": "vector_search", "args": {"query": "port"}}]',
                       "grade": "[0.9]", "synthesize": "Port 8443 [1]."})
    return Lab([StaticTool("vector_search", ITEMS)], llm=llm, config=FAST, **kwargs)


@pytest.fixture
def hash_kb(make_kb: Callable[..., Path]) -> Callable[..., KnowledgeBase]:
    def build(files: Mapping[str, str | bytes]) -> KnowledgeBase:
        return KnowledgeBase.build(make_kb(files), embed_model=HashEmbedding())

    return build


# ============================================================================================
# 1. Untrusted patterns
# ============================================================================================


def test_untrusted_pattern_with_catastrophic_backtracking_is_refused_within_the_time_limit(hash_kb) -> None:
    kb = hash_kb({"a.md": f"# A\n\n{EVIL_LINE}\n"})
    start = time.monotonic()
    with pytest.raises(PatternTooExpensiveError, match=r"too expensive: searching took longer than 0\.2 s") as info:
        kb.grep(EVIL, timeout_s=0.2)
    assert time.monotonic() - start < 2.0
    assert isinstance(info.value, ToolError) and repr(EVIL) in str(info.value)
    assert [p.line_start for p in kb.grep("a+!", context=0)] == [3]  # a harmless pattern still works


@pytest.mark.parametrize("pattern", ["a{4294967294}", "a{99999999999}", "(?:a{1000}){1000}", f"x{{{MAX_REPEAT + 1}}}",
                                     "b" * (MAX_PATTERN_CHARS + 1), "(" * 499 + "a" + ")" * 499],
                         ids=["huge-repeat", "overflowing-repeat", "nested-repeats", "repeat-over-limit",
                              "too-long", "deeply-nested"])
def test_untrusted_pattern_that_would_take_memory_to_compile_is_refused_before_compiling(pattern: str) -> None:
    start = time.monotonic()
    with pytest.raises(PatternTooExpensiveError, match="too expensive"):
        Matcher.compile(pattern).search("a")
    assert time.monotonic() - start < 1.0


def test_untrusted_pattern_precompiled_by_a_user_is_bounded_too(hash_kb) -> None:
    kb = hash_kb({"a.md": f"# A\n\n{EVIL_LINE}\n"})
    with pytest.raises(PatternTooExpensiveError):
        kb.grep(re.compile(EVIL), timeout_s=0.2)
    assert [p.line_start for p in kb.grep(re.compile("^A{10}"), context=0)] == []  # flags kept: case-sensitive
    assert [p.line_start for p in kb.grep(re.compile("^A{10}", re.IGNORECASE), context=0)] == [3]


def test_untrusted_pattern_from_the_model_is_audited_as_a_tool_error_and_the_run_answers(hash_kb) -> None:
    kb = hash_kb({"a.md": f"# A\n\n{EVIL_LINE}\n"})
    plan = json.dumps([{"tool": "grep", "args": {"pattern": EVIL}}, {"tool": "vector_search", "args": {"query": "port"}}])
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": plan, "grade": "[0.9]", "synthesize": "Port 8443 [1]."})
    graph = build_graph(llm, [GrepTool(kb, timeout_s=0.2), StaticTool("vector_search", ITEMS)], FAST)
    start = time.monotonic()
    state = graph.invoke(initial_state("Which port?"), {"recursion_limit": FAST.recursion_limit})
    assert time.monotonic() - start < 10.0
    [error] = [e for e in state["audit"] if e["event"] == "tool_error"]
    assert error["tool"] == "grep" and "too expensive" in error["error"] and error["level"] == "warning"
    assert "8443" in state["answer"]


def test_untrusted_pattern_through_the_grep_tool_raises_a_tool_error(hash_kb) -> None:
    kb = hash_kb({"a.md": f"# A\n\n{EVIL_LINE}\n"})
    grep = {t.name: t for t in kb_tools(kb)}["grep"]
    with pytest.raises(ToolError, match=r"grep pattern .* too expensive"):
        grep({"pattern": "a" * 5000})
    assert json.loads(grep({"pattern": "a(b"})) == []  # an invalid regex is still searched literally


# Patterns built from nested groups, alternations and quantifiers: the shapes that backtrack.
_ATOMS = st.sampled_from(["a", "aa", ".", r"\w", "[ab]", "a?", r"\s?", "b"])


def _combine(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    quantifier = st.sampled_from(["+", "*", "?", "{1,3}", "{2,}", "+?", ""])
    return st.one_of(
        st.builds(lambda x, q: f"({x}){q}", inner, quantifier),
        st.builds(lambda x, y: f"{x}|{y}", inner, inner),
        st.builds(lambda x, y: x + y, inner, inner),
    )


PATTERNS = st.builds(lambda body, anchor: body + anchor, st.recursive(_ATOMS, _combine, max_leaves=8),
                     st.sampled_from(["", "$", "b", "!$"]))
LINES = st.builds(lambda ch, n, end: ch * n + end, st.sampled_from(["a", "ab", " a"]), st.integers(0, 80),
                  st.sampled_from(["", "!", "b", "\n"]))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=PATTERNS, line=LINES)
def test_untrusted_pattern_of_any_nesting_answers_or_is_refused_within_its_budget(pattern: str, line: str) -> None:
    matcher = Matcher.compile(pattern, timeout_s=0.05)
    # CPU time of this thread: a runaway match burns it; a busy machine that pauses the process does not
    start = time.thread_time()
    try:
        found: bool | None = matcher.search(line)
    except PatternTooExpensiveError as exc:
        assert "too expensive" in str(exc)
        found = None
    # the matcher's own time only: the standard library's check below may backtrack for a second on its own
    assert time.thread_time() - start < 1.0
    if found is not None and len(line) <= 12:  # short enough for the standard library to decide too
        assert found == bool(re.search(pattern, line, re.IGNORECASE))


# ============================================================================================
# 2. Filesystem oddities
# ============================================================================================


def odd_tree(root: Path, outside: Path) -> None:
    """A folder with one readable file and one of every oddity a real file system can hold."""
    (root / "sub").mkdir(parents=True)
    (root / "good.md").write_text("# Good\n\nThe port is 8443.\n", encoding="utf-8")
    (root / "sub" / "inner.md").write_text("# Inner\n\ntext\n", encoding="utf-8")
    (root / "self-loop.md").symlink_to("self-loop.md")
    (root / "loop-a.md").symlink_to("loop-b.md")
    (root / "loop-b.md").symlink_to("loop-a.md")
    (root / "dangling.md").symlink_to("missing.md")
    (root / "alias.md").symlink_to(root / "good.md")
    (root / "leak.md").symlink_to(outside)
    (root / "up").symlink_to(root)  # a symlinked folder: never followed, so no endless walk
    (root / "folder.md").mkdir()
    os.mkfifo(root / "pipe.md")
    os.mkfifo(root / "sub" / "pipe.txt")
    os.mkfifo(root / "pipe.bin")  # not a text extension: ignored silently


EXPECTED_SKIPS = {
    "self-loop.md": "symlink loop",
    "loop-a.md": "symlink loop",
    "loop-b.md": "symlink loop",
    "dangling.md": "dangling symlink: its target does not exist",
    "leak.md": "symlink to a file outside the knowledge base",
    "pipe.md": "not a regular file (a FIFO)",
    "sub/pipe.txt": "not a regular file (a FIFO)",
}


@pytest.fixture
def odd_root(tmp_path: Path) -> Path:
    outside = tmp_path / "outside.md"
    outside.write_text("# Secret\n", encoding="utf-8")
    odd_tree(tmp_path / "kb", outside)
    return tmp_path / "kb"


def run_with_deadline(fn: Callable[[], Any], seconds: float = 60.0) -> Any:
    """Run ``fn`` in a thread; fail (instead of hanging the suite) if it blocks, as reading a FIFO would."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = fn()
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked: an odd file was opened as if it were a regular one"
    if "error" in result:
        raise result["error"]
    return result["value"]


def test_filesystem_oddities_symlink_loops_dangling_links_and_fifos_are_skipped_with_warnings(odd_root: Path) -> None:
    docs = run_with_deadline(lambda: load_documents(odd_root))
    assert [f.path for f in docs.files] == ["alias.md", "good.md", "sub/inner.md"]
    assert {w["path"]: w["reason"] for w in docs.warnings} == EXPECTED_SKIPS
    assert all(w["event"] == "file_skipped" for w in docs.warnings)


def test_filesystem_oddities_appear_in_the_build_report_and_the_build_succeeds(odd_root: Path) -> None:
    kb = run_with_deadline(lambda: KnowledgeBase.build(odd_root, embed_model=HashEmbedding()))
    assert kb.files == ["alias.md", "good.md", "sub/inner.md"]
    assert kb.build_report is not None
    assert {w["path"]: w["reason"] for w in kb.build_report["warnings"]} == EXPECTED_SKIPS
    again = run_with_deadline(lambda: KnowledgeBase.build(odd_root, embed_model=HashEmbedding()))
    assert again.build_report is not None and again.build_report["chunks_embedded"] == 0
    assert run_with_deadline(again.is_stale) is False


def test_filesystem_oddities_are_refused_by_read_file_and_grep_without_blocking(odd_root: Path) -> None:
    kb = run_with_deadline(lambda: KnowledgeBase.build(odd_root, embed_model=HashEmbedding()))
    for name, reason in [("self-loop.md", "symlink loop"), ("dangling.md", "dangling symlink"),
                         ("pipe.md", "a FIFO"), ("folder.md", "a folder")]:
        with pytest.raises(FileNotInKnowledgeBaseError, match=re.escape(reason)):
            run_with_deadline(lambda name=name: kb.read(name))
        with pytest.raises(FileNotInKnowledgeBaseError):
            run_with_deadline(lambda name=name: kb.grep("port", path=name))
    # An indexed file replaced by a FIFO after the build: grep leaves it out, read_file refuses it.
    (odd_root / "good.md").unlink()
    os.mkfifo(odd_root / "good.md")
    assert [p.path for p in run_with_deadline(lambda: kb.grep("text", context=0))] == ["sub/inner.md"]
    with pytest.raises(FileNotInKnowledgeBaseError, match="a FIFO"):
        run_with_deadline(lambda: kb.read("good.md"))
    assert run_with_deadline(kb.is_stale) is True


def test_filesystem_oddities_a_socket_is_skipped_with_a_warning(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    root.mkdir()
    (root / "a.md").write_text("# A\n\ntext\n", encoding="utf-8")
    # AF_UNIX paths are limited to ~100 bytes: bind from inside the folder with a relative name.
    cwd = os.getcwd()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.chdir(root)
        server.bind("sock.md")
    finally:
        os.chdir(cwd)
    try:
        docs = load_documents(root)
    finally:
        server.close()
    assert docs.warnings == [{"event": "file_skipped", "path": "sock.md", "reason": "not a regular file (a socket)"}]


def test_filesystem_oddities_permission_denied_on_a_file_is_skipped_with_a_warning(
    make_kb, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tests run as root, where chmod cannot deny a read: the refusal is simulated at the one place files are opened.
    root = make_kb({"a.md": "# A\n\ntext\n", "secret.md": "# Secret\n\ntext\n"})
    real_open = _files.open_regular

    def denied(path: Path) -> Any:
        if Path(path).name == "secret.md":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path)

    monkeypatch.setattr(_files, "open_regular", denied)
    expected = [{"event": "file_skipped", "path": "secret.md", "reason": "unreadable: Permission denied"}]
    assert load_documents(root).warnings == expected
    kb = KnowledgeBase.build(root, embed_model=HashEmbedding())
    assert kb.files == ["a.md"] and kb.build_report is not None and kb.build_report["warnings"] == expected


def test_filesystem_oddities_permission_denied_on_a_folder_is_skipped_with_a_warning(
    make_kb, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_kb({"a.md": "# A\n\ntext\n", "locked/b.md": "# B\n\ntext\n"})
    real_scandir = os.scandir

    def scandir(path: Any) -> Any:
        if Path(path).name == "locked" or (Path(path) == root and denied_root):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_scandir(path)

    denied_root = False
    monkeypatch.setattr(os, "scandir", scandir)
    docs = load_documents(root)
    assert [f.path for f in docs.files] == ["a.md"]
    assert docs.warnings == [{"event": "file_skipped", "path": "locked",
                              "reason": "folder cannot be listed: Permission denied"}]
    denied_root = True
    with pytest.raises(OSError, match=f"cannot list knowledge-base folder {re.escape(repr(str(root)))}"):
        load_documents(root)


def test_filesystem_oddities_undecodable_file_names_are_skipped_with_a_warning(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    root.mkdir()
    (root / "a.md").write_text("# A\n\ntext\n", encoding="utf-8")
    raw = os.fsencode(root)
    with open(raw + b"/caf\xe9.md", "wb") as f:
        f.write(b"# Cafe\n\ntext\n")
    os.mkdir(raw + b"/d\xff")
    with open(raw + b"/d\xff/b.md", "wb") as f:
        f.write(b"# B\n\ntext\n")
    kb = KnowledgeBase.build(root, embed_model=HashEmbedding())
    assert kb.files == ["a.md"] and kb.build_report is not None
    assert kb.build_report["warnings"] == [
        {"event": "file_skipped", "path": "caf\ufffd.md", "reason": "file name is not valid UTF-8"},
        {"event": "file_skipped", "path": "d\ufffd", "reason": "folder name is not valid UTF-8"},
    ]
    json.dumps(kb.build_report, ensure_ascii=False).encode("utf-8")  # the report is printable as it is


def test_filesystem_oddities_a_root_that_is_a_symlink_loop_names_the_folder(tmp_path: Path) -> None:
    (tmp_path / "loop").symlink_to("loop")
    with pytest.raises(FileNotFoundError, match=r"'.*loop' cannot be opened: symlink loop"):
        load_documents(tmp_path / "loop")
    with pytest.raises(FileNotFoundError, match="embedded null byte"):
        load_documents("kb\0")


# Any tree of ordinary and odd entries: every readable text file is found, every oddity is a warning.
KINDS = ["text", "empty", "binary", "latin1", "inside_link", "outside_link", "dangling", "loop", "fifo",
         "folder_named_md", "bad_name", "other_ext"]
NAMES = st.text(st.sampled_from("abcé xyz-_0"), min_size=1, max_size=8).filter(lambda n: n.strip() == n)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=st.lists(st.tuples(st.sampled_from(["", "d/", "d/e/"]), NAMES, st.sampled_from(KINDS)),
                        max_size=12, unique_by=lambda e: e[1]))
def test_filesystem_oddities_in_any_tree_are_found_or_warned_and_never_raise(
    entries: list[tuple[str, str, str]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        outside = Path(tmp) / "outside.md"
        outside.write_text("# Out\n\nsecret\n", encoding="utf-8")
        root = Path(tmp) / "kb"
        root.mkdir()
        found: set[str] = set()  # in docs.files (an empty file too: it has no chunks)
        has_text = False
        warned: set[str] = set()
        for folder, name, kind in entries:
            (root / folder).mkdir(parents=True, exist_ok=True)
            rel = f"{folder}{name}.md"
            path = root / rel
            if kind == "text":
                path.write_text(f"# {name}\n\nbody\n", encoding="utf-8")
                found.add(rel)
                has_text = True
            elif kind == "empty":
                path.write_bytes(b"")
                found.add(rel)
            elif kind == "binary":
                path.write_bytes(b"\x00\x01\x02")
                warned.add(rel)
            elif kind == "latin1":
                path.write_bytes("# Café\n\nbody\n".encode("latin-1"))
                found.add(rel)
                has_text = True
                warned.add(rel)  # decoded with replacement
            elif kind == "inside_link":
                target = root / f"target-{name}.txt"
                target.write_text("linked body\n", encoding="utf-8")
                path.symlink_to(target)
                found.update({rel, f"target-{name}.txt"})
                has_text = True
            elif kind in ("outside_link", "dangling", "loop"):
                path.symlink_to({"outside_link": outside, "dangling": root / "nowhere", "loop": path}[kind])
                warned.add(rel)
            elif kind == "fifo":
                os.mkfifo(path)
                warned.add(rel)
            elif kind == "folder_named_md":
                path.mkdir()
            elif kind == "bad_name":
                with open(os.fsencode(root / folder) + b"/" + os.fsencode(name) + b"\xff.md", "wb") as f:
                    f.write(b"# Bad\n\nbody\n")
                warned.add(f"{folder}{name}\ufffd.md")
            else:
                (root / f"{folder}{name}.py").write_text("print(1)\n", encoding="utf-8")
        try:
            docs = run_with_deadline(lambda: load_documents(root), seconds=30)
        except EmptyKnowledgeBaseError:
            assert not has_text
            return
        assert {f.path for f in docs.files} == found
        assert {w["path"] for w in docs.warnings} == warned


# ============================================================================================
# 3. Odd strings: lone surrogates
# ============================================================================================


def test_odd_strings_a_lone_surrogate_is_refused_at_every_door_before_any_model_call() -> None:
    lab = Lab([StaticTool("vector_search", ITEMS)], llm=None, config=FAST)  # the offline model, never reached
    bad = "port \ud800?"
    start = time.monotonic()
    for call in (lambda: lab.ask(bad), lambda: lab.ask_many(["fine", bad]), lambda: lab.run([bad]),
                 lambda: lab.run([{"id": "x", "question": bad}]), lambda: lab.rerun(bad, {"top_k": 3}),
                 lambda: lab.ask("fine", history=[{"role": "user", "content": bad}]), lambda: initial_state(bad)):
        with pytest.raises(InvalidQuestionError, match="lone surrogate"):
            call()
    assert time.monotonic() - start < 1.0


@pytest.mark.parametrize("text", ["", "   ", "\n\t"], ids=["empty", "spaces", "whitespace"])
def test_odd_strings_an_empty_question_is_refused(text: str) -> None:
    with pytest.raises(InvalidQuestionError, match="question is empty"):
        scripted_lab().ask(text)


class StrictEmbedding(HashEmbedding):
    """Refuses a lone surrogate as the bundled model's tokenizer does (which LlamaIndex then retries for seconds)."""

    def _get_query_embedding(self, query: str) -> Any:
        if lone_surrogate(query) is not None:
            raise TypeError("TextEncodeInput must be Union[TextInputSequence, Tuple[InputSequence, InputSequence]]")
        return super()._get_query_embedding(query)


def test_odd_strings_tool_arguments_with_surrogates_are_searched_not_retried(make_kb) -> None:
    kb = KnowledgeBase.build(make_kb({"a.md": "# A\n\nThe port is 8443.\n"}), embed_model=StrictEmbedding())
    tools = {t.name: t for t in kb_tools(kb)}
    start = time.monotonic()
    for name, args in [("vector_search", {"query": "port \ud800"}), ("keyword_search", {"query": "port \udcff"}),
                       ("grep", {"pattern": "port\ud800|8443"}), ("read_file", {"path": "a\ud800.md"})]:
        try:
            json.loads(tools[name](args))
        except ToolError as exc:
            assert name == "read_file" and "no file" in str(exc)
    assert time.monotonic() - start < 5.0
    assert json.loads(tools["vector_search"]({"query": "port \ud800"}))[0]["path"] == "a.md"


def test_odd_strings_stored_text_with_surrogates_saves_and_loads_back_exactly(tmp_path: Path) -> None:
    exp = scripted_lab().run(["Which port?"])
    exp.records[0]["answer"] = "bad \ud800 text and a pair \ud83d\ude00"
    exp.meta["note"] = "\udcff"
    path = exp.save(tmp_path / "exp.jsonl")
    path.read_text(encoding="utf-8")  # valid UTF-8
    loaded = Experiment.load(path)
    assert loaded.records[0]["answer"] == "bad \ud800 text and a pair \U0001f600" and loaded.meta["note"] == "\udcff"
    sink = JsonlSink(tmp_path / "audit.jsonl")
    sink.write({"event": "x", "text": "\ud800"})
    assert json.loads((tmp_path / "audit.jsonl").read_text(encoding="utf-8"))["text"] == "\ud800"


def test_odd_strings_a_failed_save_removes_its_temporary_file_and_keeps_the_old_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exp = scripted_lab().run(["Which port?", "And the admin port?"])
    path = exp.save(tmp_path / "exp.jsonl")
    before = path.read_bytes()
    import crag_lab.records

    calls = iter(range(100))

    def failing(value: Any, **options: Any) -> str:
        if next(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return json_line(value, **options)

    monkeypatch.setattr(crag_lab.records, "json_line", failing)
    with pytest.raises(OSError, match="No space left"):
        exp.save(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.jsonl"]


ODD_TEXT = st.text(st.one_of(st.characters(), st.characters(categories=["Cs"]),
                             st.sampled_from(["\x00", "\u202e", "\ufeff", " ", "\n"])), max_size=40)


@settings(max_examples=200, deadline=None)
@given(text=ODD_TEXT)
def test_odd_strings_any_text_is_a_valid_question_or_a_clear_value_error(text: str) -> None:
    try:
        checked = check_question(text)
    except InvalidQuestionError as exc:
        assert "empty" in str(exc) or "lone surrogate" in str(exc)
        assert not text.strip() or any("\ud800" <= ch <= "\udfff" for ch in text)
    else:
        assert checked == unicodedata.normalize("NFC", text)  # questions are made NFC at the door
        checked.encode("utf-8")
    assert encodable(text).encode("utf-8").decode("utf-8") == encodable(text)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=ODD_TEXT)
def test_odd_strings_any_question_answers_or_is_refused_and_any_answer_round_trips(text: str, tmp_path: Path) -> None:
    lab = scripted_lab()
    try:
        exp = lab.run([text])
    except InvalidQuestionError:
        return
    exp.records[0]["answer"] = text
    loaded = Experiment.load(exp.save(tmp_path / "exp.jsonl"))
    assert loaded.records[0]["query"] == unicodedata.normalize("NFC", text)
    # JSON has no way to keep a surrogate *pair* apart: it comes back as the character it encodes.
    assert loaded.records[0]["answer"] == text.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")


# ============================================================================================
# 4. Non-string questions
# ============================================================================================

NOT_TEXT = [None, 42, 4.2, True, ["Which port?"], ("q",), {"question": "q"}, b"Which port?", object()]


@pytest.mark.parametrize("value", NOT_TEXT, ids=lambda v: type(v).__name__)
def test_non_string_questions_are_a_type_error_at_every_public_door(value: Any) -> None:
    lab = scripted_lab()
    with pytest.raises(TypeError, match="must be"):
        lab.ask(value)
    with pytest.raises(TypeError, match="must be"):
        lab.rerun(value, {"top_k": 3})
    with pytest.raises(TypeError, match="must be"):
        lab.ask_many(["Which port?", value])
    with pytest.raises(TypeError, match="must be"):
        initial_state(value)  # a graph run without Lab
    if not isinstance(value, dict):  # a dict is a query row: its missing 'question' is the ValueError below
        with pytest.raises(TypeError, match="must be"):
            lab.run(["Which port?", value])
    assert lab.model.calls == []  # type: ignore[attr-defined]


def test_non_string_questions_inside_query_rows_and_a_bare_string_as_a_query_set_are_refused() -> None:
    lab = scripted_lab()
    with pytest.raises(ValueError, match="query #1 has no 'question' text"):
        lab.run([{"id": "x", "question": 42}])
    for call in (lambda: lab.run("Which port?"), lambda: lab.ask_many("Which port?"), lambda: lab.run(None),
                 lambda: lab.ask_many(42)):
        with pytest.raises(TypeError, match="wrap a single question in a list"):
            call()
    with pytest.raises(TypeError, match="history"):
        lab.ask("Which port?", history="hi")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="config must be"):
        lab.rerun("Which port?", 42)  # type: ignore[arg-type]
    assert lab.model.calls == []  # type: ignore[attr-defined]


# ============================================================================================
# 5. Config changes validate
# ============================================================================================


def errors(call: Callable[[], Any]) -> list[tuple[Any, str]]:
    with pytest.raises(ValidationError) as info:
        call()
    return [(e["loc"], e["type"]) for e in info.value.errors()]


@pytest.mark.parametrize("update", [{"max_iterations": -5}, {"relevance_floor": 0.9}, {"top_k": 0},
                                    {"aggregator": "median"}, {"model_timeout_s": 0}, {"recursion_limit": 5},
                                    {"relevance_floor": 0.2, "generate_threshold": 0.1}],
                         ids=["negative-iterations", "floor-above-generate", "zero-top-k", "unknown-aggregator",
                              "zero-timeout", "tiny-recursion-limit", "generate-below-floor"])
def test_config_changes_every_way_raises_the_constructors_validation_error(update: dict[str, Any]) -> None:
    config = CragConfig()
    expected = errors(lambda: CragConfig(**update))
    assert errors(lambda: config.model_copy(update=update)) == expected
    assert errors(lambda: config.with_changes(**update)) == expected
    assert errors(lambda: copy.replace(config, **update) if hasattr(copy, "replace")
                  else config.__replace__(**update)) == expected
    assert errors(lambda: CragConfig.model_construct(**update)) == expected


def test_config_changes_name_an_unknown_field_and_keep_valid_copies_working() -> None:
    config = CragConfig(recursion_limit=150)
    [(loc, kind)] = errors(lambda: config.model_copy(update={"relevance_flor": 0.5}))
    assert loc == ("relevance_flor",) and kind == "unknown_setting"
    assert config.model_copy(update={"top_k": 3}).recursion_limit == 150  # a limit that was set stays
    assert CragConfig().model_copy(update={"max_iterations": 40}).recursion_limit == 171  # a derived one follows
    assert config.model_copy() == config and config.model_copy(deep=True) == config
    assert errors(lambda: config.model_copy(update={"max_iterations": 40})) == [((), "value_error")]  # 150 < 161


def test_config_changes_the_dashboard_replay_rerun_and_eval_paths_still_build_configs() -> None:
    from crag_lab.dashboard import Dashboard
    from crag_lab.eval.runner import mode_setup

    lab = scripted_lab()
    exp = lab.run(["Which port?"])
    assert exp.replay(relevance_floor=0.5).config.relevance_floor == 0.5
    assert exp.replay({"generate_threshold": 0.8}).config.generate_threshold == 0.8
    with pytest.raises(ValidationError, match="relevance_floor"):
        exp.replay(relevance_floor=0.95)
    dash = Dashboard(lab, exp)
    assert dash.set(relevance_floor=0.5) is not None
    assert dash.set(relevance_floor=0.95) is None  # invalid: shown in the dashboard, not applied
    assert lab.rerun("Which port?", {"max_iterations": 2}).state["answer"]
    with pytest.raises(ValidationError, match="max_iterations"):
        lab.rerun("Which port?", {"max_iterations": -5})
    _, cfg = mode_setup("per_item_grading", CragConfig())
    assert (cfg.grading, cfg.prefilter, cfg.routing) == ("per_item", False, False)


FIELD_VALUES = {
    "relevance_floor": st.floats(-0.5, 1.5), "generate_threshold": st.floats(-0.5, 1.5),
    "vector_score_threshold": st.floats(-1.5, 1.5), "auto_approve_max_items": st.integers(-2, 1002),
    "max_iterations": st.integers(-5, 60), "top_k": st.integers(-1, 101),
    "grading": st.sampled_from(["batch", "per_item", "other"]), "model_retries": st.integers(-1, 11),
    "recursion_limit": st.integers(0, 300),
}


@settings(max_examples=150, deadline=None)
@given(update=st.dictionaries(st.sampled_from(sorted(FIELD_VALUES)), st.integers(), max_size=4).flatmap(
    lambda keys: st.fixed_dictionaries({k: FIELD_VALUES[k] for k in keys})))
def test_config_changes_model_copy_is_valid_exactly_when_the_constructor_is(update: dict[str, Any]) -> None:
    base = CragConfig()
    try:
        expected = CragConfig(**(base.model_dump(exclude={"recursion_limit"}) | update))
    except ValidationError as exc:
        with pytest.raises(ValidationError) as info:
            base.model_copy(update=update)
        assert [e["loc"] for e in info.value.errors()] == [e["loc"] for e in exc.errors()]
    else:
        assert base.model_copy(update=update) == expected


# ============================================================================================
# 6. Corrupt experiment files
# ============================================================================================


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Experiment, Path]:
    exp = scripted_lab().run(["Which port?", "And the admin port?", "And the metrics port?"])
    return exp, exp.save(tmp_path / "exp.jsonl")


def test_corrupt_experiment_file_a_truncated_line_names_file_and_line(saved: tuple[Experiment, Path]) -> None:
    exp, path = saved
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])  # a killed recording: the last line cut short
    with pytest.raises(ExperimentFileError, match=rf"{re.escape(str(path))}:4: not a valid record \(invalid JSON") as info:
        Experiment.load(path)
    assert "skip_invalid=True" in str(info.value) and isinstance(info.value, ValueError)
    with pytest.warns(UserWarning, match=r"skipped 1 invalid record line \(line 4\); kept 2 records"):
        loaded = Experiment.load(path, skip_invalid=True)
    assert loaded.records == json.loads(json.dumps(exp.records[:2])) and loaded.config == exp.config


def test_corrupt_experiment_file_bad_lines_in_the_middle_are_counted_and_numbered(saved: tuple[Experiment, Path]) -> None:
    _, path = saved
    lines = path.read_bytes().split(b"\n")
    lines[1] = b"\xff\xfe not utf-8"
    lines[2] = b"[1, 2, 3]"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(ExperimentFileError, match=":2: not a valid record \\(not UTF-8"):
        Experiment.load(path)
    with pytest.warns(UserWarning, match=r"skipped 2 invalid record lines \(lines 2, 3\); kept 1 records"):
        assert len(Experiment.load(path, skip_invalid=True).records) == 1


@pytest.mark.parametrize("header", [b"{not json", b"[]", b'{"kind": "crag_lab.experiment", "schema": 1}',
                                    b'{"kind": "crag_lab.experiment", "schema": 1, "config": {"top_k": 0}}'],
                         ids=["broken", "not-an-object", "no-config", "invalid-config"])
def test_corrupt_experiment_file_a_bad_header_is_never_skipped(saved: tuple[Experiment, Path], header: bytes) -> None:
    _, path = saved
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join([header, *lines[1:]]))
    for skip in (False, True):
        with pytest.raises(ExperimentFileError, match=re.escape(str(path))):
            Experiment.load(path, skip_invalid=skip)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.floats(0.0, 1.0))
def test_corrupt_experiment_file_cut_anywhere_loads_a_prefix_or_names_the_header(
    saved: tuple[Experiment, Path], cut: float, tmp_path: Path
) -> None:
    exp, path = saved
    data = path.read_bytes()
    truncated = tmp_path / "cut.jsonl"
    truncated.write_bytes(data[: int(len(data) * cut)])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # skip_invalid's warning is tested above
            loaded = Experiment.load(truncated, skip_invalid=True)
    except ExperimentFileError as exc:
        assert str(truncated) in str(exc)
        return
    original = json.loads(json.dumps(exp.records))
    assert loaded.records == original[: len(loaded.records)]


# ============================================================================================
# 7. CLI errors
# ============================================================================================


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail the test if the embedding model is loaded: the cheap checks must come first."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the embedding model was loaded before the cheap checks")

    monkeypatch.setattr(crag_lab.embeddings, "default_embed_model", refuse)
    yield


def one_error_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("crag-lab: "), err
    return err


@pytest.mark.usefixtures("no_model")
def test_cli_errors_a_knowledge_base_error_is_one_line_before_the_model_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "loop").symlink_to("loop")
    assert "has no usable text" in one_error_line(capsys, ["index", str(empty)])
    assert "does not exist" in one_error_line(capsys, ["index", str(tmp_path / "nope")])
    assert "symlink loop" in one_error_line(capsys, ["index", str(tmp_path / "loop")])
    assert "has no usable text" in one_error_line(capsys, ["ask", "Which port?", "--kb", str(empty)])
    assert "does not exist" in one_error_line(capsys, ["ask", "Which port?", "--kb", str(tmp_path / "nope")])


@pytest.mark.usefixtures("no_model")
def test_cli_errors_bad_questions_settings_and_query_files_are_one_line(
    make_kb, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kb = str(make_kb({"a.md": "# A\n\ntext\n"}))
    assert "lone surrogate" in one_error_line(capsys, ["ask", "caf\udce9?", "--kb", kb])  # argv of undecodable bytes
    assert "question is empty" in one_error_line(capsys, ["ask", "  ", "--kb", kb])
    err = one_error_line(capsys, ["ask", "Which port?", "--kb", kb, "--floor", "0.9"])
    assert "invalid setting" in err and "relevance_floor (0.9) must be <= generate_threshold" in err
    assert "max_iterations: Input should be greater than or equal to 1 (got -5)" in one_error_line(
        capsys, ["ask", "Which port?", "--kb", kb, "--max-iterations", "-5"])
    assert "No such file" in one_error_line(capsys, ["demo", "--kb", kb, "--queries", str(tmp_path / "none.jsonl")])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n{broken\n', encoding="utf-8")
    assert f"{bad}:2: not valid JSON" in one_error_line(capsys, ["demo", "--kb", kb, "--queries", str(bad)])
    good = tmp_path / "good.jsonl"
    good.write_text('{"id": "q1", "question": "Which port?"}\n', encoding="utf-8")
    assert "no question with id q9" in one_error_line(capsys, ["demo", "--kb", kb, "--queries", str(good), "--ids", "q1,q9"])


def test_cli_errors_every_error_of_the_package_derives_from_one_base_class() -> None:
    for cls in (KnowledgeBaseError, EmptyKnowledgeBaseError, FileNotInKnowledgeBaseError, PatternTooExpensiveError,
                ToolError, InvalidQuestionError, ExperimentFileError):
        assert issubclass(cls, CragLabError), cls
    assert issubclass(InvalidQuestionError, ValueError) and issubclass(ExperimentFileError, ValueError)
