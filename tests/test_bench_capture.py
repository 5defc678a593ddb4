"""The studies' harness (bench/study_answerability.capture) sees what the offline synthesizer was given.

Every reader study (study_reader, study_scorer, study_reader_ceiling, study_answerability, study_abstain_gate) reads
the evidence `capture` records. When the offline model stopped calling ``synthesizer.respond`` the spy silently
caught nothing; this keeps it wired to the function the model calls.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from crag_lab import Lab
from crag_lab.prompts import NO_EVIDENCE_ANSWER

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from study_answerability import capture

GATEWAY = "# Gateway\n\nThe gateway listens on port 8443.\n\nIt was written by the platform team in 2021.\n"


def test_capture_records_the_evidence_the_answer_and_the_complexity_of_each_question(tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "gateway.md").write_text(GATEWAY, encoding="utf-8")
    lab = Lab.from_directory(kb, remote=False)
    rows = [{"question": "Which port does the gateway listen on?", "complexity": "simple"},
            {"question": "hello there!", "complexity": "chitchat"}]
    (row, evidence, seen, answer, complexity), = capture(lab, rows)
    assert row is rows[0] and complexity == "simple" and seen == []
    assert any("8443" in str(e.get("text")) for e in evidence)
    assert "8443" in answer and lab.ask(rows[0]["question"]).answer.startswith(answer)  # the graph adds sources
    assert not answer.startswith(NO_EVIDENCE_ANSWER)


def test_capture_stops_when_no_question_reached_the_synthesizer(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from crag_lab.offline import synthesizer

    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "gateway.md").write_text(GATEWAY, encoding="utf-8")
    lab = Lab.from_directory(kb, remote=False)
    renamed = synthesizer.read_answer
    monkeypatch.delattr(synthesizer, "read_answer")
    monkeypatch.setattr(synthesizer, "read_answer_v2", renamed, raising=False)
    with pytest.raises((SystemExit, AttributeError)):
        capture(lab, [{"question": "Which port does the gateway listen on?", "complexity": "simple"}])
