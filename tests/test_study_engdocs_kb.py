"""The engineering-documents reader study turns written questions into `crag-lab eval` rows and counts every one.

`bench/study_engdocs_kb.py` asks the questions written over public engineering documents against those
documents as a knowledge base. A gold line off by one would make every citation look wrong; a question the
router sent to small talk that silently left the denominator would make the reader look better than it is.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import study_engdocs_kb as study

from crag_lab.learned.engdocs import eval_rows, line_of
from crag_lab.prompts import NO_EVIDENCE_ANSWER

DOC = "# Ports\n\n| Name | Port |\n|---|---|\n| web | 80 |\n  | websecure | 443 |\n\nLogs go to `stdout`.\n"


def test_line_of_finds_the_first_line_equal_after_stripping() -> None:
    assert line_of(DOC, "| websecure | 443 |") == 6
    assert line_of(DOC, "Logs go to `stdout`.") == 8
    assert line_of(DOC, "| nowhere | 1 |") is None


def test_rows_keep_only_the_held_out_documents_and_a_gold_line_per_answerable_question(tmp_path: Path) -> None:
    (tmp_path / "ports.md").write_text(DOC, encoding="utf-8")
    (tmp_path / "other.md").write_text("# Other\n\nNothing.\n", encoding="utf-8")
    qs = [{"doc": "ports", "question": "secure port?", "answer": "443", "line": "| websecure | 443 |"},
          {"doc": "ports", "question": "log file?", "answerable": False, "near": "Logs go to `stdout`."},
          {"doc": "ports", "question": "web port?", "answer": "8080", "line": "| web | 80 |"},
          {"doc": "ports", "question": "gone?", "answer": "x", "line": "| gone | x |"},
          {"doc": "other", "question": "anything?", "answer": "Nothing", "line": "Nothing."}]
    rows, left = eval_rows(qs, tmp_path, {"ports"})
    assert [(r["question"], r["answerable"], r["answer"], r["gold"]) for r in rows] == [
        ("secure port?", True, "443", ["ports.md:L6-L6"]), ("log file?", False, "", [])]
    assert all(r["complexity"] == "simple" and r["doc"] == "ports" for r in rows)
    assert left == {"line not found": 1, "answer not in its line": 1}


def test_a_question_that_reached_no_synthesizer_counts_as_an_abstention_and_no_answer() -> None:
    cases = [{"question": "a?", "answers": ["443"], "answerable": True, "gold": [["ports.md", 6, 6]],
              "evidence": [{"n": 1, "path": "ports.md", "line": 5, "line_end": 6, "text": "| websecure | 443 |"}]},
             {"question": "b?", "answers": [], "answerable": False, "gold": [], "evidence": []}]
    unreached = [{"answerable": True}, {"answerable": False}, {"answerable": False}]
    answers = {"a?": "The port is **443** [1].", "b?": NO_EVIDENCE_ANSWER}
    out = study.scored(cases, lambda c: answers[c["question"]], unreached)
    assert out["questions"] == 5
    assert out["containment"] == 0.5 and out["false_abstention"] == 0.5
    assert out["abstention"] == 1.0
    assert out["citation_precision"] == 1.0
