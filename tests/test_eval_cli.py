"""``crag-lab eval`` end to end on a tiny BEIR-style folder: written, indexed, run, reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crag_lab.cli import main

CORPUS = [
    {"id": "d1", "title": "Gateway", "text": "The gateway accepts public TLS traffic on port 8443."},
    {"id": "d2", "title": "Lunch", "text": "The canteen serves lunch from noon until two."},
    {"id": "d3", "title": "Ledger", "text": "The ledger service listens on port 8081 for internal reads."},
]
QUERIES = [
    {"id": "q1", "question": "On which port does the gateway accept TLS traffic?", "answers": ["8443"],
     "answerable": True},
    {"id": "q2", "question": "Who is the data protection officer?", "answers": [], "answerable": False},
]


@pytest.mark.slow
def test_eval_command_writes_json_and_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in CORPUS), encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in QUERIES), encoding="utf-8")
    (folder / "qrels.tsv").write_text("query_id\tdoc_id\trelevance\nq1\td1\t1\n", encoding="utf-8")
    out, report = tmp_path / "out.json", tmp_path / "report.md"
    rc = main(["eval", "--dataset", str(folder), "--mode", "naive_rag", "--mode", "knowledge_base",
               "--cache-dir", str(tmp_path / "cache"), "--json", str(out), "--markdown", str(report),
               "--no-progress"])
    assert rc == 0
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["mode"] == "naive_rag" and set(result["modes"]) == {"naive_rag", "knowledge_base"}
    assert result["n_queries"] == 2 and result["routing_accuracy"] is None  # no complexity labels
    assert result["retrieval_recall"] == 1.0 and result["calls_per_query"] == 1.0
    assert {"grader_auroc", "floor_precision", "floor_recall", "answer_containment", "citation_precision",
            "abstention_rate", "false_abstention_rate", "tokens_per_query"} <= set(result)
    assert sorted(p.name for p in (tmp_path / "cache" / "tiny-full").glob("*.md")) == ["d1.md", "d2.md", "d3.md"]
    assert "| answer containment (answerable)" in report.read_text(encoding="utf-8")
    assert "### tiny" in capsys.readouterr().out
