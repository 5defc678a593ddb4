"""The frontier's engine: every recorded round re-decided at thousands of settings at once.

`CompiledRounds` (`crag_lab.replay._vectorised`) holds the rounds of an experiment as flat arrays,
one setting at a time. Here its arrays are laid out as a dense (round, item) matrix and compared
with a whole block of settings at once, (setting, round, item), following the same rules in the
same order: `decisions.prefilter_rule`, `decisions.decide` (a mean within rounding error of a
threshold is re-decided by `decisions.decide` itself), `route_after_grade`, and the stops of
`crag_lab.replay.scalar.replay_record`. The result is per (setting, query): what
`QueryReplay` reports (calls and tokens delta, items kept and dropped, outcome, first action), the
gold items kept and dropped, and whether the recorded answer still holds (every replayed decision
equals the recorded one). Records the compiler leaves to the scalar code are replayed by
`scalar_query` (the reference, also used by the tests and the benchmark).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from crag_lab import decisions
from crag_lab.config import CragConfig
from crag_lab.records import QueryRecord
from crag_lab.replay._vectorised import (
    ANALYZE,
    GENERATE,
    GOES_ON,
    LEAVES_RECORDING,
    NO_SCORES,
    OTHER_EVIDENCE,
    PLAN,
    RE_RETRIEVE,
    REFINE,
    SYNTHESIZE,
    SYNTHESIZES,
    CompiledRounds,
)
from crag_lab.replay.scalar import LEAVING_CALLS, replay_record, round_decision

FIELDS = ("calls", "tokens", "kept", "dropped", "gold_kept", "gold_dropped", "labelled_kept", "labelled_dropped",
          "needs_rerun", "generate", "capped", "first_action", "known")
"""What `replay_settings` gives per (setting, query); ``first_action`` is an index of `ACTIONS` or -1."""
ItemFlags = list[list[tuple[bool, bool]]]
"""Per round, per item: (gold, labelled)."""


@dataclass(frozen=True)
class Settings:
    """A list of settings as columns: one entry per setting."""

    relevance_floor: np.ndarray
    generate_threshold: np.ndarray
    vector_score_threshold: np.ndarray
    auto_approve_max_items: np.ndarray
    max_iterations: np.ndarray
    aggregator: np.ndarray  # of str

    def __len__(self) -> int:
        return len(self.relevance_floor)

    def take(self, rows: Sequence[int] | np.ndarray) -> Settings:
        """The settings at ``rows``, in that order (a shard of a sweep)."""
        at = np.asarray(rows, dtype=np.int64)
        return Settings(self.relevance_floor[at], self.generate_threshold[at], self.vector_score_threshold[at],
                        self.auto_approve_max_items[at], self.max_iterations[at], self.aggregator[at])

    def config(self, base: CragConfig, s: int) -> CragConfig:
        """Setting ``s`` as a config (``model_copy``: the grid was checked when it was built)."""
        return base.model_copy(update={
            "relevance_floor": float(self.relevance_floor[s]), "generate_threshold": float(self.generate_threshold[s]),
            "vector_score_threshold": float(self.vector_score_threshold[s]),
            "auto_approve_max_items": int(self.auto_approve_max_items[s]),
            "max_iterations": int(self.max_iterations[s]), "aggregator": str(self.aggregator[s])})


def scalar_query(record: QueryRecord, config: CragConfig, flags: ItemFlags) -> dict[str, int]:
    """One query at one setting, through `replay_record` and `round_decision`: the reference."""
    q = replay_record(record, config)
    rounds = list(record.get("rounds", []))
    out = dict.fromkeys(FIELDS, 0)
    out.update(calls=q.calls_delta, tokens=q.tokens_delta, kept=q.items_kept, dropped=q.items_dropped,
               needs_rerun=int(q.outcome == "needs_rerun"), generate=int(q.outcome == "GENERATE"),
               capped=int(q.outcome == "capped"),
               first_action=-1 if q.first_action is None else ("GENERATE", "REFINE", "RE_RETRIEVE").index(q.first_action))
    same = len(q.actions) == len(rounds) and q.outcome != "needs_rerun"
    for k, action in enumerate(q.actions):
        rnd = rounds[k]
        decision, _ = round_decision(rnd, config)
        assert decision is not None  # replay_record appends an action only for a decided round
        kept = set(decision.kept)
        for i, (gold, labelled) in enumerate(flags[k]):
            out["gold_kept" if i in kept else "gold_dropped"] += gold
            out["labelled_kept" if i in kept else "labelled_dropped"] += labelled
        recorded_kept = {i for i, item in enumerate(rnd["items"]) if item["id"] in rnd["kept"]}
        same = same and action == rnd["action"] and decision.rule == rnd.get("rule") and kept == recorded_kept
    out["known"] = int(same or not rounds)
    return out


class FrontierRounds:
    """The rounds of `CompiledRounds` as a dense (round, item) matrix, with each item's gold label."""

    def __init__(self, config: CragConfig, records: Sequence[QueryRecord], flags: Sequence[ItemFlags]) -> None:
        self.base = config
        self.c = c = CompiledRounds(records)
        self.records, self.flags = list(records), list(flags)
        self.n_queries = c.n_queries
        self.scalar_queries = [q for q, f in enumerate(c.fields) if f is None]
        gold = [g for q, f in enumerate(c.fields) if f is not None for rnd in flags[q] for g, _ in rnd]
        labelled = [lab for q, f in enumerate(c.fields) if f is not None for rnd in flags[q] for _, lab in rnd]
        width = max(int(c.r_n.max()) if c.n_rounds else 0, 1)
        col = np.arange(width)
        self.mask = col[None, :] < c.r_n[:, None]  # (round, item): a real item
        pos = np.where(self.mask, c.r_start[:, None] + col[None, :], 0)
        take = (lambda a, fill: np.where(self.mask, a[pos], fill)) if len(c.i_score) else (
            lambda a, fill: np.full(self.mask.shape, fill))
        self.score = take(c.i_score, np.nan)
        self.recorded_kept = take(c.i_recorded_kept, False)
        self.gold = take(np.asarray(gold, dtype=np.bool_), False)
        self.labelled = take(np.asarray(labelled, dtype=np.bool_), False)
        self.gold_n, self.labelled_n = self.gold.sum(1), self.labelled.sum(1)
        # Each query's rounds are contiguous: the first round of each query that has rounds.
        self.q_with_rounds = np.unique(c.r_query)
        self.q_first = np.searchsorted(c.r_query, self.q_with_rounds)
        self.first_of_round = self.q_first[np.searchsorted(self.q_with_rounds, c.r_query)]
        self.q_last = np.append(self.q_first[1:], c.n_rounds) - 1

    def replay(self, settings: Settings, block: int = 256) -> dict[str, np.ndarray]:
        """`FIELDS` per (setting, query) at every setting."""
        out = {name: np.zeros((len(settings), self.n_queries), dtype=np.int64) for name in FIELDS}
        out["first_action"][:] = -1
        out["known"][:] = 1
        for agg in np.unique(settings.aggregator) if self.c.n_rounds else ():  # no rounds: nothing to re-decide
            where = np.flatnonzero(settings.aggregator == agg)
            for lo in range(0, len(where), block):
                rows = where[lo:lo + block]
                part = self._block(settings, rows, str(agg))
                for name in FIELDS:
                    out[name][np.ix_(rows, self.q_with_rounds)] = part[name]
        for q in self.scalar_queries:  # records the arrays do not read: the reference, setting by setting
            for s in range(len(settings)):
                row = scalar_query(self.records[q], settings.config(self.base, s), self.flags[q])
                for name in FIELDS:
                    out[name][s, q] = row[name]
        return out

    def _block(self, st: Settings, rows: np.ndarray, aggregator: str) -> dict[str, np.ndarray]:
        c = self.c
        floor = st.relevance_floor[rows][:, None]
        gen = st.generate_threshold[rows][:, None]
        tol = decisions.TOLERANCE
        # The pre-filter, in the spec's order (read_file, few_context, high_vector_score).
        with np.errstate(invalid="ignore"):
            high = c.r_all_vector[None, :] & (c.r_min_vector[None, :] >= st.vector_score_threshold[rows][:, None])
        if self.base.prefilter:
            rule = np.where(c.r_read_file[None, :], 1, np.where(
                c.r_n[None, :] <= st.auto_approve_max_items[rows][:, None], 2, np.where(high, 3, 0)))
        else:
            rule = np.zeros((len(rows), c.n_rounds), dtype=np.int64)
        auto = rule != 0
        valid = auto | c.r_has_scores[None, :]
        with np.errstate(invalid="ignore"):
            kept = self.score[None] >= floor[:, :, None]  # NaN (no scores) is never kept
        n_kept = kept.sum(2)
        has_kept = n_kept > 0
        if aggregator == "mean":
            agg = np.where(kept, self.score[None], 0.0).sum(2) / np.maximum(n_kept, 1)
        else:
            agg = np.where(kept, self.score[None], -np.inf).max(2)
        action = np.where(~has_kept, RE_RETRIEVE, np.where(
            agg >= gen - tol, GENERATE, np.where(agg >= floor - tol, REFINE, RE_RETRIEVE)))
        if aggregator == "any_above":
            with np.errstate(invalid="ignore"):
                kept &= (action != GENERATE)[:, :, None] | (self.score[None] >= gen[:, :, None])
        if aggregator == "mean":
            slack = c.r_mean_slack[None, :]
            near = (np.abs(agg - (gen - tol)) <= slack) | (np.abs(agg - (floor - tol)) <= slack)
            for s, r in zip(*np.nonzero(near & has_kept & ~auto & valid), strict=True):
                d = decisions.decide(self.score[r, :c.r_n[r]].tolist(), floor=float(floor[s, 0]),
                                     generate_threshold=float(gen[s, 0]), aggregator="mean")
                action[s, r] = ("GENERATE", "REFINE", "RE_RETRIEVE").index(d.action)
        action = np.where(auto, GENERATE, action)
        kept |= auto[:, :, None] & self.mask[None]
        n_kept = kept.sum(2)
        same = ((kept != self.recorded_kept[None]) & self.mask[None]).sum(2) == 0
        gold_kept = (kept & self.gold[None]).sum(2)
        labelled_kept = (kept & self.labelled[None]).sum(2)
        at_cap = c.r_iteration[None, :] >= st.max_iterations[rows][:, None]
        route = np.where((action == GENERATE) | at_cap, SYNTHESIZE, np.where(action == REFINE, PLAN, ANALYZE))
        stop = np.where(~valid, NO_SCORES, np.where(route == SYNTHESIZE, SYNTHESIZES, np.where(
            route != c.r_route[None, :], LEAVES_RECORDING, np.where(~same, OTHER_EVIDENCE, GOES_ON))))
        # A query's replay visits its rounds up to the first that stops it, that one included.
        blocked = (stop != GOES_ON).astype(np.int64)
        before = np.cumsum(blocked, axis=1) - blocked
        visited = (before - before[:, self.first_of_round]) == 0
        counted = visited & valid
        gains = (rule == 0) & (c.r_rule[None, :] != 0)
        skips = (rule != 0) & (c.r_rule[None, :] == 0)
        synth = visited & (stop == SYNTHESIZES)
        rerun = visited & ((stop == NO_SCORES) | (stop == LEAVES_RECORDING) | (stop == OTHER_EVIDENCE))
        # Leaving the recording: later recorded calls are unknown now; the fewest the run still makes.
        leave = np.where(stop == NO_SCORES, LEAVING_CALLS["grade"], np.where(
            route == PLAN, LEAVING_CALLS["plan"], LEAVING_CALLS["analyze_and_route"])) - c.r_later_calls[None, :]
        calls = (np.where(counted, np.where(gains, c.r_grader_calls, np.where(skips, -c.r_grader_calls, 0))
                          - np.where(synth, c.r_later_calls, 0), 0)
                 + np.where(rerun, leave, 0))
        tokens = (np.where(counted, np.where(gains, c.r_grader_tokens, np.where(skips, -c.r_grader_tokens, 0))
                           - np.where(synth, c.r_later_tokens, 0), 0)
                  - np.where(rerun, c.r_later_tokens[None, :], 0))
        changed = ~counted | (action != c.r_action[None, :]) | ~same | (rule != c.r_rule[None, :])

        def per_query(values: np.ndarray) -> np.ndarray:
            return np.add.reduceat(values.astype(np.int64), self.q_first, axis=1)

        def counted_sum(values: np.ndarray) -> np.ndarray:
            return per_query(np.where(counted, values, 0))

        first = self.q_first
        return {
            "calls": per_query(calls), "tokens": per_query(tokens),
            "kept": counted_sum(n_kept), "dropped": counted_sum(c.r_n[None, :] - n_kept),
            "gold_kept": counted_sum(gold_kept), "gold_dropped": counted_sum(self.gold_n[None, :] - gold_kept),
            "labelled_kept": counted_sum(labelled_kept),
            "labelled_dropped": counted_sum(self.labelled_n[None, :] - labelled_kept),
            "needs_rerun": per_query(rerun), "generate": per_query(synth & (action == GENERATE)),
            "capped": per_query(synth & (action != GENERATE)),
            "first_action": np.where(valid[:, first], action[:, first], -1),
            "known": ((per_query(changed) == 0) & synth[:, self.q_last]).astype(np.int64),
        }


def item_flags(record: QueryRecord, labels: Mapping[str, Any] | None) -> ItemFlags:
    """(gold, labelled) of every item of every round, as `crag_lab.eval.runner.item_rows` labels items.

    An item is labelled when its question lists gold locations (gold: it matches one), or is
    unanswerable or chitchat (never gold); an answerable question without gold labels nothing.
    """
    from crag_lab.eval import metrics as m

    labels = labels or {}
    gold = [m.GoldRef.parse(str(g)) for g in labels.get("gold") or []]
    never = labels.get("answerable") is False or labels.get("complexity") == "chitchat"
    out: ItemFlags = []
    for rnd in record.get("rounds", []):
        flags = []
        for item in rnd["items"]:
            path, line = item.get("path"), item.get("line")
            loc = m.location_of(str(item["id"]))
            line_end = loc[2] if loc[0] == path else None
            if gold:
                flags.append((m.is_gold(path, line, line_end, gold), True))
            else:
                flags.append((False, never))
        out.append(flags)
    return out
