"""The vectorised replay (`crag_lab.replay._vectorised`, the default engine) equals the scalar reference, field for field."""

from __future__ import annotations

import gc
import math
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crag_lab import CragConfig, decisions
from crag_lab.replay import Experiment, ReplayReport

RECORDINGS = sorted((Path(__file__).resolve().parents[1] / "notebooks" / "recordings").glob("*.jsonl"))
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TOOLS = ("vector_search", "keyword_search", "grep", "read_file")
ACTIONS = ("GENERATE", "REFINE", "RE_RETRIEVE")
# Grades on a grid, so that drawn thresholds land exactly on them, and just either side of the tolerance.
GRADES = (0.0, 0.1, 0.25, 0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.9, 1.0, 0.7 - 1e-10, 0.3 + 1e-10, 0.7 - 2e-9)
COSINES = (None, 0.5, 0.79, 0.8, 0.85, 0.95)


def assert_same(exp: Experiment, config: CragConfig) -> ReplayReport:
    """Every query, total and list the dashboard shows is identical under both engines (types included)."""
    fast = exp.replay(config)
    ref = exp.replay(config, engine="scalar")
    assert len(fast.queries) == len(ref.queries)
    for got, want in zip(fast.queries, ref.queries, strict=True):
        assert repr(got) == repr(want), f"query {want.id} at {config!r}"  # repr: 1 and 1.0 differ
    assert fast == ref
    assert fast.totals() == ref.totals()
    assert [q.id for q in fast.flipped] == [q.id for q in ref.flipped]
    assert [q.id for q in fast.needs_rerun] == [q.id for q in ref.needs_rerun]
    assert fast.route_counts() == ref.route_counts() and fast.outcome_counts() == ref.outcome_counts()
    return fast


def near(values: list[float]) -> st.SearchStrategy[float]:
    """A value in [0, 1]: one of ``values``, a hair either side of one (the tolerance is 1e-9), or any."""
    offsets = (0.0, 0.0, decisions.TOLERANCE, -decisions.TOLERANCE, 2e-9, -2e-9, 1e-12, -1e-12)
    exact = st.tuples(st.sampled_from(values), st.sampled_from(offsets)).map(lambda p: min(1.0, max(0.0, p[0] + p[1])))
    return st.one_of(exact, exact, st.floats(0.0, 1.0))


@st.composite
def configs(draw: st.DrawFn, base: CragConfig, grades: list[float], cosines: list[float]) -> CragConfig:
    floor, generate = sorted((draw(near(grades)), draw(near(grades))))
    return base.with_changes(
        relevance_floor=floor, generate_threshold=generate,
        vector_score_threshold=draw(st.one_of(st.sampled_from(cosines), st.floats(-1.0, 1.0))),
        aggregator=draw(st.sampled_from(["mean", "max", "any_above"])),
        max_iterations=draw(st.integers(1, 5)), auto_approve_max_items=draw(st.integers(0, 8)),
        prefilter=draw(st.booleans()))


@cache
def recording(name: str) -> Experiment:
    return Experiment.load(next(p for p in RECORDINGS if p.name == name))


@cache
def recorded_values(name: str) -> tuple[list[float], list[float]]:
    """Grader scores and round aggregates (threshold candidates), and vector scores, of a recording."""
    exp = recording(name)
    grades = {float(i["grader_score"]) for r in exp.rounds() for i in r["items"] if i.get("grader_score") is not None}
    grades |= {float(r["aggregate"]) for r in exp.rounds() if r.get("aggregate") is not None}
    return sorted(g for g in grades if 0.0 <= g <= 1.0) or [0.5], sorted(set(exp.vector_scores())) or [0.8]


def test_the_recordings_are_there() -> None:
    assert {p.name for p in RECORDINGS} >= {"kb_knowledge_base.jsonl", "kb_naive_rag.jsonl", "kb_per_item_grading.jsonl"}


@pytest.mark.parametrize("name", [p.name for p in RECORDINGS])
def test_recorded_experiments_replay_identically_at_the_recorded_config(name: str) -> None:
    exp = recording(name)
    report = assert_same(exp, exp.config)
    assert report.totals()["decisions_flipped"] == 0


@pytest.mark.parametrize("name", [p.name for p in RECORDINGS])
def test_recorded_experiments_replay_identically_at_random_thresholds(name: str) -> None:
    exp = recording(name)
    grades, cosines = recorded_values(name)

    @PROPERTY
    @given(configs(exp.config, grades, cosines))
    def check(config: CragConfig) -> None:
        assert_same(exp, config)

    check()


# ---- synthetic experiments: every shape a record can take --------------------------------------------


@st.composite
def rounds_of(draw: st.DrawFn, n_rounds: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Grading rounds (not necessarily ones a real run would make) and the usage records around them."""
    ids = [f"d{j}" for j in range(8)]  # drawn with repeats: an id may occur twice in a round
    rounds, usage = [], [{"node": "analyze_and_route", "iteration": 0, "prompt_tokens": 40, "completion_tokens": 5}]
    for k in range(n_rounds):
        n = draw(st.integers(0, 7))
        items = [{"id": draw(st.sampled_from(ids)), "tool": draw(st.sampled_from(TOOLS)),
                  "vector_score": draw(st.sampled_from(COSINES)), "grader_score": draw(st.sampled_from(GRADES))}
                 for _ in range(n)]
        rule = draw(st.sampled_from([None, None, None, *decisions.PREFILTER_RULES]))
        rnd: dict[str, Any] = {
            "iteration": k + 1, "round_tools": draw(st.lists(st.sampled_from(TOOLS), max_size=3)), "items": items,
            "rule": rule, "action": "GENERATE" if rule else draw(st.sampled_from(ACTIONS)),
            "kept": draw(st.lists(st.sampled_from(ids), max_size=8, unique=True)), "capped": draw(st.booleans()),
            "thresholds": {"max_iterations": draw(st.integers(1, 4))},
            "grader_calls": draw(st.integers(0, 3)), "grader_tokens": draw(st.integers(0, 900)),
        }
        rnd["dropped"] = [i for i in ids if i not in rnd["kept"]][: n // 2]
        shadow = draw(st.sampled_from(["scores", "scores", "none", "empty", "absent"])) if rule else "absent"
        if shadow == "scores":
            rnd["shadow"] = {"scores": [draw(st.sampled_from(GRADES)) for _ in items],
                             "usage": [{"prompt_tokens": 90, "completion_tokens": 7}] * draw(st.integers(0, 2))}
        elif shadow != "absent":
            rnd["shadow"] = None if shadow == "none" else {}
        rounds.append(rnd)
        usage += [{"node": node, "iteration": k + 1, "prompt_tokens": draw(st.integers(1, 500)), "completion_tokens": 9}
                  for node in draw(st.lists(st.sampled_from(["plan", "grade_evidence", "analyze_and_route"]),
                                            max_size=3))]
    usage.append({"node": "synthesize", "iteration": n_rounds, "prompt_tokens": 300, "completion_tokens": 60})
    return rounds, usage


@st.composite
def experiments(draw: st.DrawFn) -> Experiment:
    records = []
    for q in range(draw(st.integers(0, 6))):
        rounds, usage = draw(rounds_of(draw(st.integers(0, 4))))
        records.append({"id": f"q{q}", "query": f"question {q}", "usage": usage, "rounds": rounds,
                        "complexity": draw(st.sampled_from(["complex", "complex", "simple", "chitchat", None]))})
    return Experiment(CragConfig(model_retries=0), records)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(experiments(), st.data())
def test_synthetic_experiments_replay_identically(exp: Experiment, data: st.DataObject) -> None:
    for _ in range(3):  # several configs on the same compiled experiment
        assert_same(exp, data.draw(configs(exp.config, list(GRADES[:11]), [c for c in COSINES if c is not None])))


# ---- edge cases, one by one ------------------------------------------------------------------------------


def graded_round(scores: list[float], *, action: str = "GENERATE", iteration: int = 1, tool: str = "keyword_search",
                 kept: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    items = [{"id": f"d{i}", "tool": tool, "vector_score": 0.9, "grader_score": s} for i, s in enumerate(scores)]
    ids = [i["id"] for i in items]
    return {"iteration": iteration, "round_tools": [tool], "items": items, "rule": None, "action": action,
            "kept": ids if kept is None else kept, "dropped": [], "capped": False,
            "thresholds": {"max_iterations": 3}, "grader_calls": 1, "grader_tokens": 100, **extra}


def one_query(*rounds: dict[str, Any], **record: Any) -> Experiment:
    usage = [{"node": "grade_evidence", "iteration": r["iteration"], "prompt_tokens": 100, "completion_tokens": 5}
             for r in rounds]
    return Experiment(CragConfig(), [{"id": "q1", "query": "?", "complexity": "complex", "rounds": list(rounds),
                                      "usage": usage, **record}])


def test_an_empty_experiment_replays_to_an_empty_report() -> None:
    exp = Experiment(CragConfig(), [])
    report = assert_same(exp, exp.config.with_changes(relevance_floor=0.5))
    assert report.queries == [] and report.totals()["queries"] == 0


def test_records_without_rounds_keep_their_recorded_outcome() -> None:
    exp = Experiment(CragConfig(), [{"id": "c", "query": "hi", "complexity": "chitchat"},
                                    {"id": "s", "query": "port?", "complexity": "simple", "rounds": []}])
    report = assert_same(exp, exp.config.with_changes(generate_threshold=0.9))
    assert [q.outcome for q in report.queries] == ["chitchat", "simple"]


@pytest.mark.parametrize(("prefilter", "auto_approve", "action"),
                         [(True, 0, "GENERATE"), (True, 2, "GENERATE"), (False, 2, "RE_RETRIEVE")])
def test_a_round_with_no_items(prefilter: bool, auto_approve: int, action: str) -> None:
    exp = one_query(graded_round([], action="RE_RETRIEVE"))
    config = exp.config.with_changes(prefilter=prefilter, auto_approve_max_items=auto_approve)
    [q] = assert_same(exp, config).queries
    assert q.actions == [action]
    assert q.fast_path_gained == (["few_context"] if prefilter else [])


def test_a_prefiltered_round_without_shadow_grades_needs_a_rerun() -> None:
    rnd = {**graded_round([0.2, 0.1, 0.9], tool="vector_search"), "rule": "high_vector_score"}
    exp = one_query(rnd)
    [q] = assert_same(exp, exp.config.with_changes(vector_score_threshold=0.95)).queries
    assert q.outcome == "needs_rerun" and "no shadow grades" in q.note and q.actions == []
    [q] = assert_same(exp, exp.config).queries  # the rule still fires: exact
    assert q.outcome == "GENERATE" and q.actions == ["GENERATE"]


@pytest.mark.parametrize("aggregator", ["mean", "max", "any_above"])
def test_an_aggregate_exactly_at_the_generate_threshold_generates(aggregator: str) -> None:
    exp = one_query(graded_round([0.7, 0.7, 0.7]))  # mean 0.6999999999999998: within the tolerance
    [q] = assert_same(exp, exp.config.with_changes(aggregator=aggregator, generate_threshold=0.7)).queries
    assert q.actions == ["GENERATE"]
    [q] = assert_same(exp, exp.config.with_changes(aggregator=aggregator, generate_threshold=0.7 + 2e-9)).queries
    assert q.actions == ["REFINE"]


def threshold_between(low: float, high: float) -> float:
    """A generate threshold ``g`` with ``low < g - TOLERANCE <= high``."""
    g = high + decisions.TOLERANCE
    while g - decisions.TOLERANCE > high:
        g = math.nextafter(g, 0.0)
    while not g - decisions.TOLERANCE > low:
        g = math.nextafter(g, 1.0)
    assert g - decisions.TOLERANCE <= high
    return g


def test_a_mean_that_numpy_rounds_below_the_threshold_is_decided_as_fsum_does() -> None:
    scores = [0.1] * 10
    exact = math.fsum(scores) / len(scores)
    summed = float(np.bincount(np.zeros(len(scores), dtype=np.int64), weights=scores)[0]) / len(scores)
    assert summed < exact  # the premise: a plain float sum lands below math.fsum's
    gen = threshold_between(summed, exact)
    exp = one_query(graded_round(scores))
    [q] = assert_same(exp, exp.config.with_changes(relevance_floor=0.05, generate_threshold=gen)).queries
    assert q.actions == ["GENERATE"] == [decisions.decide(scores, floor=0.05, generate_threshold=gen).action]


def test_any_above_keeps_only_the_confident_items_of_a_generate() -> None:
    exp = one_query(graded_round([0.9, 0.5, 0.2], kept=["d0", "d1"]))
    [q] = assert_same(exp, exp.config.with_changes(aggregator="any_above")).queries
    assert (q.items_kept, q.items_dropped) == (1, 2)
    assert q.outcome == "GENERATE"  # a GENERATE synthesizes whatever it keeps


@pytest.mark.parametrize("breaks", [
    lambda r: r["shadow"].update(scores=[0.5]),  # shadow grades that do not match the items
    lambda r: r.update(iteration="1"),  # an iteration recorded as text
    lambda r: r["items"][0].update(vector_score="high"),
    lambda r: r.update(action="ANSWER"),  # an action no decision function returns
])
def test_records_the_arrays_cannot_read_are_replayed_by_the_reference(breaks: Callable[[dict[str, Any]], None]) -> None:
    rnd = {**graded_round([0.2, 0.9], tool="vector_search"), "rule": "high_vector_score",
           "shadow": {"scores": [0.2, 0.9], "usage": [{"prompt_tokens": 50, "completion_tokens": 5}]}}
    breaks(rnd)
    exp = one_query(rnd)
    for config in (exp.config, exp.config.with_changes(vector_score_threshold=1.0, relevance_floor=0.1)):
        try:
            want = exp.replay(config, engine="scalar")
        except Exception as exc:  # the reference fails on it: so must the default engine, the same way
            with pytest.raises(type(exc), match=str(exc)):
                exp.replay(config)
        else:
            assert exp.replay(config) == want


def test_a_missing_grade_fails_as_in_the_reference() -> None:
    rnd = graded_round([0.9, 0.8, 0.7])
    del rnd["items"][1]["grader_score"]
    exp = one_query(rnd)
    for engine in ("vectorised", "scalar"):
        with pytest.raises(KeyError, match="grader_score"):
            exp.replay(engine=engine)  # type: ignore[arg-type]
        assert exp.replay(auto_approve_max_items=3, engine=engine).queries[0].fast_path_gained == ["few_context"]


def unvalidated(config: CragConfig, **changes: Any) -> CragConfig:
    """A config holding values that skipped validation: every public way of changing one validates now."""
    bad = config.model_copy()
    for name, value in changes.items():
        object.__setattr__(bad, name, value)
    return bad


def test_an_unvalidated_config_fails_as_in_the_reference() -> None:
    exp = one_query(graded_round([0.9, 0.8, 0.7]))  # three items: more than auto-approve lets through
    bad = unvalidated(exp.config, aggregator="median")
    for engine in ("vectorised", "scalar"):
        with pytest.raises(ValueError, match="unknown aggregator 'median'"):
            exp.replay(bad, engine=engine)  # type: ignore[arg-type]


def test_an_unknown_engine_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown replay engine 'numba'.*'vectorised', 'scalar'"):
        Experiment(CragConfig(), []).replay(engine="numba")  # type: ignore[arg-type]


def test_the_compiled_rounds_are_kept_until_the_records_change() -> None:
    exp = one_query(graded_round([0.9, 0.8]))
    exp.replay(relevance_floor=0.5)
    compiled = exp._compiled
    exp.replay(relevance_floor=0.6)
    assert exp._compiled is compiled  # a slider move does not recompile
    exp.records.append({**exp.records[0], "id": "q2", "rounds": [graded_round([0.5, 0.4], action="REFINE")]})
    report = assert_same(exp, exp.config.with_changes(generate_threshold=0.4))
    assert exp._compiled is not compiled and [q.id for q in report.queries] == ["q1", "q2"]
    assert report.queries[1].actions == ["GENERATE"]
    compiled = exp._compiled
    exp.records = [exp.records[1]]  # a new list: a record removed
    assert [q.id for q in assert_same(exp, exp.config).queries] == ["q2"]
    assert exp._compiled is not compiled


def test_replay_leaves_the_garbage_collector_as_it_found_it() -> None:
    exp = one_query(graded_round([0.9, 0.8, 0.7]))
    assert gc.isenabled()
    exp.replay(relevance_floor=0.5)
    assert gc.isenabled()
    with pytest.raises(ValueError, match="unknown aggregator"):
        exp.replay(unvalidated(exp.config, aggregator="median"))
    assert gc.isenabled()
    gc.disable()
    try:
        exp.replay(relevance_floor=0.5)
        assert not gc.isenabled()
    finally:
        gc.enable()
