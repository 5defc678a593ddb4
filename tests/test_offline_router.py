"""The offline router (crag_lab/offline/router.py): chitchat by meaning, complexity by structure."""

from __future__ import annotations

import pytest

from crag_lab.offline.router import analyze, explain, prototypes
from crag_lab.offline.vectors import VectorCache


@pytest.fixture(scope="module")
def vectors() -> VectorCache:
    return VectorCache()


@pytest.mark.parametrize("message", [
    "Much obliged, that sorted it out!",
    "sorry about the confusion earlier",
    "morning all",
    "catch you later",
    "what sort of things are you good at?",
])
def test_small_talk_is_recognised_by_meaning_without_a_matching_phrase(message: str, vectors: VectorCache) -> None:
    assert explain(message, vectors)[0] == "chitchat"


@pytest.mark.parametrize("message", [
    "Which port does the card-router listen on?",
    "thanks — and which port does the ledger use?",
    "Who do I page for a broken deploy?",
    "retention of audit logs",
])
def test_requests_for_facts_are_not_chitchat(message: str, vectors: VectorCache) -> None:
    assert explain(message, vectors)[0] != "chitchat"


@pytest.mark.parametrize(("message", "rule"), [
    ("Which has the longer retention, traces or logs?", "alternatives"),
    ("What changed in the rollback procedure after the outage?", "change_over_time"),
    ("Who leads the team that owns card-router?", "bridge"),
    ("Which team owns the ledger, and where do I reach them?", "two_questions"),
])
def test_relations_between_facts_are_complex(message: str, rule: str, vectors: VectorCache) -> None:
    assert explain(message, vectors) == ("complex", rule)


def test_prototypes_are_varied_and_shipped() -> None:
    protos = prototypes()
    assert len(protos["chitchat"]) >= 40 and len(protos["question"]) >= 30
    assert not set(protos["chitchat"]) & set(protos["question"])


def test_retry_picks_a_strategy_not_yet_tried() -> None:
    plan = analyze("Which port does the gateway use?", available=["vector_search", "keyword_search", "grep"],
                   tried=["vector_search", "keyword_search"], retrying=True)
    assert plan["suggested_tools"][0] == "grep"
