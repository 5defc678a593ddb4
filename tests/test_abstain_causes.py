"""Why a run abstained, as the evaluation counts it: each reason the offline synthesizer gives maps to its cause."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from test_eval_runner import ITEMS, FakeModel, dataset

from crag_lab import CragConfig, Lab, ModelReply
from crag_lab.eval import evaluate
from crag_lab.eval.metrics import ABSTAIN_CAUSE_ORDER, ABSTAIN_CAUSES, abstain_cause
from crag_lab.learned import Span
from crag_lab.offline.doubt import doubted
from crag_lab.offline.reading import UnitReading
from crag_lab.offline.synthesizer import Choice, why_abstained
from crag_lab.offline.units import Unit
from crag_lab.prompts import NO_EVIDENCE_ANSWER
from crag_lab.testing import StaticTool

BEST = UnitReading(Unit(2, "The gateway listens on port 8443.", frozenset({"gateway", "port"})), 0.6, 0.5, True)


class NoAnswer:
    """A span reader whose best margin over "no answer" is below its card's cut, for every passage."""

    def __init__(self) -> None:
        self.card = {"abstain_margin": 2.0}

    def read(self, question: str, passages: Sequence[str]) -> list[Span]:
        return [Span("8443", 0, 4, -1.5) for _ in passages]


@pytest.mark.parametrize(("choice", "cause"), [
    (Choice((BEST,), 0.9, ungrounded=("Maestro",)), "names"),
    (Choice((), 0.0), "nothing_to_quote"),
    (Choice((BEST,), 0.9, unnegated=True), "negation"),
    (Choice((BEST,), 0.2, abstain_below=0.5, measure="answer probability"), "scorer_probability"),
    (Choice((BEST,), 0.41), "weak_best_unit"),
])
def test_each_reason_the_synthesizer_gives_has_its_cause(choice: Choice, cause: str) -> None:
    assert choice.abstains
    # as the synthesize node records it: its own clause, then the model's reason
    assert abstain_cause(no_evidence=False, reason=f"the model found no answer in the evidence: "
                                                   f"{why_abstained(choice)}") == cause


def test_the_doubt_reader_and_the_missing_cases_have_theirs() -> None:
    reason = doubted("Which port?", [(1, "The gateway listens on port 8443.")], NoAnswer())
    assert abstain_cause(no_evidence=False, reason=reason) == "doubt_reader"
    assert abstain_cause(no_evidence=True, reason=reason) == "no_evidence"
    assert abstain_cause(no_evidence=False, reason="an LLM said nothing useful") == "unexplained"
    assert set(ABSTAIN_CAUSE_ORDER) == {"no_evidence", "unexplained", *(c for c, _ in ABSTAIN_CAUSES)}


class Explains(FakeModel):
    """Abstains on the answerable gateway question, giving the rules' weak-unit reason, and on the DPO one silently."""

    def complete(self, task: str, prompt: str, inputs: Mapping[str, Any]) -> ModelReply:
        if task == "synthesize" and inputs.get("kind", "answer") == "answer" and "gateway" in str(inputs["query"]):
            return ModelReply(NO_EVIDENCE_ANSWER, 5, 2, note=why_abstained(Choice((BEST,), 0.41)))
        return super().complete(task, prompt, inputs)


def test_the_evaluation_counts_abstentions_by_cause_apart_for_unanswerable_and_answerable() -> None:
    lab = Lab([StaticTool("vector_search", ITEMS)], llm=Explains(), config=CragConfig(model_retries=0))
    run = evaluate(lab, dataset(), modes=["knowledge_base", "naive_rag"])
    for mode in run.modes:
        why = run.abstentions(mode)
        assert why["weak_best_unit"] == {"unanswerable": 0, "answerable": 1, "other": 0}  # a false abstention
        assert why["unexplained"] == {"unanswerable": 1, "answerable": 0, "other": 0}  # the DPO question
        assert sum(sum(v.values()) for v in why.values()) == 2
    assert json.loads(json.dumps(run.to_json()))["modes"]["naive_rag"]["abstentions"]["weak_best_unit"]["answerable"] == 1
    md = run.to_markdown()
    assert "Why the runs abstained" in md and "| weak_best_unit | 0 / 1 | 0 / 1 |" in md
    assert "| unexplained | 1 / 0 | 1 / 0 |" in md and "| names |" not in md  # causes no run had are left out
