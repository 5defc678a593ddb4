"""Data safety (issue 30, items 4, 7 and 8): labels read as written, one text for one string, paths
checked when they are opened.

- **labelled data**: every row of a query file or a BEIR-style folder is validated with strict types;
  a wrong-typed field (``"answerable": "false"``, a string where a list belongs) is one
  ``DatasetFileError`` naming the file, the line and the field.
- **text normalisation**: questions, history, dataset labels, knowledge-base lines and tool
  arguments are Unicode NFC, so a question typed with combining accents (NFD) answers as the
  precomposed one does, and ``read_file``/``grep`` return the text the index holds.
- **open-time path checks**: a knowledge-base file replaced by a symlink to a file outside the
  knowledge base, after the index was built or between a check and the open, is refused by every
  tool that opens files; the searches return only indexed text.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import HashEmbedding, write_tree
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crag_lab import Lab
from crag_lab._text import check_history, check_question
from crag_lab.errors import CragLabError, DatasetFileError
from crag_lab.eval import load_beir, load_dataset, load_kb_queries
from crag_lab.kb import KnowledgeBase, PathOutsideKnowledgeBaseError, load_documents
from crag_lab.kb import _documents as documents_module
from crag_lab.kb import _files as files_module
from crag_lab.tools import ToolError
from crag_lab.tools.kb_tools import kb_tools


def nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


def write_jsonl(path: Path, rows: list[dict[str, Any]], *, blank_lines: int = 0) -> Path:
    """Rows as JSON lines, after ``blank_lines`` empty lines (which the loaders skip but still count)."""
    path.write_text("\n" * blank_lines + "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# ============================================================================================
# 1. Labelled data: strict types, one error naming file, line and field
# ============================================================================================

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=2),
    max_leaves=6,
)


def _is_id(v: Any) -> bool:
    return isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool))


VALID: dict[str, Callable[[Any], bool]] = {
    "bool": lambda v: v is None or isinstance(v, bool),
    "text": lambda v: v is None or isinstance(v, str),
    "texts": lambda v: v is None or (isinstance(v, list) and all(isinstance(x, str) for x in v)),
    "id": lambda v: v is None or _is_id(v),
    "ids": lambda v: v is None or (isinstance(v, list) and all(_is_id(x) for x in v)),
    "id_or_ids": lambda v: v is None or _is_id(v) or (isinstance(v, list) and all(_is_id(x) for x in v)),
}
KB_FIELDS = {"id": "id", "question": "text", "complexity": "text", "answerable": "bool", "answer": "text",
             "answers": "texts", "gold": "texts", "tools": "texts"}
BEIR_FIELDS = {"id": "id", "_id": "id", "question": "text", "query": "text", "answers": "texts", "answerable": "bool",
               "complexity": "text", "gold_doc_ids": "ids", "context_doc_ids": "id_or_ids",
               "paired_doc_id": "id_or_ids", "doc_ids": "id_or_ids", "type": "text"}
CORPUS_FIELDS = {"id": "id", "_id": "id", "title": "text", "text": "text"}


@st.composite
def wrong_field(draw: st.DrawFn, fields: dict[str, str]) -> tuple[str, Any]:
    """A field of the schema and a JSON value of a type that field does not take."""
    field = draw(st.sampled_from(sorted(fields)))
    value = draw(JSON_VALUES.filter(lambda v: not VALID[fields[field]](v)))
    return field, value


GOOD_KB_ROW = {"id": "ok", "question": "Which port?", "complexity": "simple", "answerable": True, "answer": "8443",
               "gold": ["gw.md:L3-L4"], "tools": ["grep"]}


@settings(max_examples=150, deadline=None)
@given(bad=wrong_field(KB_FIELDS), before=st.integers(0, 3), blanks=st.integers(0, 2))
def test_labelled_data_a_wrong_typed_field_of_a_query_file_names_file_line_and_field(
        bad: tuple[str, Any], before: int, blanks: int) -> None:
    field, value = bad
    with tempfile.TemporaryDirectory() as tmp:
        path = write_jsonl(Path(tmp) / "queries.jsonl",
                           [dict(GOOD_KB_ROW, id=f"ok{i}") for i in range(before)] + [{**GOOD_KB_ROW, field: value}],
                           blank_lines=blanks)
        with pytest.raises(DatasetFileError) as caught:
            load_dataset(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{blanks + before + 1}: field {field!r} must be ")
    assert "\n" not in message and isinstance(caught.value, (CragLabError, ValueError))


def make_beir(root: Path, query: dict[str, Any] | None = None, passage: dict[str, Any] | None = None) -> Path:
    root.mkdir()
    write_jsonl(root / "corpus.jsonl", [{"id": "d1", "title": "Paris", "text": "Paris is in France."},
                                        passage or {"id": "d2", "title": "Rome", "text": "Rome is in Italy."}])
    write_jsonl(root / "queries.jsonl", [
        {"id": "a", "question": "Where is Paris?", "answers": ["France"], "answerable": True},
        query or {"id": "b", "question": "Where is Rome?", "answers": ["Italy"], "answerable": True},
    ])
    (root / "qrels.tsv").write_text("query_id\tdoc_id\trelevance\na\td1\t1\n", encoding="utf-8")
    return root


GOOD_BEIR_ROW = {"id": "b", "question": "Where is Rome?", "answers": ["Italy"], "answerable": True,
                 "gold_doc_ids": ["d2"], "context_doc_ids": ["d1", "d2"]}


@settings(max_examples=150, deadline=None)
@given(bad=wrong_field(BEIR_FIELDS))
def test_labelled_data_a_wrong_typed_field_of_a_beir_query_names_file_line_and_field(bad: tuple[str, Any]) -> None:
    field, value = bad
    with tempfile.TemporaryDirectory() as tmp:
        folder = make_beir(Path(tmp) / "set", query={**GOOD_BEIR_ROW, field: value})
        with pytest.raises(DatasetFileError) as caught:
            load_dataset(folder)
    assert str(caught.value).startswith(f"{folder / 'queries.jsonl'}:2: field {field!r} must be ")


@settings(max_examples=80, deadline=None)
@given(bad=wrong_field(CORPUS_FIELDS))
def test_labelled_data_a_wrong_typed_field_of_a_passage_names_file_line_and_field(bad: tuple[str, Any]) -> None:
    field, value = bad
    with tempfile.TemporaryDirectory() as tmp:
        folder = make_beir(Path(tmp) / "set", passage={"id": "d2", "title": "Rome", "text": "Rome.", field: value})
        with pytest.raises(DatasetFileError) as caught:
            load_beir(folder)
    assert str(caught.value).startswith(f"{folder / 'corpus.jsonl'}:2: field {field!r} must be ")


@pytest.mark.parametrize(("field", "value", "says"), [
    ("answerable", "false", "field 'answerable' must be true or false (a JSON boolean, without quotes), "
                            "got a string 'false'"),
    ("gold", "services/api-gateway/README.md", "field 'gold' must be a JSON list of locations"),
    ("answers", "8443", "field 'answers' must be a JSON list of strings"),
    ("answer", 8443, "field 'answer' must be a JSON string, got a number 8443"),
])
def test_labelled_data_the_reported_misreadings_are_refused(tmp_path: Path, field: str, value: Any, says: str) -> None:
    path = write_jsonl(tmp_path / "q.jsonl", [GOOD_KB_ROW, {**GOOD_KB_ROW, field: value}])
    with pytest.raises(DatasetFileError, match=re.escape(f"q.jsonl:2: {says}")):
        load_kb_queries(path)


def test_labelled_data_a_bad_gold_location_or_relevance_names_file_line_and_field(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "q.jsonl", [{**GOOD_KB_ROW, "gold": ["a.md", "b.md:L9-L3"]}])
    with pytest.raises(DatasetFileError, match=r"q\.jsonl:1: gold\[1\]: gold location 'b\.md:L9-L3' ends"):
        load_kb_queries(path)
    folder = make_beir(tmp_path / "set")
    (folder / "qrels.tsv").write_text("query_id\tdoc_id\trelevance\na\td1\thigh\n", encoding="utf-8")
    with pytest.raises(DatasetFileError, match=r"qrels\.tsv:2: relevance must be a number, got 'high'"):
        load_beir(folder)


LABEL_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(answerable=st.none() | st.booleans(), answers=st.lists(LABEL_TEXT, max_size=3),
       gold=st.lists(st.sampled_from(["a.md", "b/c.md:L2-L5", "d.md:L7"]), max_size=3),
       qid=st.text(min_size=1, max_size=6) | st.integers(0, 999))
def test_labelled_data_valid_rows_are_read_exactly_as_written(
        answerable: bool | None, answers: list[str], gold: list[str], qid: str | int) -> None:
    row: dict[str, Any] = {"id": qid, "question": "Which port?", "answers": answers, "gold": gold}
    if answerable is not None:
        row["answerable"] = answerable
    with tempfile.TemporaryDirectory() as tmp:
        query = load_kb_queries(write_jsonl(Path(tmp) / "q.jsonl", [row])).queries[0]
    assert query.id == str(qid) and query.answerable is answerable
    assert query.answers == tuple(dict.fromkeys(nfc(a) for a in answers if a.strip()))
    assert [str(g) for g in query.gold] == [g.replace(":L7", ":L7-L7") for g in gold]


ACCENTED = st.text(st.sampled_from([*"aeiouAEIOUnc ", "ã", "é", "ü", "ö", "ç", "ñ", "Å", "ő", "ế", "ṩ"]),
                   min_size=1, max_size=20).filter(str.strip)


@settings(max_examples=60, deadline=None)
@given(question=ACCENTED, answer=ACCENTED)
def test_labelled_data_nfd_and_nfc_files_load_the_same_labels(question: str, answer: str) -> None:
    loaded = []
    with tempfile.TemporaryDirectory() as tmp:
        for form in (nfc, nfd):
            path = write_jsonl(Path(tmp) / "q.jsonl", [{"id": "q", "question": form(question), "answer": form(answer)}])
            loaded.append(load_kb_queries(path).queries[0])
            folder = Path(tmp) / f"beir-{form.__name__}"
            folder.mkdir()
            write_jsonl(folder / "corpus.jsonl", [{"id": "d", "title": form(answer), "text": form(question)}])
            write_jsonl(folder / "queries.jsonl", [{"id": "q", "question": form(question), "answers": [form(answer)]}])
            beir = load_beir(folder)
            loaded.append(beir.queries[0])
            loaded.append(beir.passages[0])
    assert loaded[0] == loaded[3] and loaded[1] == loaded[4] and loaded[2] == loaded[5]
    assert loaded[0].question == nfc(question) and loaded[1].answers == (nfc(answer),)
    assert loaded[2].text == nfc(question)


# ============================================================================================
# 2. Text normalisation: one string for one text
# ============================================================================================

VALID_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=30).filter(str.strip)


@settings(max_examples=200, deadline=None)
@given(text=VALID_TEXT)
def test_text_normalisation_a_question_in_nfd_or_nfc_is_checked_to_one_nfc_string(text: str) -> None:
    assert check_question(nfd(text)) == check_question(nfc(text)) == check_question(text) == nfc(text)


@settings(max_examples=100, deadline=None)
@given(content=VALID_TEXT)
def test_text_normalisation_history_messages_are_nfc_and_the_caller_s_list_is_left_alone(content: str) -> None:
    history = [{"role": "user", "content": nfd(content), "name": "ana"}]
    checked = check_history(history)
    assert checked == [{"role": "user", "content": nfc(content), "name": "ana"}]
    assert history[0]["content"] == nfd(content)


PLACES = {  # a name, a question about it, what the answer must contain
    "São Paulo": ("Which avenue is the São Paulo office on?", "Avenida Paulista"),
    "Zürich": ("Which floor is the Zürich office on?", "fourth floor"),
    "Kraków": ("Which person runs the Kraków office?", "Agnieszka Nowak"),
    "Besançon": ("When does the Besançon office open?", "08:30"),
    "Malmö": ("Which port does the Malmö gateway use?", "8443"),
}
OFFICES = ("# Offices\n\n"
           "The São Paulo office is on Avenida Paulista.\n\n"
           "The Zürich office is on the fourth floor of the Prime Tower.\n\n"
           "Agnieszka Nowak runs the Kraków office.\n\n"
           "The Besançon office opens at 08:30 every weekday.\n\n"
           "The Malmö gateway listens on port 8443.\n")


@pytest.fixture(scope="module")
def office_labs() -> Iterator[dict[str, Lab]]:
    """An offline lab over the offices file written in NFC, and one over the same file written in NFD."""
    with tempfile.TemporaryDirectory() as tmp:
        labs = {}
        for form in (nfc, nfd):
            kb = KnowledgeBase.build(write_tree(Path(tmp) / form.__name__, {"offices.md": form(OFFICES)}),
                                     embed_model=HashEmbedding())
            labs[form.__name__] = Lab(kb_tools(kb), kb=kb, embed_model=HashEmbedding())
        yield labs


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(place=st.sampled_from(sorted(PLACES)), question_form=st.sampled_from([nfc, nfd]),
       document_form=st.sampled_from(["nfc", "nfd"]))
def test_text_normalisation_a_question_answers_the_same_in_any_form_against_a_document_in_any_form(
        office_labs: dict[str, Lab], place: str, question_form: Callable[[str], str], document_form: str) -> None:
    question, expected = PLACES[place]
    reference = office_labs["nfc"].ask(nfc(question))
    result = office_labs[document_form].ask(question_form(question))
    assert expected in reference.answer
    assert result.answer.split("\n---\n")[0] == reference.answer.split("\n---\n")[0]


LINE = st.text(st.sampled_from([*"abc xyz.", "é", "ñ", "ü", "ã", "ő", "\u0301", "\u0308", "\u0327"]), max_size=30)


@settings(max_examples=25, deadline=None)
@given(lines=st.lists(LINE, min_size=1, max_size=12), word=st.sampled_from(["é", "ñ", "ü", "ã", "ő"]))
def test_text_normalisation_index_read_file_and_grep_hold_the_same_nfc_text_on_the_same_lines(
        lines: list[str], word: str) -> None:
    text = "# Title\n\n" + "\n".join(nfd(line) for line in [*lines, f"the {word} line"]) + "\n"
    with tempfile.TemporaryDirectory() as tmp:
        kb = KnowledgeBase.build(write_tree(Path(tmp) / "kb", {"a.md": text}), embed_model=HashEmbedding())
        expected = nfc(text).split("\n")
        for chunk in kb.chunks:
            assert chunk.text == "\n".join(expected[chunk.line_start - 1:chunk.line_end])
            assert kb.read("a.md", chunk.line_start, chunk.line_end).text == chunk.text
        tools = {t.name: t for t in kb_tools(kb)}
        by_form = [json.loads(tools["grep"]({"pattern": form(word), "context": 0})) for form in (nfc, nfd)]
        assert by_form[0] == by_form[1] and by_form[0]
        for hit in by_form[0]:
            assert hit["text"] == "\n".join(expected[hit["line"] - 1:hit["line_end"]])
        searches = [json.loads(tools[name]({"query": form(f"the {word} line")}))
                    for name in ("vector_search", "keyword_search") for form in (nfc, nfd)]
        assert searches[0] == searches[1] and searches[2] == searches[3]


def test_text_normalisation_read_file_finds_a_file_named_in_either_form(make_kb: Callable[..., Path]) -> None:
    kb = KnowledgeBase.build(make_kb({nfd("café.md"): "# Café\n\nOpen at 8.\n"}), embed_model=HashEmbedding())
    read = {t.name: t for t in kb_tools(kb)}["read_file"]
    for form in (nfc, nfd):
        assert json.loads(read({"path": form("café.md")}))[0]["text"] == "# Café\n\nOpen at 8."


def test_text_normalisation_an_index_built_from_nfd_text_before_is_rechunked_once(
        make_kb: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_kb({"a.md": nfd("# Zürich\n\nThe Zürich office.\n"), "b.md": "# B\n\nPlain.\n"})
    with monkeypatch.context() as m:
        m.setattr(files_module, "nfc", lambda text: text)  # the lines as an earlier version read them
        old = KnowledgeBase.build(root, embed_model=HashEmbedding())
    assert any(chunk.text != nfc(chunk.text) for chunk in old.chunks)
    kb = KnowledgeBase.build(root, embed_model=HashEmbedding())
    assert all(chunk.text == nfc(chunk.text) and chunk.title == nfc(chunk.title) for chunk in kb.chunks)
    assert kb.title("a.md") == "Zürich" and kb.build_report is not None
    assert kb.build_report["files_changed"] == 1 and kb.build_report["chunks_reused"] == 1
    again = KnowledgeBase.build(root, embed_model=HashEmbedding())
    assert again.build_report is not None and again.build_report["chunks_embedded"] == 0


# ============================================================================================
# 3. Open-time path checks: a symlink swapped in after the check
# ============================================================================================

SECRET = "root password hunter2 port gateway"
KB_FILES = {"a.md": "# A\n\nThe gateway port is 8443.\n", "b.md": "# B\n\nThe port of b.\n",
            "sub/c.md": "# C\n\nAnother port.\n"}


def swap_for_symlink(root: Path, rel: str, outside: Path, how: str) -> None:
    """Replace ``root/rel`` by a symlink that leads to ``outside``: directly (absolute or relative),
    or through a second symlink inside the root."""
    target = root / rel
    target.unlink()
    if how == "absolute":
        target.symlink_to(outside)
    elif how == "relative":
        target.symlink_to(os.path.relpath(outside, target.parent))
    else:
        hop = root / "hop.txt.link"
        hop.unlink(missing_ok=True)
        hop.symlink_to(outside)
        target.symlink_to(hop)


LINKS = ["absolute", "relative", "through_an_inside_link"]


@pytest.fixture
def indexed(tmp_path: Path) -> tuple[KnowledgeBase, Path]:
    """A knowledge base of ``KB_FILES``, indexed, and a secret file outside it."""
    outside = write_tree(tmp_path / "outside", {"secret.md": f"# Secret\n\n{SECRET}\n"}) / "secret.md"
    return KnowledgeBase.build(write_tree(tmp_path / "kb", KB_FILES), embed_model=HashEmbedding()), outside


@pytest.mark.parametrize("how", LINKS)
@pytest.mark.parametrize("rel", sorted(KB_FILES))
def test_open_time_checks_no_tool_returns_a_file_swapped_for_a_link_out_after_indexing(
        indexed: tuple[KnowledgeBase, Path], rel: str, how: str) -> None:
    kb, outside = indexed
    swap_for_symlink(kb.root, rel, outside, how)
    tools = {t.name: t for t in kb_tools(kb)}
    calls = [("grep", {"pattern": "port|hunter2"}), ("grep", {"pattern": "password"}),
             ("vector_search", {"query": SECRET}), ("keyword_search", {"query": SECRET}),
             ("read_file", {"path": rel})]
    for name, args in calls:
        try:
            out = tools[name](args)
        except ToolError as exc:
            assert name == "read_file" and "outside the knowledge base" in str(exc)
            continue
        assert "hunter2" not in out, (name, out)
    grepped = json.loads(tools["grep"]({"pattern": "port"}))
    assert {hit["path"] for hit in grepped} == set(KB_FILES) - {rel}  # the other files are still searched
    with pytest.raises(PathOutsideKnowledgeBaseError):
        kb.grep("port", path=rel)


@pytest.mark.parametrize("how", LINKS)
def test_open_time_checks_a_swap_between_resolve_and_open_is_refused_by_read(
        indexed: tuple[KnowledgeBase, Path], monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    kb, outside = indexed
    resolve = KnowledgeBase.resolve

    def resolve_then_swap(self: KnowledgeBase, path: str) -> tuple[str, Path]:
        found = resolve(self, path)
        swap_for_symlink(self.root, "b.md", outside, how)
        return found

    monkeypatch.setattr(KnowledgeBase, "resolve", resolve_then_swap)
    with pytest.raises(PathOutsideKnowledgeBaseError, match=r"'b\.md' is a symlink that points outside"):
        kb.read("b.md")


@pytest.mark.parametrize("how", LINKS)
def test_open_time_checks_a_swap_after_listing_is_left_out_of_the_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    outside = tmp_path / "secret.md"
    outside.write_text(f"# Secret\n\n{SECRET}\n", encoding="utf-8")
    root = write_tree(tmp_path / "kb", KB_FILES)
    listed = files_module.discover_files

    def list_then_swap(base: Path, *, exclude: Path | None = None) -> tuple[list[str], list[Any]]:
        found = listed(base, exclude=exclude)
        if (base / "a.md").is_file() and not (base / "a.md").is_symlink():
            swap_for_symlink(base, "a.md", outside, how)
        return found

    monkeypatch.setattr(documents_module, "discover_files", list_then_swap)
    kb = KnowledgeBase.build(root, embed_model=HashEmbedding())
    assert kb.files == ["b.md", "sub/c.md"] and all("hunter2" not in c.text for c in kb.chunks)
    assert kb.build_report is not None
    assert {"path": "a.md", "event": "file_skipped",
            "reason": "unreadable: symlink to a file outside the knowledge base"} in kb.build_report["warnings"]
    (root / "a.md").unlink()
    (root / "a.md").write_text(KB_FILES["a.md"], encoding="utf-8")
    docs = load_documents(root)
    assert all("hunter2" not in c.text for c in docs.chunks) and "a.md" not in {f.path for f in docs.files}
