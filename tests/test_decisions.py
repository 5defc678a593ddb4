"""Property tests of the pure decision functions at and around each threshold."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from crag_lab.decisions import (
    aggregate,
    auto_approve,
    decide,
    prefilter_rule,
    route_after_analyze,
    route_after_grade,
    route_after_tools,
)

score = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
scores = st.lists(score, min_size=1, max_size=12)
threshold = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@given(scores, threshold, threshold)
def test_decide_partitions_items_by_the_floor(values: list[float], a: float, b: float) -> None:
    floor, generate = min(a, b), max(a, b)
    d = decide(values, floor=floor, generate_threshold=generate)
    assert sorted(d.kept + d.dropped) == list(range(len(values)))
    assert all(values[i] >= floor for i in d.kept)
    assert all(values[i] < floor for i in d.dropped)


@given(scores, threshold, threshold)
def test_decide_action_follows_the_mean_of_survivors(values: list[float], a: float, b: float) -> None:
    floor, generate = min(a, b), max(a, b)
    d = decide(values, floor=floor, generate_threshold=generate)
    survivors = [v for v in values if v >= floor]
    if not survivors:
        assert d.action == "RE_RETRIEVE" and d.aggregate is None
        return
    mean = math.fsum(survivors) / len(survivors)
    assume(abs(mean - generate) > 1e-8)  # exactly-at-threshold means are tested below
    assert d.action == ("GENERATE" if mean >= generate else "REFINE")


@pytest.mark.parametrize(
    ("values", "action"),
    [
        ([0.7, 0.7, 0.7], "GENERATE"),  # mean exactly 0.7: GENERATE (≥)
        ([0.69999, 0.7], "REFINE"),
        ([0.3, 0.3], "REFINE"),  # mean exactly the floor: REFINE (≥ 0.3 and < 0.7)
        ([0.29999], "RE_RETRIEVE"),  # below the floor: dropped, nothing left
        ([0.1, 0.2, 0.05], "RE_RETRIEVE"),
        ([1.0, 0.0], "GENERATE"),  # 0.0 is dropped, the survivor's mean is 1.0
        ([0.6, 0.2, 0.5], "REFINE"),
        ([0.2, 0.1, 0.3], "REFINE"),  # one survivor at exactly 0.3
    ],
)
def test_decide_at_the_spec_thresholds(values: list[float], action: str) -> None:
    assert decide(values, floor=0.3, generate_threshold=0.7).action == action


@given(st.floats(min_value=0.0, max_value=1.0, allow_nan=False), st.integers(min_value=1, max_value=8))
def test_mean_of_identical_scores_is_the_score(value: float, n: int) -> None:
    assert aggregate([value] * n, "mean") == pytest.approx(value, abs=1e-9)
    assert decide([value] * n, floor=min(0.3, value), generate_threshold=value).action == "GENERATE"


def test_aggregators_differ_as_documented() -> None:
    values = [0.9, 0.4, 0.35]
    assert decide(values, floor=0.3, generate_threshold=0.7, aggregator="mean").action == "REFINE"
    assert decide(values, floor=0.3, generate_threshold=0.7, aggregator="max").action == "GENERATE"
    any_above = decide(values, floor=0.3, generate_threshold=0.7, aggregator="any_above")
    assert any_above.action == "GENERATE"
    assert any_above.kept == (0,)  # CRAG's "Correct": only the confident item is kept
    with pytest.raises(ValueError, match="choose one of"):
        aggregate([0.5], "median")


@given(
    st.lists(st.sampled_from(["vector_search", "keyword_search", "grep", "read_file"]), min_size=0, max_size=8),
    st.integers(min_value=0, max_value=6),
    threshold,
    st.data(),
)
def test_prefilter_rules_in_spec_order(item_tools: list[str], max_items: int, vthreshold: float, data: st.DataObject) -> None:
    vscores = data.draw(st.lists(st.one_of(st.none(), score), min_size=len(item_tools), max_size=len(item_tools)))
    round_tools = data.draw(st.lists(st.sampled_from(["vector_search", "read_file", "grep"]), max_size=4))
    rule = prefilter_rule(round_tools=round_tools, item_tools=item_tools, item_vector_scores=vscores,
                          auto_approve_max_items=max_items, vector_score_threshold=vthreshold)
    if round_tools and set(round_tools) == {"read_file"}:
        assert rule == "read_file"
    elif len(item_tools) <= max_items:
        assert rule == "few_context"
    elif all(t == "vector_search" for t in item_tools) and all(s is not None and s >= vthreshold for s in vscores):
        assert rule == "high_vector_score"
    else:
        assert rule is None


@pytest.mark.parametrize(("vscore", "expected"), [(0.8, "high_vector_score"), (0.79999, None), (0.95, "high_vector_score")])
def test_high_vector_score_at_the_threshold(vscore: float, expected: str | None) -> None:
    rule = prefilter_rule(round_tools=["vector_search"], item_tools=["vector_search"] * 3,
                          item_vector_scores=[0.9, 0.85, vscore], auto_approve_max_items=2, vector_score_threshold=0.8)
    assert rule == expected


@pytest.mark.parametrize(("n", "expected"), [(2, "few_context"), (3, None), (0, "few_context")])
def test_few_context_at_the_threshold(n: int, expected: str | None) -> None:
    rule = prefilter_rule(round_tools=["keyword_search"], item_tools=["keyword_search"] * n,
                          item_vector_scores=[None] * n, auto_approve_max_items=2, vector_score_threshold=0.8)
    assert rule == expected


def test_auto_approve_scores_everything_one() -> None:
    d = auto_approve(3, "few_context")
    assert d.scores == (1.0, 1.0, 1.0) and d.action == "GENERATE" and d.dropped == ()


@given(st.sampled_from(["GENERATE", "REFINE", "RE_RETRIEVE"]), st.integers(0, 10), st.integers(1, 10))
def test_route_after_grade(action: str, iteration: int, max_iterations: int) -> None:
    route = route_after_grade(action, iteration, max_iterations)  # type: ignore[arg-type]
    if iteration >= max_iterations or action == "GENERATE":
        assert route == "synthesize"
    else:
        assert route == {"REFINE": "plan", "RE_RETRIEVE": "analyze_and_route"}[action]


def test_complexity_routes() -> None:
    assert route_after_analyze("chitchat") == "synthesize"
    assert [route_after_analyze(c) for c in ("simple", "complex", None)] == ["plan"] * 3
    assert route_after_tools("simple") == "synthesize"
    assert [route_after_tools(c) for c in ("complex", None)] == ["grade_evidence"] * 2
