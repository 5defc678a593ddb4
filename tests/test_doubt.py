"""The doubt check (opt-in, CRAG_OFFLINE_DOUBT=1): the offline synthesizer abstains when the doubt reader (a span reader
trained with written unanswerable questions) finds no answer to a one-fact question quoted from prose
(crag_lab.offline.doubt)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from crag_lab.learned import Span, SpanReader
from crag_lab.learned.spans import DOUBT_DIR
from crag_lab.offline import OfflineModel
from crag_lab.offline.doubt import applies, cut_from, doubted
from crag_lab.offline.synthesizer import respond
from crag_lab.offline.vectors import VectorCache
from crag_lab.prompts import NO_EVIDENCE_ANSWER

LIGHTHOUSE = {"n": 1, "title": "Kessock lighthouse", "path": "history/kessock.md",
              "text": "The Kessock lighthouse was built in 1871 by the engineer Thomas Reid. It was automated in 1987, "
                      "and its last keepers moved to the village of Arden."}
ANSWERABLE = ["Who built the Kessock lighthouse?", "When was the Kessock lighthouse automated?",
              "Where did the last keepers move?"]
WRITTEN_UNANSWERABLE = ["Who demolished the Kessock lighthouse?", "When was the Kessock lighthouse painted red?",
                        "Which engineer designed the Arden harbour?"]
"""Each about the paragraph's subject, with a plausible answer of the asked kind in it, and not answered by it. The
rules answer the first two (a person, a year); the third they withhold already (low support)."""
RULES_ANSWER = WRITTEN_UNANSWERABLE[:2]


class FakeReader:
    def __init__(self, margins: Sequence[float], cut: float | None = 2.0) -> None:
        self.margins = list(margins)
        self.card = {} if cut is None else {"abstain_margin": cut}

    def read(self, question: str, passages: Sequence[str]) -> list[Span]:
        return [Span("1987", 0, 4, m) for m, _ in zip(self.margins, passages, strict=False)]


@pytest.fixture(scope="module")
def doubter() -> SpanReader:
    return SpanReader.load(DOUBT_DIR)


def test_only_the_adapter_head_and_card_ship_and_they_are_small() -> None:
    assert sorted(p.name for p in DOUBT_DIR.iterdir() if p.name != "__pycache__") == [
        "DATA_CARD.md", "adapter_config.json", "adapter_model.safetensors", "spans.json"]
    assert (DOUBT_DIR / "adapter_model.safetensors").stat().st_size < 5 * 2**20  # the project's limit a file
    card = json.loads((DOUBT_DIR / "spans.json").read_text(encoding="utf-8"))
    held = card["held_out_at_the_cut"]
    assert card["abstain_margin"] == pytest.approx(2.26)
    # the rule: at most 15 % of the held-out answerable questions below the cut (both answerable sources together)
    answerable = [held[s] for s in ("squad11", "docs")]
    assert sum(h["rows"] * h["below_abstain_margin"] for h in answerable) / sum(h["rows"] for h in answerable) <= 0.15
    assert held["written-unanswerable"]["below_abstain_margin"] > 0.7


def test_the_cut_lets_at_most_the_share_of_answerable_margins_fall_below_it() -> None:
    margins = [-3.2, -0.5, 0.7, 1.9, 2.25, 2.5, 3.0, 4.1, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15, 16]
    cut = cut_from(margins)
    assert cut == 1.9 and sum(m < cut for m in margins) == 3  # 15 % of 20
    assert sum(m < cut_from(margins, share=0.25) for m in margins) == 5  # the highest such cut: a sixth would be over
    assert cut_from([-1.237, 5.0]) == -1.24  # rounded down, never up past a margin


def test_the_margin_decides_only_for_a_one_fact_question_quoted_from_prose() -> None:
    assert applies("simple", "The Kessock lighthouse was built in 1871.")
    assert not applies("complex", "The Kessock lighthouse was built in 1871.")  # a multi-hop answer spans items
    assert not applies(None, "The Kessock lighthouse was built in 1871.")  # the router did not say
    assert not applies("simple", "Retention: 13 months")  # a labelled row
    assert not applies("simple", "Run `make reset` to start again.")  # code


def test_doubted_names_the_best_margin_its_item_and_the_cut() -> None:
    items = [(3, "A: one"), (5, "B: two")]
    why = doubted("When?", items, FakeReader([-4.0, 1.5]))
    assert why == ("the doubt reader finds no answer in the evidence: its best margin over 'no answer' ('1987' in "
                   "item [5]) is 1.5, below its abstain_margin 2")
    assert doubted("When?", items, FakeReader([-4.0, 2.0])) is None  # at the cut: answers
    assert doubted("When?", items, FakeReader([-4.0, -9.0], cut=None)) is None  # a reader without a cut never doubts
    assert doubted("When?", [], FakeReader([])) is None


def test_the_doubt_reader_tells_written_unanswerable_questions_from_their_answerable_twins(doubter: SpanReader) -> None:
    cut = doubter.card["abstain_margin"]
    passage = f"{LIGHTHOUSE['title']}: {LIGHTHOUSE['text']}"
    answered = [doubter.read(q, [passage])[0] for q in ANSWERABLE]
    assert [s.text for s in answered] == ["Thomas Reid", "1987", "village of Arden"]
    assert all(s.margin >= cut for s in answered)
    assert all(doubter.read(q, [passage])[0].margin < cut for q in WRITTEN_UNANSWERABLE)


def test_the_synthesizer_abstains_on_them_and_says_why(doubter: SpanReader) -> None:
    for question in RULES_ANSWER:
        assert respond(question, [LIGHTHOUSE], VectorCache())[0] != NO_EVIDENCE_ANSWER  # the rules alone answer
        text, why = respond(question, [LIGHTHOUSE], VectorCache(), doubter=doubter, complexity="simple")
        assert text == NO_EVIDENCE_ANSWER
        assert why is not None and why.startswith("the doubt reader finds no answer in the evidence") and "item [1]" in why
        assert respond(question, [LIGHTHOUSE], VectorCache(), doubter=doubter, complexity="complex")[0] != NO_EVIDENCE_ANSWER
    for question in ANSWERABLE:
        plain = respond(question, [LIGHTHOUSE], VectorCache())
        assert respond(question, [LIGHTHOUSE], VectorCache(), doubter=doubter, complexity="simple") == plain


def test_a_labelled_row_is_quoted_whatever_the_doubt_reader_says() -> None:
    row = {"n": 1, "title": "Kessock lighthouse", "text": "- **Automated:** 1987\n- **Keepers moved to:** Arden"}
    question = "When was the Kessock lighthouse automated?"
    assert respond(question, [row], VectorCache(), doubter=FakeReader([-9.0]), complexity="simple") == \
        respond(question, [row], VectorCache())


def test_the_offline_model_reads_the_routers_complexity_and_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from crag_lab.learned.spans import fingerprint

    question = RULES_ANSWER[0]
    inputs = {"query": question, "kind": "answer", "evidence": [LIGHTHOUSE]}
    assert not OfflineModel().doubt and "doubt" not in OfflineModel().cache_identity()  # opt-in
    assert OfflineModel().complete("synthesize", "", {**inputs, "complexity": "simple"}).text != NO_EVIDENCE_ANSWER
    monkeypatch.setenv("CRAG_OFFLINE_DOUBT", "1")
    assert OfflineModel().doubt and OfflineModel().cache_identity()["doubt"] == fingerprint(DOUBT_DIR)
    reply = OfflineModel().complete("synthesize", "", {**inputs, "complexity": "simple"})
    assert reply.text == NO_EVIDENCE_ANSWER and reply.note is not None and "doubt reader" in reply.note
    assert OfflineModel().complete("synthesize", "", inputs).text != NO_EVIDENCE_ANSWER  # no complexity: no doubt
    assert not OfflineModel(doubt=False).doubt


def test_through_the_graph_a_written_unanswerable_question_is_withheld(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from crag_lab import Lab

    monkeypatch.setenv("CRAG_OFFLINE_DOUBT", "1")

    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "kessock.md").write_text(f"# {LIGHTHOUSE['title']}\n\n{LIGHTHOUSE['text']}\n", encoding="utf-8")
    lab = Lab.from_directory(kb, remote=False)
    withheld = lab.ask(RULES_ANSWER[0])
    assert withheld.route == "simple" and withheld.answer.startswith(NO_EVIDENCE_ANSWER)
    answered = lab.ask(ANSWERABLE[0])
    assert not answered.answer.startswith(NO_EVIDENCE_ANSWER) and "Thomas Reid" in answered.answer
