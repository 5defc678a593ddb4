"""Every decision of the corrective loop, as pure functions of scores, provenance and thresholds.

No graph, model or I/O in here: the graph's routers are thin adapters over these functions, and the
threshold explorer replays recorded runs through exactly the same code.

>>> decide(scores=[0.9, 0.8, 0.1], floor=0.3, generate_threshold=0.7).action
'GENERATE'
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from crag_lab.records import Action, Rule

PREFILTER_RULES: tuple[Rule, ...] = ("read_file", "few_context", "high_vector_score")
PARSE_FAILURE_SCORE = 0.5
# Aggregates are compared with this tolerance, so that the mean of [0.7, 0.7, 0.7]
# (0.6999999999999998 in floating point) counts as reaching 0.7.
TOLERANCE = 1e-9
AUTO_APPROVE_SCORE = 1.0


def prefilter_rule(
    *,
    round_tools: Sequence[str],
    item_tools: Sequence[str],
    item_vector_scores: Sequence[float | None],
    auto_approve_max_items: int,
    vector_score_threshold: float,
) -> Rule | None:
    """The first pre-filter rule that lets this round skip the grader, or None.

    Rules are checked in the spec's order: every tool call of the round was ``read_file``; the
    context holds at most ``auto_approve_max_items`` items; every item came from ``vector_search``
    with a cosine at or above ``vector_score_threshold``.

    >>> prefilter_rule(round_tools=["vector_search"], item_tools=["vector_search"] * 3,
    ...                item_vector_scores=[0.91, 0.85, 0.8], auto_approve_max_items=2,
    ...                vector_score_threshold=0.8)
    'high_vector_score'
    """
    if round_tools and all(tool == "read_file" for tool in round_tools):
        return "read_file"
    if len(item_tools) <= auto_approve_max_items:
        return "few_context"
    if (
        item_tools
        and all(tool == "vector_search" for tool in item_tools)
        and len(item_vector_scores) == len(item_tools)
        and all(s is not None and s >= vector_score_threshold for s in item_vector_scores)
    ):
        return "high_vector_score"
    return None


def split_by_floor(scores: Sequence[float], floor: float) -> tuple[list[int], list[int]]:
    """Indices kept (score >= floor) and dropped (score < floor), in input order."""
    kept = [i for i, s in enumerate(scores) if s >= floor]
    dropped = [i for i, s in enumerate(scores) if s < floor]
    return kept, dropped


def _mean(scores: Sequence[float]) -> float:
    return math.fsum(scores) / len(scores)


def _max(scores: Sequence[float]) -> float:
    return max(scores)


AGGREGATORS: dict[str, Callable[[Sequence[float]], float]] = {
    "mean": _mean,
    "max": _max,
    "any_above": _max,
}


def aggregate(scores: Sequence[float], aggregator: str = "mean") -> float | None:
    """One number for the surviving evidence, or None when nothing survived.

    ``mean`` is the spec's rule; ``max`` trusts the best item; ``any_above`` is the CRAG paper's
    "Correct if any document is confidently relevant" (it also narrows the context, see `decide`).
    An unknown name raises ``ValueError`` listing the valid ones.
    """
    try:
        fn = AGGREGATORS[aggregator]
    except KeyError:
        raise ValueError(f"unknown aggregator {aggregator!r}; choose one of {sorted(AGGREGATORS)}") from None
    return fn(scores) if scores else None


def action_for(aggregate_score: float | None, *, floor: float, generate_threshold: float) -> Action:
    """GENERATE at or above the generate threshold, REFINE at or above the floor, else RE_RETRIEVE.

    >>> action_for(0.7, floor=0.3, generate_threshold=0.7), action_for(0.3, floor=0.3, generate_threshold=0.7)
    ('GENERATE', 'REFINE')
    >>> action_for(None, floor=0.3, generate_threshold=0.7)
    'RE_RETRIEVE'
    """
    if aggregate_score is None:
        return "RE_RETRIEVE"
    if aggregate_score >= generate_threshold - TOLERANCE:
        return "GENERATE"
    if aggregate_score >= floor - TOLERANCE:
        return "REFINE"
    return "RE_RETRIEVE"


@dataclass(frozen=True)
class Decision:
    """What one grading round decided: kept and dropped item indices, the aggregate and the action."""

    scores: tuple[float, ...]
    kept: tuple[int, ...]
    dropped: tuple[int, ...]
    aggregate: float | None
    action: Action
    rule: Rule | None = None


def decide(
    scores: Sequence[float],
    *,
    floor: float,
    generate_threshold: float,
    aggregator: str = "mean",
) -> Decision:
    """Filter by the floor, aggregate the survivors, pick the action.

    Under ``any_above`` a GENERATE keeps only the items at or above the generate threshold (the
    CRAG paper's knowledge refinement of a "Correct" retrieval); the other aggregators keep every
    item at or above the floor.

    >>> d = decide([0.9, 0.5, 0.1], floor=0.3, generate_threshold=0.7)
    >>> d.kept, d.dropped, round(d.aggregate, 2), d.action
    ((0, 1), (2,), 0.7, 'GENERATE')
    """
    kept, dropped = split_by_floor(scores, floor)
    agg = aggregate([scores[i] for i in kept], aggregator)
    action = action_for(agg, floor=floor, generate_threshold=generate_threshold)
    if aggregator == "any_above" and action == "GENERATE":
        confident = [i for i in kept if scores[i] >= generate_threshold]
        dropped = sorted(set(dropped) | (set(kept) - set(confident)))
        kept = confident
    return Decision(tuple(scores), tuple(kept), tuple(dropped), agg, action)


def auto_approve(n_items: int, rule: Rule) -> Decision:
    """The decision of a pre-filter hit: every item scores 1.0 and the action is GENERATE."""
    scores = (AUTO_APPROVE_SCORE,) * n_items
    return Decision(scores, tuple(range(n_items)), (), AUTO_APPROVE_SCORE if n_items else None, "GENERATE", rule)


def capped(iteration: int, max_iterations: int) -> bool:
    """True once the loop has used its rounds: synthesize with whatever evidence there is."""
    return iteration >= max_iterations


# Routers: which node follows. Each is a pure function of plain values; graph.py adapts them.
# Their return types name nodes (`crag_lab.records.NodeName`), written out so LangGraph can read them.

AfterAnalyze = Literal["plan", "synthesize"]
AfterTools = Literal["grade_evidence", "synthesize"]
AfterGrade = Literal["synthesize", "plan", "analyze_and_route"]


def route_after_analyze(complexity: str | None) -> AfterAnalyze:
    """Chitchat goes straight to synthesize; everything else (unknown included) plans retrieval."""
    return "synthesize" if complexity == "chitchat" else "plan"


def route_after_tools(complexity: str | None) -> AfterTools:
    """Simple queries skip grading; complex or unclassified ones are graded."""
    return "synthesize" if complexity == "simple" else "grade_evidence"


def route_after_grade(action: Action | None, iteration: int, max_iterations: int) -> AfterGrade:
    """GENERATE or the iteration cap ⇒ synthesize; REFINE ⇒ plan; RE_RETRIEVE ⇒ analyze_and_route.

    >>> route_after_grade("REFINE", 3, 3)
    'synthesize'
    """
    if action == "GENERATE" or capped(iteration, max_iterations):
        return "synthesize"
    if action == "REFINE":
        return "plan"
    return "analyze_and_route"
