"""The offline planner (crag_lab/offline/planner.py): REFINE reads the evidence for the bridge."""

from __future__ import annotations

import pytest

from crag_lab.offline.planner import bridge_entities, plan, refined_query
from crag_lab.offline.vectors import VectorCache

QUESTION = "Who leads the team that owns card-router?"
KEPT = [{"text": "# card-router\n\n| Field | Value |\n|---|---|\n| Owning team | Payments Core |\n| Port | 8450 |",
         "path": "services/card-router/README.md", "title": "card-router"}]


@pytest.fixture(scope="module")
def vectors() -> VectorCache:
    return VectorCache()


def test_bridge_entity_comes_from_the_kept_evidence(vectors: VectorCache) -> None:
    assert bridge_entities(QUESTION, KEPT, vectors)[0] == "Payments Core"


def test_refined_query_asks_the_rest_of_the_question_about_the_bridge(vectors: VectorCache) -> None:
    query = refined_query(QUESTION, KEPT, vectors)
    assert query.startswith("Payments Core") and "leads" in query
    assert "card-router" not in query


def test_refine_plans_new_searches_never_repeating_a_call(vectors: VectorCache) -> None:
    inputs = {"query": QUESTION, "refine": True, "top_k": 5, "context": KEPT,
              "available_tools": ["vector_search", "keyword_search", "grep"],
              "routing_plan": {"suggested_tools": ["vector_search"], "sub_questions": [QUESTION]},
              "tool_history": [{"tool": "vector_search", "args": {"query": QUESTION, "top_k": 5}}]}
    calls = plan(inputs, vectors)
    assert calls and all(c["args"].get("query") != QUESTION for c in calls)
    assert {c["tool"] for c in calls} == {"vector_search", "keyword_search"}


def test_without_evidence_the_refined_query_falls_back_to_missing_words(vectors: VectorCache) -> None:
    assert refined_query("Which port does the ledger use?", [], vectors) == "port ledger"
