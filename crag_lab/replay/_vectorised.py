"""Vectorised replay: every recorded grading round re-decided at once, with numpy.

`Experiment.replay` runs this by default; `crag_lab.replay.scalar.replay_record` is the scalar
reference it equals, field for field. `CompiledRounds` reads an experiment's records once (what does
not depend on thresholds: item tools, vector and grader scores, the items kept when recorded, grader
costs, the usage after each round); `CompiledRounds.replay` then applies the rules of
`crag_lab.decisions` element-wise: `prefilter_rule` (in the spec's order) and `auto_approve`;
`decide` (the floor without tolerance, mean / max / any_above's narrowing, `action_for` with its
``TOLERANCE``); `route_after_grade` and the iteration cap.

Two places are left to the scalar code so that results stay exact. A mean summed by numpy can differ
from ``math.fsum``'s in the last bits, so a round whose mean lies within that rounding error of a
threshold is re-decided by `decisions.decide`. A record the compiler cannot read exactly as the
scalar code does (a missing key, a non-finite score, shadow grades that do not match the items, an
iteration that is not an int) is replayed by `replay_record` itself, errors included.
"""

from __future__ import annotations

import gc
import math
import operator
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from crag_lab import decisions
from crag_lab.config import CragConfig
from crag_lab.records import Action, QueryRecord, Rule, round_grades, usage_tokens
from crag_lab.replay.scalar import LEAVING_CALLS, NOTE_NO_SHADOW, grader_cost, recorded_fields

ACTIONS: tuple[Action, ...] = ("GENERATE", "REFINE", "RE_RETRIEVE")
GENERATE, REFINE, RE_RETRIEVE = 0, 1, 2
RULES: tuple[Rule | None, ...] = (None, *decisions.PREFILTER_RULES)  # code 0: no rule
ROUTES: tuple[decisions.AfterGrade, ...] = ("synthesize", "plan", "analyze_and_route")
SYNTHESIZE, PLAN, ANALYZE = 0, 1, 2
# Why a round ends its query's replay (the order of the checks in `replay_record`).
GOES_ON, NO_SCORES, SYNTHESIZES, LEAVES_RECORDING, OTHER_EVIDENCE = 0, 1, 2, 3, 4
# A sum of n values in float64, in any order, is within n * eps * sum(|x|) of the exact one; four
# times that (and four more terms, for the rounding of the division) bounds where a mean could land.
_MEAN_SLACK = 4 * float(np.finfo(np.float64).eps)


def supports(config: CragConfig) -> bool:
    """True when ``config`` holds the plain values the arrays compare (an unvalidated copy may not)."""
    numbers = (config.relevance_floor, config.generate_threshold, config.vector_score_threshold,
               config.auto_approve_max_items, config.max_iterations)
    return config.aggregator in decisions.AGGREGATORS and all(isinstance(v, (int, float)) for v in numbers)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a replay builds its report.

    A replay allocates tens of thousands of short-lived objects (lists, `QueryReplay`s). With the
    collector on they are promoted and trigger full collections, each a walk over every object of
    the recording (about 150 ms for 10,000 rounds), every few replays; paused, the previous report is
    freed by reference counting before it is ever promoted.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class _Unreadable(ValueError):
    """A record the arrays would not read as `replay_record` does; it is replayed by the scalar code."""


def _finite(scores: list[float]) -> list[float]:
    if not math.isfinite(sum(scores)):  # NaN and infinities propagate (a huge sum only costs speed)
        raise _Unreadable("a score is not finite")
    return scores


def _read_rounds(record: QueryRecord) -> tuple[list[tuple[Any, ...]], list[float], list[bool]]:
    """One row per round (see `CompiledRounds.__init__`), and each item's score and recorded kept flag."""
    rounds = list(record.get("rounds", []))
    usage = record.get("usage", [])
    later_usage = [(u["node"] != "synthesize", u.get("iteration", 0), usage_tokens([u])) for u in usage]
    rows: list[tuple[Any, ...]] = []
    scores: list[float] = []
    kept_flags: list[bool] = []
    for k, rnd in enumerate(rounds):
        items = rnd["items"]
        iteration = rnd["iteration"]
        if type(iteration) is not int:  # the scalar code prints it as recorded in notes
            raise _Unreadable(f"iteration {iteration!r} is not an int")
        tools = rnd["round_tools"]
        item_tools = [i["tool"] for i in items]
        vector_scores = [i.get("vector_score") for i in items]
        if any(v is not None and not isinstance(v, (int, float)) for v in vector_scores):
            raise _Unreadable("a vector score is not a number")
        # NaN: the high_vector_score rule cannot fire (a score is missing or NaN, or there is none).
        present = [v for v in vector_scores if v is not None and not math.isnan(v)]
        min_vector = float(min(present)) if vector_scores and len(present) == len(vector_scores) else math.nan
        rule = rnd.get("rule")
        grades = round_grades(rnd)
        round_scores = None if grades is None else _finite([float(s) for s in grades[0]])
        if round_scores is not None and len(round_scores) != len(items):
            raise _Unreadable("shadow scores do not match the items")
        if not isinstance(rnd["kept"], (list, tuple)):
            raise _Unreadable("kept is not a list of ids")
        recorded_kept = set(rnd["kept"])
        scores += round_scores if round_scores is not None else [math.nan] * len(items)
        kept_flags += [i["id"] in recorded_kept for i in items]
        last = k == len(rounds) - 1
        recorded_route = SYNTHESIZE if last else ROUTES.index(decisions.route_after_grade(
            rnd["action"], iteration, int(rnd["thresholds"]["max_iterations"])))
        calls, tokens = grader_cost(rnd)
        later = [t for counted, it, t in later_usage if counted and it >= iteration]
        if not all(type(t) is int for t in (tokens, *later)):  # the arrays would round other numbers
            raise _Unreadable("token counts are not ints")
        rows.append((
            k, len(items), last, bool(tools) and all(t == "read_file" for t in tools),
            bool(items) and all(t == "vector_search" for t in item_tools), min_vector,
            RULES.index(rule), round_scores is not None, ACTIONS.index(rnd["action"]), iteration, recorded_route,
            calls, tokens, len(later), sum(later),
            (len(items) + 4) * _MEAN_SLACK * max(map(abs, round_scores or ()), default=0.0),
        ))
    return rows, scores, kept_flags


class CompiledRounds:
    """The grading rounds of a list of records as flat arrays, ready to be re-decided at any thresholds.

    Keeps the records it read (``records``), so `matches` can tell when an experiment's list changed.
    A record that is added, removed or swapped is noticed; one edited in place is not.
    """

    def __init__(self, records: Sequence[QueryRecord]) -> None:
        self.records = tuple(records)
        self.fields: list[dict[str, Any] | None] = []  # None: replayed by the scalar reference
        rows: list[tuple[Any, ...]] = []
        queries: list[int] = []
        scores: list[float] = []
        kept_flags: list[bool] = []
        for q, record in enumerate(self.records):
            try:
                fields = recorded_fields(record)
                q_rows, q_scores, q_kept = _read_rounds(record)
            except (KeyError, IndexError, TypeError, ValueError, AttributeError):
                self.fields.append(None)
                continue
            self.fields.append(fields)
            rows += q_rows
            queries += [q] * len(q_rows)
            scores += q_scores
            kept_flags += q_kept
        self.n_queries = len(self.records)
        self.n_rounds = len(rows)
        cols = list(zip(*rows, strict=True)) if rows else [()] * 16
        (k, n, last, read_file, all_vector, min_vector, rule, has_scores, action, iteration, route,
         calls, tokens, later_calls, later_tokens, mean_slack) = cols
        self.r_query = np.asarray(queries, dtype=np.int64)
        self.r_k = np.asarray(k, dtype=np.int64)
        self.r_n = np.asarray(n, dtype=np.int64)
        self.r_last = np.asarray(last, dtype=np.bool_)
        self.r_read_file = np.asarray(read_file, dtype=np.bool_)
        self.r_all_vector = np.asarray(all_vector, dtype=np.bool_)
        self.r_min_vector = np.asarray(min_vector, dtype=np.float64)
        self.r_rule = np.asarray(rule, dtype=np.int64)
        self.r_has_scores = np.asarray(has_scores, dtype=np.bool_)
        self.r_action = np.asarray(action, dtype=np.int64)
        self.r_iteration = np.asarray(iteration, dtype=np.int64)
        self.r_route = np.asarray(route, dtype=np.int64)
        self.r_grader_calls = np.asarray(calls, dtype=np.int64)
        self.r_grader_tokens = np.asarray(tokens, dtype=np.int64)
        self.r_later_calls = np.asarray(later_calls, dtype=np.int64)
        self.r_later_tokens = np.asarray(later_tokens, dtype=np.int64)
        self.r_mean_slack = np.asarray(mean_slack, dtype=np.float64)
        self.i_score = np.asarray(scores, dtype=np.float64)
        self.i_recorded_kept = np.asarray(kept_flags, dtype=np.bool_)
        self.r_start = np.zeros(self.n_rounds, dtype=np.int64)
        if self.n_rounds:
            self.r_start[1:] = np.cumsum(self.r_n)[:-1]
        self.i_round = np.repeat(np.arange(self.n_rounds, dtype=np.int64), self.r_n)
        # Python lists of what the per-query loops read element by element.
        self.query_of = self.r_query.tolist()
        self.iteration_of = self.r_iteration.tolist()
        self.last_of = self.r_last.tolist()
        self.last_iteration = {int(q): int(it) for q, it in zip(self.r_query[self.r_last], self.r_iteration[self.r_last],
                                                                 strict=True)}

    def matches(self, records: Sequence[QueryRecord]) -> bool:
        """True when ``records`` holds exactly the record objects this was compiled from."""
        return len(records) == len(self.records) and all(map(operator.is_, records, self.records))

    def _per_round(self, values: np.ndarray) -> np.ndarray:
        return np.bincount(self.i_round, weights=values, minlength=self.n_rounds)

    def decide(self, config: CragConfig) -> dict[str, np.ndarray]:
        """Rule, validity, action, kept count, same-context flag and route of every round at ``config``."""
        n_rounds = self.n_rounds
        if config.prefilter:
            with np.errstate(invalid="ignore"):
                high_vector = self.r_all_vector & (self.r_min_vector >= config.vector_score_threshold)
            rule = np.where(self.r_read_file, 1, np.where(self.r_n <= config.auto_approve_max_items, 2,
                                                          np.where(high_vector, 3, 0)))
        else:
            rule = np.zeros(n_rounds, dtype=np.int64)
        auto = rule != 0
        valid = auto | self.r_has_scores
        floor, gen, tol = config.relevance_floor, config.generate_threshold, decisions.TOLERANCE
        scores = self.i_score
        with np.errstate(invalid="ignore"):
            i_kept = scores >= floor  # the floor has no tolerance; NaN (no scores) is never kept
        n_kept = self._per_round(i_kept).astype(np.int64)
        has_kept = n_kept > 0
        if config.aggregator == "mean":
            agg = np.divide(self._per_round(np.where(i_kept, scores, 0.0)), n_kept, out=np.zeros(n_rounds),
                            where=has_kept)
        else:
            agg = np.full(n_rounds, -np.inf)
            nonempty = self.r_n > 0
            if nonempty.any():
                agg[nonempty] = np.maximum.reduceat(np.where(i_kept, scores, -np.inf), self.r_start[nonempty])
        action = np.where(~has_kept, RE_RETRIEVE,
                          np.where(agg >= gen - tol, GENERATE, np.where(agg >= floor - tol, REFINE, RE_RETRIEVE)))
        if config.aggregator == "any_above":
            with np.errstate(invalid="ignore"):
                i_kept = i_kept & ((action[self.i_round] != GENERATE) | (scores >= gen))
        if config.aggregator == "mean":
            slack = self.r_mean_slack
            near = (np.abs(agg - (gen - tol)) <= slack) | (np.abs(agg - (floor - tol)) <= slack)
            for r in np.flatnonzero(near & has_kept & ~auto & valid).tolist():
                lo, hi = int(self.r_start[r]), int(self.r_start[r] + self.r_n[r])
                d = decisions.decide(scores[lo:hi].tolist(), floor=floor, generate_threshold=gen, aggregator="mean")
                action[r] = ACTIONS.index(d.action)
        action = np.where(auto, GENERATE, action)
        i_kept = i_kept | auto[self.i_round]
        n_kept = self._per_round(i_kept).astype(np.int64)
        same = self._per_round(i_kept != self.i_recorded_kept) == 0
        at_cap = self.r_iteration >= config.max_iterations
        route = np.where((action == GENERATE) | at_cap, SYNTHESIZE, np.where(action == REFINE, PLAN, ANALYZE))
        return {"rule": rule, "valid": valid, "action": action, "n_kept": n_kept, "same": same, "route": route}

    def replay(self, config: CragConfig) -> list[dict[str, Any] | None]:
        """The `QueryReplay` fields of every query at ``config``; None for a record left to `replay_record`."""
        d = self.decide(config)
        valid, action, route, same, rule = d["valid"], d["action"], d["route"], d["same"], d["rule"]
        stop = np.where(~valid, NO_SCORES, np.where(route == SYNTHESIZE, SYNTHESIZES, np.where(
            route != self.r_route, LEAVES_RECORDING, np.where(~same, OTHER_EVIDENCE, GOES_ON))))
        # Replay visits each query's rounds up to the first that stops it, that one included.
        never = np.iinfo(np.int64).max
        first_stop = np.full(self.n_queries, never, dtype=np.int64)
        np.minimum.at(first_stop, self.r_query, np.where(stop != GOES_ON, self.r_k, never))
        visited = self.r_k <= first_stop[self.r_query]
        counted = visited & valid
        gains_grader = (rule == 0) & (self.r_rule != 0)
        skips_grader = (rule != 0) & (self.r_rule == 0)
        calls = np.where(gains_grader, self.r_grader_calls, np.where(skips_grader, -self.r_grader_calls, 0))
        tokens = np.where(gains_grader, self.r_grader_tokens, np.where(skips_grader, -self.r_grader_tokens, 0))
        synthesizes = visited & (stop == SYNTHESIZES)
        calls = calls - np.where(synthesizes, self.r_later_calls, 0)
        tokens = tokens - np.where(synthesizes, self.r_later_tokens, 0)
        # Leaving the recording: later recorded calls are unknown now; add the fewest the run still makes.
        leaves = visited & ((stop == NO_SCORES) | (stop == LEAVES_RECORDING) | (stop == OTHER_EVIDENCE))
        leave_calls = np.where(leaves, np.where(stop == NO_SCORES, LEAVING_CALLS["grade"], np.where(
            route == PLAN, LEAVING_CALLS["plan"], LEAVING_CALLS["analyze_and_route"])) - self.r_later_calls, 0)
        leave_tokens = np.where(leaves, -self.r_later_tokens, 0)

        def per_query(values: np.ndarray, mask: np.ndarray = counted) -> list[int]:
            summed = np.bincount(self.r_query, weights=np.where(mask, values, 0), minlength=self.n_queries)
            return [int(v) for v in summed.tolist()]

        kept_q, dropped_q = per_query(d["n_kept"]), per_query(self.r_n - d["n_kept"])
        calls_q = [a + b for a, b in zip(per_query(calls), per_query(leave_calls, leaves), strict=True)]
        tokens_q = [a + b for a, b in zip(per_query(tokens), per_query(leave_tokens, leaves), strict=True)]
        actions: list[list[str]] = [[] for _ in range(self.n_queries)]
        flipped: list[list[int]] = [[] for _ in range(self.n_queries)]
        gained: list[list[str]] = [[] for _ in range(self.n_queries)]
        lost: list[list[str]] = [[] for _ in range(self.n_queries)]
        query_of, iteration_of = self.query_of, self.iteration_of
        idx = np.flatnonzero(counted)
        for r, a in zip(idx.tolist(), action[idx].tolist(), strict=True):
            actions[query_of[r]].append(ACTIONS[a])
        for r in np.flatnonzero(counted & (action != self.r_action)).tolist():
            flipped[query_of[r]].append(iteration_of[r])
        idx = np.flatnonzero(counted & (rule != self.r_rule))
        for r, new, old in zip(idx.tolist(), rule[idx].tolist(), self.r_rule[idx].tolist(), strict=True):
            if new:
                gained[query_of[r]].append(str(RULES[new]))
            if old:
                lost[query_of[r]].append(str(RULES[old]))
        outcome: list[str | None] = [None] * self.n_queries
        note = [""] * self.n_queries
        lower_bound = [False] * self.n_queries
        idx = np.flatnonzero(visited & (stop != GOES_ON))
        for r, why, a, ro in zip(idx.tolist(), stop[idx].tolist(), action[idx].tolist(), route[idx].tolist(),
                                 strict=True):
            q, it = query_of[r], iteration_of[r]
            if why == NO_SCORES:
                outcome[q], note[q], lower_bound[q] = "needs_rerun", NOTE_NO_SHADOW, True
            elif why == SYNTHESIZES:
                outcome[q] = "GENERATE" if a == GENERATE else "capped"
                if not self.last_of[r]:
                    note[q] = f"stops at round {it} instead of {self.last_iteration[q]}"
            elif why == LEAVES_RECORDING:
                outcome[q], lower_bound[q] = "needs_rerun", True
                note[q] = f"round {it} would go to {ROUTES[ro]}; the recording never went there"
            else:
                outcome[q], lower_bound[q] = "needs_rerun", True
                note[q] = f"round {it} keeps different items, so later rounds would see other evidence"
        out: list[dict[str, Any] | None] = []
        for q, fields in enumerate(self.fields):
            if fields is None:
                out.append(None)
                continue
            acts = actions[q]
            out.append({
                **fields, "outcome": outcome[q] or fields["recorded_outcome"], "first_action": acts[0] if acts else None,
                "actions": acts, "flipped_rounds": flipped[q], "fast_path_gained": gained[q], "fast_path_lost": lost[q],
                "items_kept": kept_q[q], "items_dropped": dropped_q[q], "calls_delta": calls_q[q],
                "tokens_delta": tokens_q[q], "calls_delta_is_lower_bound": lower_bound[q], "note": note[q],
            })
        return out
