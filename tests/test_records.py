"""The recorded run (crag_lab/records.py): its types match what is written, old recordings still load and
replay, evaluate and route exactly as they did, and every reader asks `run_route` how a run ended."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, get_args

import pytest
from _experiments import COMPLEX, items, mixed_experiment

from crag_lab import CragConfig, Lab
from crag_lab.decisions import AfterAnalyze, AfterGrade, AfterTools
from crag_lab.eval import Evaluation, load_dataset
from crag_lab.records import (
    NODE_NAMES,
    AnswerReading,
    CitationRecord,
    ItemRecord,
    QueryRecord,
    RoundRecord,
    RoundThresholds,
    ShadowGrades,
    UsageRecord,
    WeighedUnit,
    round_grades,
    run_route,
    usage_tokens,
)
from crag_lab.replay import Experiment, outcome_of, recorded_outcome
from crag_lab.testing import ScriptedLLM, StaticTool

DATA = Path(__file__).parent / "data"
# Recorded before the records had a type (commit b9785d1, notebooks/recordings/), with the answers
# those recordings gave to the old code, pinned in recording_v1_expected.json.
RECORDINGS = {mode: DATA / f"recording_v1_{mode}.jsonl" for mode in ("knowledge_base", "naive_rag")}
EXPECTED = json.loads((DATA / "recording_v1_expected.json").read_text(encoding="utf-8"))


def keys(td: type) -> set[str]:
    return set(td.__annotations__)


def assert_shaped(record: QueryRecord) -> None:
    """Every key written is declared by the types, and every declared key is written ("read" only from a model that
    says how it read the evidence: the offline one)."""
    assert set(record) - {"read"} == keys(QueryRecord) - {"read"}
    if "read" in record:
        assert set(record["read"]) == keys(AnswerReading) and record["read"]["units"]
        assert all(set(unit) == keys(WeighedUnit) for unit in record["read"]["units"])
    for usage in record["usage"]:  # "cached" only where the response cache answered (crag_lab/cache.py)
        assert set(usage) - {"cached"} == keys(UsageRecord) - {"cached"}
        assert usage.get("cached", True) is True
    for citation in record["citations"]:
        assert set(citation) == keys(CitationRecord)
    for rnd in record["rounds"]:
        assert set(rnd) == keys(RoundRecord)
        assert set(rnd["thresholds"]) == keys(RoundThresholds)
        for item in rnd["items"]:
            assert set(item) == keys(ItemRecord)
        if rnd["shadow"] is not None:
            assert set(rnd["shadow"]) == keys(ShadowGrades)


@pytest.mark.parametrize("mode", sorted(RECORDINGS))
def test_an_old_recording_loads_and_has_the_declared_shape(mode: str) -> None:
    exp = Experiment.load(RECORDINGS[mode])
    assert len(exp) == len(EXPECTED[mode]["routes"])
    for record in exp:
        assert_shaped(record)


@pytest.mark.parametrize("mode", sorted(RECORDINGS))
def test_an_old_recording_routes_and_replays_as_it_did(mode: str) -> None:
    exp = Experiment.load(RECORDINGS[mode])
    expected = EXPECTED[mode]
    assert [run_route(r) for r in exp] == expected["routes"]
    assert [recorded_outcome(r) for r in exp] == expected["recorded_outcomes"]
    assert exp.fast_path_counts() == expected["fast_path_counts"]
    assert exp.calls_per_query() == expected["calls_per_query"]
    assert len(exp.graded_items()) == expected["graded_items"]
    for replay in expected["replays"]:
        for engine in ("vectorised", "scalar"):
            got = [{k: v for k, v in dataclasses.asdict(q).items() if k != "query"}
                   for q in exp.replay(engine=engine, **replay["changes"]).queries]
            assert got == replay["queries"], (engine, replay["changes"])


def _clean(value: Any) -> Any:
    """NaN as None and tuples as lists, as the pinned JSON holds them."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def test_an_old_recording_evaluates_as_it_did() -> None:
    exps = {mode: Experiment.load(path) for mode, path in RECORDINGS.items()}
    ev = Evaluation.from_experiments(load_dataset("data/kb_queries.jsonl"), exps)
    expected = EXPECTED["evaluation"]
    # Every number the old code reported is unchanged; metrics added since (exact match, F1, ...) may join.
    assert_includes(_clean(json.loads(json.dumps(ev.to_json(), default=str))), expected["metrics"])
    assert_includes(_clean(ev.queries.drop(columns=["answer"]).to_dict("records")), expected["queries"])
    assert (len(ev.items), len(ev.rounds)) == (expected["items"], expected["rounds"])


def assert_includes(actual: Any, expected: Any, where: str = "") -> None:
    """``actual`` holds everything ``expected`` does, equal, and maybe more keys (dicts only)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), where
        for key, value in expected.items():
            assert key in actual, f"{where}.{key} is gone"
            assert_includes(actual[key], value, f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), where
        for n, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_includes(a, e, f"{where}[{n}]")
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def test_the_offline_models_reading_is_recorded_in_the_declared_shape(tmp_path: Path) -> None:
    from crag_lab.offline import OfflineModel

    rows = [{"text": "# api-gateway\n\n| Field | Value |\n|---|---|\n| Public TLS port | 8443 |", "path": "gateway.md",
             "line": 1, "line_end": 5, "score": 0.7, "title": "api-gateway"}]
    lab = Lab([StaticTool("vector_search", rows)], llm=OfflineModel(), config=CragConfig(model_retries=0))
    exp = lab.run([{"id": "q1", "question": "Which port does the api-gateway use for public TLS traffic?"},
                   {"id": "q2", "question": "Who approves a rate-limit override for the billing team?"},
                   {"id": "q3", "question": "Hi there!"}])
    for record in exp:
        assert_shaped(record)
    answered, withheld, chat = exp.records
    assert answered["read"]["abstained"] is False and answered["read"]["units"][0]["quoted"]
    assert withheld["read"]["abstained"] is True and not any(u["quoted"] for u in withheld["read"]["units"])
    assert "read" not in chat  # small talk reads no evidence
    assert Experiment.load(exp.save(tmp_path / "exp.jsonl")).records == json.loads(json.dumps(exp.records))


def test_a_new_recording_has_the_declared_shape_and_survives_save_and_load(tmp_path: Path) -> None:
    exp, _ = mixed_experiment()
    assert any(rnd["shadow"] for rec in exp for rnd in rec["rounds"])  # every part of the type is exercised
    for record in exp:
        assert_shaped(record)
    loaded = Experiment.load(exp.save(tmp_path / "exp.jsonl"))
    assert loaded.records == json.loads(json.dumps(exp.records))
    assert loaded.replay(relevance_floor=0.5) == exp.replay(relevance_floor=0.5)


def test_ask_result_route_is_run_route_of_its_record() -> None:
    exp, _ = mixed_experiment()
    assert [run_route(r) for r in exp] == ["chitchat", "simple", "GENERATE", "GENERATE", "GENERATE", "GENERATE",
                                           "GENERATE"]
    lab = Lab([StaticTool("vector_search", items(2))], llm=ScriptedLLM({"analyze": COMPLEX, "plan": "[]",
                                                                           "synthesize": "An answer."}))
    for mode in ("knowledge_base", "naive_rag", "normal"):
        result = lab.ask("which port?", mode=mode)
        assert result.route == run_route(result.to_record("q1")) == ("GENERATE" if mode == "knowledge_base" else mode)


ROUND: RoundRecord = {
    "iteration": 3, "round_tools": ["keyword_search"], "rule": None, "parse_ok": True,
    "items": [{"id": "a", "path": "a.md", "line": 1, "tool": "keyword_search", "vector_score": None,
               "grader_score": 0.5, "new": True}],
    "grader_calls": 1, "grader_tokens": 9, "aggregate": 0.5, "action": "REFINE", "kept": ["a"], "dropped": [],
    "capped": True, "shadow": None,
    "thresholds": {"relevance_floor": 0.3, "generate_threshold": 0.7, "vector_score_threshold": 0.8,
                   "auto_approve_max_items": 2, "max_iterations": 3, "aggregator": "mean"},
}


@pytest.mark.parametrize(("record", "route", "outcome"), [
    ({"mode": "normal", "rounds": []}, "normal", "other"),
    ({"mode": "naive_rag", "complexity": None, "rounds": []}, "naive_rag", "other"),
    ({"mode": "knowledge_base", "complexity": "chitchat", "rounds": []}, "chitchat", "chitchat"),
    ({"mode": "knowledge_base", "complexity": "simple", "rounds": []}, "simple", "simple"),
    ({"mode": "knowledge_base", "complexity": "complex", "rounds": []}, "complex", "other"),
    ({"mode": "knowledge_base", "complexity": "complex", "rounds": [ROUND]}, "capped", "capped"),
    ({"mode": "knowledge_base", "complexity": "complex", "rounds": [{**ROUND, "action": "GENERATE"}]},
     "GENERATE", "GENERATE"),
    ({"mode": "knowledge_base", "complexity": "complex", "rounds": [{**ROUND, "capped": False}]}, "REFINE", "other"),
    ({"complexity": "complex", "rounds": [{**ROUND, "action": "GENERATE"}]}, "GENERATE", "GENERATE"),  # no mode
])
def test_run_route_and_the_replay_outcome_it_gives(record: Any, route: str, outcome: str) -> None:
    assert run_route(record) == route
    assert outcome_of(run_route(record)) == outcome


def test_round_grades_are_the_graders_or_the_shadow_or_none() -> None:
    assert round_grades(ROUND) == ([0.5], "grader")
    skipped: RoundRecord = {**ROUND, "rule": "few_context"}
    assert round_grades(skipped) is None
    assert round_grades({**skipped, "shadow": {"scores": [0.2], "usage": []}}) == ([0.2], "shadow")


def test_usage_tokens_adds_prompt_and_completion() -> None:
    usage: list[UsageRecord] = [
        {"node": "plan", "task": "plan", "prompt_tokens": 7, "completion_tokens": 2, "latency_ms": 1.0, "ok": True,
         "attempts": 1, "iteration": 0},
        {"node": "synthesize", "task": "synthesize", "prompt_tokens": 30, "completion_tokens": 11, "latency_ms": 1.0,
         "ok": True, "attempts": 1, "iteration": 0},
    ]
    assert usage_tokens(usage) == 50
    assert usage_tokens([]) == 0


def test_node_names_are_one_vocabulary() -> None:
    from crag_lab.graph import build_graph

    routed = set(get_args(AfterAnalyze)) | set(get_args(AfterTools)) | set(get_args(AfterGrade))
    assert routed <= set(NODE_NAMES)
    graph = build_graph(ScriptedLLM({}), [], CragConfig())
    assert set(graph.get_graph().nodes) - {"__start__", "__end__"} == set(NODE_NAMES)


def test_shadow_grading_is_an_argument_not_a_mode_of_the_lab() -> None:
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": '[{"tool": "vector_search", "args": {"query": "q"}}]',
                       "grade": "[0.9]", "synthesize": "An answer [1]."})
    lab = Lab([StaticTool("vector_search", items(2))], llm=llm)
    recorded = lab.run(["which port?"], shadow_grading=True).records[0]["rounds"][0]
    assert recorded["rule"] == "few_context" and recorded["shadow"] is not None
    assert not any(name.startswith("_shadow") for name in vars(lab))
    asked = lab.ask("which port?").state["rounds"][0]
    assert asked["rule"] == "few_context" and asked["shadow"] is None
    assert lab.ask("which port?", shadow_grading=True).state["rounds"][0]["shadow"] is not None
