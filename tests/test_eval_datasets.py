"""Loaders on tiny temporary files: the project's query format and BEIR-style folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crag_lab.eval import GoldRef, load_beir, load_dataset, load_kb_queries
from crag_lab.eval.datasets import Passage, passage_filename, passage_markdown


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


KB_ROWS = [
    {"id": "q1", "question": "Hi!", "complexity": "chitchat", "answerable": True, "answer": "", "gold": [],
     "tools": []},
    {"id": "q2", "question": "Which port?", "complexity": "simple", "answerable": True, "answer": "8443",
     "gold": ["svc/gw.md:L11-L13", "faq.md"], "tools": ["vector_search"]},
    {"id": "q3", "question": "Who is the DPO?", "complexity": "simple", "answerable": False, "answer": "",
     "gold": [], "tools": ["vector_search"]},
]


def test_kb_queries_loader_reads_labels(tmp_path: Path) -> None:
    ds = load_kb_queries(write_jsonl(tmp_path / "q.jsonl", KB_ROWS), kb=tmp_path / "kb")
    assert ds.name == "q" and len(ds) == 3 and ds.kb == tmp_path / "kb"
    q2 = ds.queries[1]
    assert q2.answers == ("8443",) and q2.answerable is True and q2.complexity == "simple"
    assert q2.gold == (GoldRef("svc/gw.md", 11, 13), GoldRef("faq.md"))
    assert ds.queries[0].answers == () and ds.queries[2].answerable is False
    assert ds.has_complexity
    row = q2.row()
    assert row["question"] == "Which port?" and row["gold"] == ["svc/gw.md:L11-L13", "faq.md"]
    assert ds.write_kb() == tmp_path / "kb"  # a query file's knowledge base is used as it is


def test_kb_queries_loader_names_bad_lines(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "question": "ok?"}\nnot json\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.jsonl:2"):
        load_kb_queries(bad)
    bad.write_text('{"id": "a", "question": "ok?", "complexity": "hard"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="complexity 'hard'"):
        load_kb_queries(bad)
    bad.write_text('{"id": "a"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="no 'question'"):
        load_kb_queries(bad)


def test_limit_is_a_seeded_sample_in_file_order(tmp_path: Path) -> None:
    rows = [{"id": f"q{i}", "question": f"question {i}?"} for i in range(20)]
    path = write_jsonl(tmp_path / "q.jsonl", rows)
    a = [q.id for q in load_kb_queries(path, limit=5, seed=1)]
    b = [q.id for q in load_kb_queries(path, limit=5, seed=1)]
    c = [q.id for q in load_kb_queries(path, limit=5, seed=2)]
    assert a == b and len(a) == 5 and a != c
    assert a == sorted(a, key=lambda i: int(i[1:]))
    assert len(load_kb_queries(path, limit=50)) == 20
    with pytest.raises(ValueError, match="limit"):
        load_kb_queries(path, limit=0)


def make_beir(root: Path) -> Path:
    root.mkdir()
    write_jsonl(root / "corpus.jsonl", [
        {"id": "d1", "title": "Paris", "text": "Paris is the capital of France.  It has museums."},
        {"id": "d2", "title": "Lyon", "text": "Lyon is a city in France."},
        {"id": "d3", "title": "", "text": "Berlin is the capital of Germany."},
        {"id": "d4", "title": "Rome", "text": "Rome is the capital of Italy."},
    ])
    write_jsonl(root / "queries.jsonl", [
        {"id": "a", "question": "What is the capital of France?", "answers": ["Paris", "Paris"],
         "answerable": True, "context_doc_ids": ["d1", "d2"]},
        {"id": "b", "question": "What is the capital of Spain?", "answers": [], "answerable": False,
         "paired_doc_id": "d3"},
        {"id": "c", "question": "Capital of Italy?", "answers": ["Rome"]},
    ])
    (root / "qrels.tsv").write_text("query_id\tdoc_id\trelevance\na\td1\t1\nc\td4\t1\nc\td2\t0\n", encoding="utf-8")
    return root


def test_beir_loader_maps_qrels_to_passage_files(tmp_path: Path) -> None:
    ds = load_beir(make_beir(tmp_path / "tiny"))
    assert [q.id for q in ds] == ["a", "b", "c"]
    a, b, c = ds.queries
    assert a.answers == ("Paris",) and a.answerable is True and a.complexity is None
    assert a.gold == (GoldRef("d1.md"),) and set(a.needs) == {"d1", "d2"}
    assert b.gold == () and b.answerable is False and b.needs == ("d3",)
    assert c.answerable is True and c.gold == (GoldRef("d4.md"),)  # relevance 0 is not gold
    assert len(ds.passages) == 4 and ds.limit is None and not ds.has_complexity


def test_beir_write_kb_restricts_the_corpus_under_limit(tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "tiny")
    full = load_beir(folder)
    root = full.write_kb(tmp_path / "cache")
    assert root.name == "tiny-full"
    assert sorted(p.name for p in root.glob("*.md")) == ["d1.md", "d2.md", "d3.md", "d4.md"]
    assert (root / "d1.md").read_text(encoding="utf-8") == (
        "# Paris\n\nParis is the capital of France.\nIt has museums.\n")
    assert (root / "d3.md").read_text(encoding="utf-8") == "Berlin is the capital of Germany.\n"
    small = load_beir(folder, limit=1, seed=0)
    needed = {d for q in small for d in (*q.needs, *(g.path[:-3] for g in q.gold))}
    assert {p.id for p in small.passages} == needed
    small_root = small.write_kb(tmp_path / "cache")
    assert small_root.name.startswith("tiny-n1-") and small_root != root
    assert sorted(p.stem for p in small_root.glob("*.md")) == sorted(needed)
    again = load_beir(folder, limit=1, seed=0).write_kb(tmp_path / "cache")
    assert again == small_root


def test_beir_loader_rejects_missing_files_and_unknown_gold(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=r"corpus\.jsonl is missing"):
        load_beir(empty)
    folder = make_beir(tmp_path / "tiny")
    (folder / "qrels.tsv").write_text("a\tnope\t1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not in corpus"):
        load_beir(folder)


def test_load_dataset_dispatches_on_file_or_folder(tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "tiny")
    assert load_dataset(folder).passages
    given = load_dataset(folder, kb=tmp_path / "prebuilt")
    assert given.kb == tmp_path / "prebuilt" and given.passages == []
    path = write_jsonl(tmp_path / "q.jsonl", KB_ROWS)
    assert load_dataset(path).kb == Path("data/kb")
    with pytest.raises(FileNotFoundError, match="no dataset"):
        load_dataset(tmp_path / "missing.jsonl")


def test_passage_files_are_named_by_a_safe_slug() -> None:
    assert passage_filename("hp00001") == "hp00001.md"
    odd = passage_filename("Doc 7/../b")
    assert "/" not in odd and odd.endswith(".md") and odd != passage_filename("doc 7/../b")
    assert passage_markdown(Passage("x", " ", "One. Two.")) == "One.\nTwo.\n"


def test_multi_hop_questions_get_a_kind_and_single_passage_ones_none(tmp_path: Path) -> None:
    root = tmp_path / "hop"
    root.mkdir()
    write_jsonl(root / "corpus.jsonl", [{"id": f"d{i}", "title": f"T{i}", "text": f"Text {i}."} for i in range(4)])
    write_jsonl(root / "queries.jsonl", [
        {"id": "bridge", "question": "Where was the director of Film X born?", "answers": ["Oslo"],
         "gold_doc_ids": ["d0", "d1"]},
        {"id": "yesno", "question": "Are A and B both rivers?", "answers": ["yes"], "gold_doc_ids": ["d1", "d2"]},
        {"id": "either", "question": "Which is older, A or B?", "answers": ["A"], "gold_doc_ids": ["d2", "d3"]},
        {"id": "typed", "question": "Which is older, A or B?", "answers": ["A"], "type": "bridge",
         "gold_doc_ids": ["d2", "d3"]},
        {"id": "single", "question": "Is A a river?", "answers": ["yes"], "gold_doc_ids": ["d0"]},
    ])
    ds = load_beir(root)
    assert {q.id: q.kind for q in ds} == {"bridge": "bridge", "yesno": "comparison", "either": "comparison",
                                         "typed": "bridge", "single": None}
    assert ds.has_kinds and not load_beir(make_beir(tmp_path / "tiny")).has_kinds
