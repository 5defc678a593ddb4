"""The reader ceiling (crag_lab/eval/ceiling.py) and the ranking it reads (synthesizer.ranked)."""

from __future__ import annotations

import pytest

from crag_lab.eval.ceiling import answer_rank, oracle_at, parse_pick, pick_prompt
from crag_lab.offline.reading import read
from crag_lab.offline.synthesizer import choose, ranked
from crag_lab.offline.vectors import VectorCache


def test_answer_rank_is_the_first_unit_holding_a_gold_answer_as_the_metric_reads_it() -> None:
    texts = ["Owning team: Payments", "Public listener: `8443` (TLS)", "Port 8443 again"]
    assert answer_rank(texts, ["8443"]) == 2  # markup ignored, the first holder counts
    assert answer_rank(texts, ["9000", "payments"]) == 1  # any gold alias, case ignored
    assert answer_rank(texts, ["Tiago Mendes"]) is None
    assert answer_rank(texts, []) is None


def test_oracle_counts_every_question_and_grows_with_k() -> None:
    ranks = [1, 3, None, 2, 6]
    shares = oracle_at(ranks, (1, 2, 3, 5, 10))
    assert shares == {1: 0.2, 2: 0.4, 3: 0.6, 5: 0.6, 10: 0.8}  # a None never counts, at any k
    assert oracle_at([], (1,)) == {1: 0.0}


def test_the_reader_prompt_numbers_the_units_from_one_and_keeps_them_short() -> None:
    prompt = pick_prompt("Who leads Payments?", ["Team:  Payments\n Lead: Tiago", "x" * 900], max_chars=50)
    assert "1. Team: Payments Lead: Tiago\n" in prompt  # whitespace of a table row collapsed
    assert "2. " + "x" * 50 + "\n" in prompt and "x" * 51 not in prompt
    assert prompt.startswith("Question: Who leads Payments?") and prompt.endswith("Answer:")


@pytest.mark.parametrize(("reply", "pick"), [("2", 2), (" Passage 3.", 3), ("0", 0), ("4", None), ("none", None)])
def test_a_reply_names_a_shown_passage_zero_or_nothing(reply: str, pick: int | None) -> None:
    assert parse_pick(reply, 3) == pick


def test_the_ranking_is_the_order_the_synthesizer_quotes_from() -> None:
    items = [{"n": 1, "title": "Teams", "text": "## Teams\n\n| Team | Lead |\n|---|---|\n| Payments | Tiago Mendes |"},
             {"n": 2, "title": "Gateway", "text": "The gateway listens on port 8443. It is run by the Edge team."}]
    reading = read("On which port does the gateway listen?", items, VectorCache())
    order = ranked(reading)
    assert [score for score, _ in order] == sorted((score for score, _ in order), reverse=True)
    assert len(order) == sum(len(item.units) for item in reading.items)  # every unit, once
    assert choose(reading).units[0] is order[0][1]
    assert "8443" in order[0][1].unit.text
