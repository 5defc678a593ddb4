"""A vectorised replay of an `Experiment`: `crag_lab.experiment.replay_record`'s results, with numpy.

A prototype for the threshold explorer, kept in bench/ until the lead decides. ``compile`` reads
every recorded round once (what does not depend on thresholds: item tools, vector and grader scores,
recorded kept items, grader costs, later usage); ``replay(config)`` then decides every round at
once with array operations and builds the same `QueryReplay` objects as `Experiment.replay`.

The rules are those of `crag_lab.decisions` (prefilter_rule, decide with its tolerance,
auto_approve, route_after_grade), evaluated element-wise. The one place arrays could differ from
the scalar code is a mean summed in another order (``math.fsum`` there): a round whose aggregate
lies within 1e-12 of a threshold is therefore re-decided by `decisions.decide` itself. The
benchmark checks ``fast.replay(c).queries == exp.replay(c).queries`` on many configurations.

>>> fast = CompiledExperiment(exp)  # doctest: +SKIP
>>> fast.replay(exp.config.model_copy(update={"relevance_floor": 0.4})).totals()  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from crag_lab import decisions
from crag_lab.config import CragConfig
from crag_lab.experiment import Experiment, QueryReplay, ReplayReport, _grader_cost, _outcome

ACTIONS = ("GENERATE", "REFINE", "RE_RETRIEVE")
GENERATE, REFINE, RE_RETRIEVE = 0, 1, 2
RULES = (None, *decisions.PREFILTER_RULES)  # code 0: no rule
ROUTES = ("synthesize", "plan", "analyze_and_route")
SYNTHESIZE, PLAN, ANALYZE = 0, 1, 2
NO_SHADOW = "the pre-filter skipped the grader when recorded and no shadow grades were kept"
BORDER = 1e-12


class CompiledExperiment:
    """An experiment's rounds as flat arrays, ready to be re-decided at any thresholds."""

    def __init__(self, exp: Experiment) -> None:
        self.exp = exp
        self.base: list[dict[str, Any]] = []
        r_query: list[int] = []
        r_k: list[int] = []
        r_n: list[int] = []
        r_last: list[bool] = []
        r_readfile: list[bool] = []
        r_allvec: list[bool] = []
        r_hasscores: list[bool] = []
        r_minvs: list[float] = []
        r_recrule: list[int] = []
        r_recaction: list[int] = []
        r_iter: list[int] = []
        r_recroute: list[int] = []
        r_gcalls: list[int] = []
        r_gtokens: list[int] = []
        r_latercalls: list[int] = []
        r_latertokens: list[int] = []
        i_scores: list[float] = []
        i_reckept: list[bool] = []
        i_round: list[int] = []
        self.n_rounds: list[int] = []
        for q, record in enumerate(exp.records):
            rounds = list(record.get("rounds", []))
            recorded_actions = [r["action"] for r in rounds]
            self.base.append({
                "id": str(record.get("id")), "query": record["query"], "complexity": record.get("complexity"),
                "recorded_outcome": _outcome(record), "recorded_actions": recorded_actions,
                "recorded_first_action": recorded_actions[0] if recorded_actions else None,
                "recorded_items_kept": sum(len(r["kept"]) for r in rounds),
                "recorded_items_dropped": sum(len(r["dropped"]) for r in rounds),
            })
            self.n_rounds.append(len(rounds))
            usage = record.get("usage", [])
            for k, rnd in enumerate(rounds):
                items = rnd["items"]
                r_index = len(r_query)
                r_query.append(q)
                r_k.append(k)
                r_last.append(k == len(rounds) - 1)
                r_n.append(len(items))
                tools = rnd["round_tools"]
                r_readfile.append(bool(tools) and all(t == "read_file" for t in tools))
                r_allvec.append(bool(items) and all(i["tool"] == "vector_search" for i in items))
                vs = [i.get("vector_score") for i in items]
                r_minvs.append(-np.inf if not vs or any(v is None for v in vs) else min(vs))
                rule = rnd.get("rule")
                r_recrule.append(RULES.index(rule))
                if rule is None:
                    scores: list[float] | None = [float(i["grader_score"]) for i in items]
                elif rnd.get("shadow"):
                    scores = [float(s) for s in rnd["shadow"]["scores"]]
                else:
                    scores = None
                r_hasscores.append(scores is not None)
                kept_ids = set(rnd["kept"])
                i_scores.extend(scores if scores is not None else [np.nan] * len(items))
                i_reckept.extend(i["id"] in kept_ids for i in items)
                i_round.extend([r_index] * len(items))
                r_recaction.append(ACTIONS.index(rnd["action"]))
                iteration = int(rnd["iteration"])
                r_iter.append(iteration)
                r_recroute.append(SYNTHESIZE if k == len(rounds) - 1 else ROUTES.index(decisions.route_after_grade(
                    rnd["action"], iteration, int(rnd["thresholds"]["max_iterations"]))))
                calls, tokens = _grader_cost(rnd)
                r_gcalls.append(calls)
                r_gtokens.append(tokens)
                later = [u for u in usage if u["node"] != "synthesize" and u.get("iteration", 0) >= iteration]
                r_latercalls.append(len(later))
                r_latertokens.append(sum(u["prompt_tokens"] + u["completion_tokens"] for u in later))
        self.r_query = np.asarray(r_query, dtype=np.int64)
        self.r_k = np.asarray(r_k, dtype=np.int64)
        self.r_last = np.asarray(r_last, dtype=np.bool_)
        self.r_n = np.asarray(r_n, dtype=np.int64)
        self.r_readfile = np.asarray(r_readfile, dtype=np.bool_)
        self.r_allvec = np.asarray(r_allvec, dtype=np.bool_)
        self.r_minvs = np.asarray(r_minvs, dtype=np.float64)
        self.r_recrule = np.asarray(r_recrule, dtype=np.int64)
        self.r_hasscores = np.asarray(r_hasscores, dtype=np.bool_)
        self.r_recaction = np.asarray(r_recaction, dtype=np.int64)
        self.r_iter = np.asarray(r_iter, dtype=np.int64)
        self.r_recroute = np.asarray(r_recroute, dtype=np.int64)
        self.r_gcalls = np.asarray(r_gcalls, dtype=np.int64)
        self.r_gtokens = np.asarray(r_gtokens, dtype=np.int64)
        self.r_latercalls = np.asarray(r_latercalls, dtype=np.int64)
        self.r_latertokens = np.asarray(r_latertokens, dtype=np.int64)
        self.i_scores = np.asarray(i_scores, dtype=np.float64)
        self.i_reckept = np.asarray(i_reckept, dtype=np.bool_)
        self.i_round = np.asarray(i_round, dtype=np.int64)
        self.R = len(r_query)
        # Segment starts of each round's items (rounds with no items get an empty segment).
        self.r_start = np.zeros(self.R, dtype=np.int64)
        if self.R:
            self.r_start[1:] = np.cumsum(self.r_n)[:-1]
        self.r_iterlist = self.r_iter.tolist()
        self.r_querylist = self.r_query.tolist()
        self.r_lastlist = self.r_last.tolist()

    # ---- one round each, all at once ------------------------------------------------------------

    def _seg_sum(self, values: np.ndarray) -> np.ndarray:
        return np.bincount(self.i_round, weights=values, minlength=self.R)

    def decide_rounds(self, config: CragConfig) -> dict[str, np.ndarray]:
        """Rule, action and kept mask of every round at ``config`` (``valid`` False: no scores recorded)."""
        R = self.R
        if config.prefilter:
            rule = np.where(self.r_readfile, 1,
                            np.where(self.r_n <= config.auto_approve_max_items, 2,
                                     np.where(self.r_allvec & (self.r_minvs >= config.vector_score_threshold), 3, 0)))
        else:
            rule = np.zeros(R, dtype=np.int64)
        graded = (rule == 0) & self.r_hasscores
        valid = (rule != 0) | self.r_hasscores
        floor, gen, tol = config.relevance_floor, config.generate_threshold, decisions.TOLERANCE
        scores = self.i_scores
        with np.errstate(invalid="ignore"):
            i_kept = scores >= floor  # NaN (no scores) compares False
        n_kept = np.bincount(self.i_round, weights=i_kept, minlength=R).astype(np.int64)
        has_kept = n_kept > 0
        if config.aggregator == "mean":
            total = self._seg_sum(np.where(i_kept, scores, 0.0))
            agg = np.divide(total, n_kept, out=np.zeros(R), where=has_kept)
        else:
            masked = np.where(i_kept, scores, -np.inf)
            agg = np.full(R, -np.inf)
            nonempty = self.r_n > 0
            if nonempty.any():
                agg[nonempty] = np.maximum.reduceat(masked, self.r_start[nonempty])
        action = np.where(~has_kept, RE_RETRIEVE,
                          np.where(agg >= gen - tol, GENERATE, np.where(agg >= floor - tol, REFINE, RE_RETRIEVE)))
        if config.aggregator == "any_above":
            confident = scores >= gen
            generate_items = action[self.i_round] == GENERATE
            i_kept = np.where(generate_items, i_kept & confident, i_kept)
        # Auto-approved rounds keep everything and GENERATE.
        auto = rule != 0
        action = np.where(auto, GENERATE, action)
        i_kept = np.where(auto[self.i_round], True, i_kept)
        # Exactness: re-decide with the scalar function wherever the summation order could matter.
        if config.aggregator == "mean":
            near = (np.abs(agg - (gen - tol)) <= BORDER) | (np.abs(agg - (floor - tol)) <= BORDER)
            border = graded & has_kept & near
            for r in np.flatnonzero(border).tolist():
                lo, hi = int(self.r_start[r]), int(self.r_start[r] + self.r_n[r])
                d = decisions.decide(scores[lo:hi].tolist(), floor=floor, generate_threshold=gen,
                                     aggregator=config.aggregator)
                action[r] = ACTIONS.index(d.action)
                seg = np.zeros(hi - lo, dtype=np.bool_)
                seg[list(d.kept)] = True
                i_kept[lo:hi] = seg
        n_kept = np.bincount(self.i_round, weights=i_kept, minlength=R).astype(np.int64)
        same = np.bincount(self.i_round, weights=i_kept != self.i_reckept, minlength=R) == 0
        at_cap = self.r_iter >= config.max_iterations
        route = np.where((action == GENERATE) | at_cap, SYNTHESIZE, np.where(action == REFINE, PLAN, ANALYZE))
        return {"rule": rule, "valid": valid, "action": action, "n_kept": n_kept, "same": same, "route": route}

    # ---- queries ----------------------------------------------------------------------------------

    def replay(self, config: CragConfig | Mapping[str, Any] | None = None, **changes: Any) -> ReplayReport:
        """The `ReplayReport` that ``Experiment.replay`` returns for the same arguments."""
        base_config = self.exp.config
        if config is None:
            config = CragConfig(**(base_config.model_dump() | changes))
        elif isinstance(config, Mapping):
            config = CragConfig(**(base_config.model_dump() | dict(config) | changes))
        d = self.decide_rounds(config)
        valid, action, route, same, rule = d["valid"], d["action"], d["route"], d["same"], d["rule"]
        # Why each round ends its query's replay (0: it does not).
        stop = np.where(~valid, 1, np.where(route == SYNTHESIZE, 2,
                                            np.where(route != self.r_recroute, 3, np.where(~same, 4, 0))))
        # Rounds before the first stop of their query, and that stop, are the ones replay visits.
        big = np.iinfo(np.int64).max
        first_stop = np.full(len(self.exp.records), big, dtype=np.int64)
        np.minimum.at(first_stop, self.r_query, np.where(stop > 0, self.r_k, big))
        visited = self.r_k <= first_stop[self.r_query]
        counted = visited & valid
        n_dropped = self.r_n - d["n_kept"]
        recrule0, rule0 = self.r_recrule == 0, rule == 0
        calls = np.where(rule0 & ~recrule0, self.r_gcalls, np.where(~rule0 & recrule0, -self.r_gcalls, 0))
        tokens = np.where(rule0 & ~recrule0, self.r_gtokens, np.where(~rule0 & recrule0, -self.r_gtokens, 0))
        final = visited & (stop == 2)
        calls = calls - np.where(final, self.r_latercalls, 0)
        tokens = tokens - np.where(final, self.r_latertokens, 0)
        mismatch = visited & (stop == 3)
        calls = calls + np.where(mismatch, np.where(route == PLAN, 2, 3), 0)
        nq = len(self.exp.records)

        def per_query(values: np.ndarray) -> list[int]:
            return np.bincount(self.r_query, weights=np.where(counted, values, 0), minlength=nq).astype(
                np.int64).tolist()

        kept_q, dropped_q = per_query(d["n_kept"]), per_query(n_dropped)
        calls_q, tokens_q = per_query(calls), per_query(tokens)
        actions: list[list[str]] = [[] for _ in range(nq)]
        flipped: list[list[int]] = [[] for _ in range(nq)]
        gained: list[list[str]] = [[] for _ in range(nq)]
        lost: list[list[str]] = [[] for _ in range(nq)]
        idx = np.flatnonzero(counted)
        for r, a in zip(idx.tolist(), action[idx].tolist(), strict=True):
            actions[self.r_querylist[r]].append(ACTIONS[a])
        for r in np.flatnonzero(counted & (action != self.r_recaction)).tolist():
            flipped[self.r_querylist[r]].append(self.r_iterlist[r])
        for r in np.flatnonzero(counted & (rule != self.r_recrule)).tolist():
            q = self.r_querylist[r]
            if rule[r]:
                gained[q].append(str(RULES[int(rule[r])]))
            if self.r_recrule[r]:
                lost[q].append(str(RULES[int(self.r_recrule[r])]))
        outcome: list[str | None] = [None] * nq
        note = [""] * nq
        lower = [False] * nq
        stops = np.flatnonzero(visited & (stop > 0))
        n_rounds = self.n_rounds
        for r, why, a, ro in zip(stops.tolist(), stop[stops].tolist(), action[stops].tolist(), route[stops].tolist(),
                                 strict=True):
            q = self.r_querylist[r]
            it = self.r_iterlist[r]
            if why == 1:
                outcome[q], note[q], lower[q] = "needs_rerun", NO_SHADOW, True
            elif why == 2:
                outcome[q] = "GENERATE" if a == GENERATE else "capped"
                if not self.r_lastlist[r]:
                    last_iter = self.r_iterlist[r + (n_rounds[q] - 1 - int(self.r_k[r]))]
                    note[q] = f"stops at round {it} instead of {last_iter}"
            elif why == 3:
                outcome[q], lower[q] = "needs_rerun", True
                note[q] = f"round {it} would go to {ROUTES[ro]}; the recording never went there"
            else:
                outcome[q], lower[q] = "needs_rerun", True
                note[q] = f"round {it} keeps different items, so later rounds would see other evidence"
        queries = []
        for q, base in enumerate(self.base):
            acts = actions[q]
            queries.append(QueryReplay(
                **base, outcome=outcome[q] or base["recorded_outcome"], first_action=acts[0] if acts else None,
                actions=acts, flipped_rounds=flipped[q], fast_path_gained=gained[q], fast_path_lost=lost[q],
                items_kept=kept_q[q], items_dropped=dropped_q[q], calls_delta=calls_q[q], tokens_delta=tokens_q[q],
                calls_delta_is_lower_bound=lower[q], note=note[q]))
        return ReplayReport(config, queries)
