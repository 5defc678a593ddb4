"""Answer-scorer pairs from questions written over engineering documents (crag_lab.learned.engdocs)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from crag_lab.learned import engdocs

DOC = """# Entrypoints

| Option | Default | Description |
|---|---|---|
| `lifeCycle.graceTimeOut` | 10s | Time to wait for active requests to finish. |
| `lifeCycle.requestAcceptGraceTimeout` | 0s | Time to keep accepting requests before stopping. |

## Logs

Access logs are written to stdout by default.
Set `filePath` to write them to a file instead.
"""
QS = [
    {"doc": "ep", "question": "how long does traefik wait for in-flight requests on shutdown?", "answer": "10s",
     "line": "| `lifeCycle.graceTimeOut` | 10s | Time to wait for active requests to finish. |"},
    {"doc": "ep", "question": "Which log rotation size does traefik use?", "answerable": False,
     "near": "Access logs are written to stdout by default."},
    {"doc": "ep", "question": "a line that is not there", "answer": "x", "line": "| nowhere |"},
    {"doc": "ep", "question": "answer not in the line's unit", "answer": "42s",
     "line": "Access logs are written to stdout by default."},
    {"doc": "other", "question": "a document not given", "answer": "1", "line": "1"},
]


def test_the_positive_is_the_row_holding_the_answer_and_the_negatives_are_its_neighbours() -> None:
    found, counts = engdocs.pairs(QS, {"ep": DOC}, seed=1)
    assert counts == {"answerable": 1, "unanswerable": 1, "skipped": 2}
    first = [p for p in found if p.group.endswith("/0")]
    (positive,) = [p for p in first if p.label == 1]
    assert "graceTimeOut" in positive.text and "10s" in positive.text and positive.text.startswith("ep > Entrypoints: ")
    negatives = [p.text for p in first if p.label == 0]
    assert negatives and all("10s" not in t for t in negatives)
    assert any("requestAcceptGraceTimeout" in t for t in negatives)  # a sibling row: the hard negative
    assert any("stdout" in t or "filePath" in t for t in negatives)  # another chunk of the same document


def test_an_unanswerable_question_is_a_group_of_negatives_from_the_chunk_nearest_to_it() -> None:
    found, _ = engdocs.pairs(QS, {"ep": DOC}, seed=1)
    group = [p for p in found if p.group.endswith("/1")]
    assert group and all(p.label == 0 and p.source == "engdocs-unanswerable" for p in group)
    assert any("stdout" in p.text for p in group)


def test_the_same_seed_gives_the_same_pairs() -> None:
    assert engdocs.pairs(QS, {"ep": DOC}, seed=3) == engdocs.pairs(QS, {"ep": DOC}, seed=3)


def test_the_committed_questions_name_documents_of_the_sources_with_a_licence() -> None:
    rows = {r["name"]: r for r in engdocs.sources()}
    qs = engdocs.questions()
    assert len(qs) >= 500 and {q["doc"] for q in qs} <= set(rows)
    assert all(r["licence"] and len(r["commit"]) == 40 for r in rows.values())
    assert sum(q.get("answerable", True) is False for q in qs) >= 100


def test_export_reads_each_document_from_its_snapshot_and_names_a_missing_one(tmp_path: Path) -> None:
    repo = tmp_path / "mirrors" / "acme+docs" / "repo"
    work = tmp_path / "work"
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / "guide.md").write_text(DOC, encoding="utf-8")
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "guide.md"], check=True)
    subprocess.run([*git, "commit", "-qm", "doc"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(repo)], check=True)
    row = {"name": "ep", "repo": "acme/docs", "commit": commit, "path": "guide.md", "licence": "MIT"}
    (path,) = engdocs.export(tmp_path / "mirrors", tmp_path / "out", [row])
    assert path.read_text(encoding="utf-8") == DOC
    with pytest.raises(SystemExit, match="no snapshot of acme/gone"):
        engdocs.export(tmp_path / "mirrors", tmp_path / "out", [{**row, "repo": "acme/gone"}])
    with pytest.raises(SystemExit, match="lacks 1 documents"):
        engdocs.read_docs(tmp_path / "out", ["ep", "missing"])


def test_the_questions_become_a_query_file_crag_lab_eval_reads_against_the_documents(tmp_path: Path) -> None:
    import json

    from crag_lab.eval import load_dataset

    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "ep.md").write_text(DOC, encoding="utf-8")
    rows, left = engdocs.eval_rows(QS, kb, {"ep"})
    assert left == {"line not found": 1, "answer not in its line": 1}
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    answerable, unanswerable = load_dataset(path, kb=kb).queries
    assert answerable.answerable and answerable.answers == ("10s",)
    assert [(g.path, g.start, g.end) for g in answerable.gold] == [("ep.md", 5, 5)]
    assert not unanswerable.answerable and unanswerable.gold == () and unanswerable.complexity == "simple"
