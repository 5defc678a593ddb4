"""Resumable, concurrent runs (crag_lab/journal.py): never ask a finished question twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _experiments import COMPLEX, PLAN, items

from crag_lab import CragConfig, Lab
from crag_lab.journal import JournalMismatchError, ModelUnavailableError, RunJournal
from crag_lab.parsing import strip_stats_blocks
from crag_lab.testing import ScriptedLLM, StaticTool

QUESTIONS = [{"id": f"q{i}", "question": f"question number {i}?"} for i in range(8)]


class CountingLLM(ScriptedLLM):
    """Scripted, and can be told to fail (like a dead server) or to interrupt (like Ctrl-C) on one question."""

    def __init__(self, *, interrupt_on: str | None = None, dead_on: str | None = None) -> None:
        super().__init__({"analyze": COMPLEX, "plan": PLAN, "grade": "[0.9, 0.8, 0.2, 0.1]", "synthesize": "A [1]."})
        self.interrupt_on, self.dead_on = interrupt_on, dead_on

    def complete(self, task, prompt, inputs):  # type: ignore[no-untyped-def]
        if self.interrupt_on and task == "analyze" and self.interrupt_on in prompt:
            raise KeyboardInterrupt
        if self.dead_on and self.dead_on in prompt:
            raise ConnectionError("Connection refused")
        return super().complete(task, prompt, inputs)

    def questions_asked(self) -> list[str]:
        return [c["prompt"].split("Question: ")[1].split("\n")[0] for c in self.calls_for("analyze")]


def make_lab(llm: ScriptedLLM) -> Lab:
    return Lab([StaticTool("vector_search", items(4))], llm=llm, config=CragConfig(model_retries=1, retry_backoff_s=0.0))


def clean(record: dict) -> tuple:
    return record["id"], strip_stats_blocks(str(record["answer"])), [r["action"] for r in record.get("rounds", [])]


def test_an_interrupted_run_resumes_and_never_asks_a_finished_question_twice(tmp_path: Path) -> None:
    journal = tmp_path / "run.journal.jsonl"
    first = CountingLLM(interrupt_on="question number 5?")
    with pytest.raises(KeyboardInterrupt):
        make_lab(first).run(QUESTIONS, journal=journal)
    done = [json.loads(line)["id"] for line in journal.read_text().splitlines()[1:]]
    assert done == ["q0", "q1", "q2", "q3", "q4"]

    second = CountingLLM()
    exp = make_lab(second).run(QUESTIONS, journal=journal)
    assert second.questions_asked() == ["question number 5?", "question number 6?", "question number 7?"]
    assert [r["id"] for r in exp.records] == [q["id"] for q in QUESTIONS]
    reference = make_lab(CountingLLM()).run(QUESTIONS)
    assert [clean(r) for r in exp.records] == [clean(r) for r in reference.records]


def test_concurrent_runs_give_the_records_of_a_sequential_run_in_order() -> None:
    sequential = make_lab(CountingLLM()).run(QUESTIONS)
    concurrent = make_lab(CountingLLM()).run(QUESTIONS, concurrency=4)
    assert [clean(r) for r in concurrent.records] == [clean(r) for r in sequential.records]


def test_a_dead_model_stops_the_run_naming_it_and_records_nothing_for_that_question(tmp_path: Path) -> None:
    journal = tmp_path / "run.journal.jsonl"
    with pytest.raises(ModelUnavailableError, match=r"q3 \(analyze, plan, grade, synthesize\)|q3 \(") as info:
        make_lab(CountingLLM(dead_on="question number 3?")).run(QUESTIONS, journal=journal)
    assert "run the same command again to resume" in str(info.value)
    done = [json.loads(line)["id"] for line in journal.read_text().splitlines()[1:]]
    assert done == ["q0", "q1", "q2"]
    # The server is back: the rest is asked, q0-q2 are not.
    llm = CountingLLM()
    make_lab(llm).run(QUESTIONS, journal=journal)
    assert llm.questions_asked()[0] == "question number 3?" and len(llm.questions_asked()) == 5


def test_without_a_journal_a_dead_model_degrades_as_documented() -> None:
    exp = make_lab(CountingLLM(dead_on="question number 3?")).run(QUESTIONS)
    assert len(exp) == len(QUESTIONS)
    assert not all(u["ok"] for u in exp.records[3]["usage"])


def test_a_journal_of_another_run_is_refused(tmp_path: Path) -> None:
    journal = tmp_path / "run.journal.jsonl"
    make_lab(CountingLLM()).run(QUESTIONS[:2], journal=journal)
    with pytest.raises(JournalMismatchError, match="another config"):
        make_lab(CountingLLM()).run(QUESTIONS, journal=journal, config=CragConfig(relevance_floor=0.2))
    (tmp_path / "other.jsonl").write_text('{"id": "x"}\n')
    with pytest.raises(JournalMismatchError, match="not a crag_lab run journal"):
        RunJournal(tmp_path / "other.jsonl", config=CragConfig(), mode="knowledge_base", model={"name": "m"})


def test_a_torn_last_line_is_asked_again(tmp_path: Path) -> None:
    journal = tmp_path / "run.journal.jsonl"
    make_lab(CountingLLM()).run(QUESTIONS[:3], journal=journal)
    lines = journal.read_text().splitlines()
    journal.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])  # killed mid-write
    llm = CountingLLM()
    exp = make_lab(llm).run(QUESTIONS[:3], journal=journal)
    assert llm.questions_asked() == ["question number 2?"]
    assert [r["id"] for r in exp.records] == ["q0", "q1", "q2"]
    assert len(RunJournal(journal, config=exp.config, mode="knowledge_base", model={"name": "scripted"})) == 3


def test_concurrency_must_be_positive() -> None:
    with pytest.raises(ValueError, match="concurrency must be >= 1"):
        make_lab(CountingLLM()).run(QUESTIONS, concurrency=0)



