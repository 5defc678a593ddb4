"""The reference replay: one recorded query re-decided round by round with `crag_lab.decisions`.

`replay_record` calls the pure functions the graph uses, one round at a time. It is exact for
every round the recording contains; where a changed decision would lead the run somewhere the
recording never went (another REFINE round, a RE_RETRIEVE that did not happen), it says so
(``outcome == "needs_rerun"``) instead of guessing. The vectorised engine
(`crag_lab.replay._vectorised`) must give the same `QueryReplay`, field for field.
"""

from __future__ import annotations

from typing import Any

from crag_lab import decisions
from crag_lab.config import CragConfig
from crag_lab.records import QueryRecord, RoundRecord, UsageRecord, round_grades, run_route, usage_tokens
from crag_lab.replay.report import Outcome, QueryReplay, outcome_of

NOTE_NO_SHADOW = "the pre-filter skipped the grader when recorded and no shadow grades were kept"


LEAVING_CALLS = {"grade": 1, "plan": 1, "analyze_and_route": 2}
"""The fewest model calls a run makes after it leaves the recording, before it synthesizes (whose
recorded call stays counted): the grading call a round now needs, or the next round's plan (and
analyze, for RE_RETRIEVE). What follows is unknown, so replayed calls are then a lower bound."""


def later_usage(record: QueryRecord, rnd: RoundRecord) -> list[UsageRecord]:
    """The recorded calls after round ``rnd``, synthesize excluded (usage iterations count from 0)."""
    return [u for u in record.get("usage", []) if u["node"] != "synthesize" and u.get("iteration", 0) >= int(rnd["iteration"])]


def recorded_outcome(record: QueryRecord) -> Outcome:
    """How the recorded run of one query ended: chitchat, simple, GENERATE, capped or other."""
    return outcome_of(run_route(record))


def grader_cost(rnd: RoundRecord) -> tuple[int, int]:
    """Calls and tokens the grader spends on this round when it is not skipped."""
    if rnd.get("rule") is None:
        return int(rnd.get("grader_calls", 0)), int(rnd.get("grader_tokens", 0))
    shadow = rnd.get("shadow")
    usage = shadow.get("usage", []) if shadow else []
    return len(usage), usage_tokens(usage)


def recorded_fields(record: QueryRecord) -> dict[str, Any]:
    """The `QueryReplay` fields that do not depend on the replayed config."""
    rounds = list(record.get("rounds", []))
    recorded_actions = [r["action"] for r in rounds]
    return {
        "id": str(record.get("id")), "query": record["query"], "complexity": record.get("complexity"),
        "recorded_outcome": recorded_outcome(record), "recorded_actions": recorded_actions,
        "recorded_first_action": recorded_actions[0] if recorded_actions else None,
        "recorded_items_kept": sum(len(r["kept"]) for r in rounds),
        "recorded_items_dropped": sum(len(r["dropped"]) for r in rounds),
    }


def round_decision(rnd: RoundRecord, config: CragConfig) -> tuple[decisions.Decision | None, str | None]:
    """Re-decide one recorded round; None (and why) when the grades it would need were never recorded."""
    items = rnd["items"]
    rule = decisions.prefilter_rule(
        round_tools=rnd["round_tools"],
        item_tools=[i["tool"] for i in items],
        item_vector_scores=[i.get("vector_score") for i in items],
        auto_approve_max_items=config.auto_approve_max_items,
        vector_score_threshold=config.vector_score_threshold,
    ) if config.prefilter else None
    if rule is not None:
        return decisions.auto_approve(len(items), rule), None
    grades = round_grades(rnd)
    if grades is None:
        return None, NOTE_NO_SHADOW
    scores = [float(s) for s in grades[0]]
    return decisions.decide(scores, floor=config.relevance_floor, generate_threshold=config.generate_threshold,
                            aggregator=config.aggregator), None


def replay_record(record: QueryRecord, config: CragConfig) -> QueryReplay:
    """Replay one recorded query at ``config``, round by round (see the module docstring for what is exact).

    The reference implementation: ``Experiment.replay(..., engine="scalar")`` calls it per query, and
    the default vectorised engine must give the same result.
    """
    rounds = list(record.get("rounds", []))
    base = recorded_fields(record)
    recorded: str = base["recorded_outcome"]
    if not rounds:
        return QueryReplay(**base, outcome=recorded, first_action=None, actions=[], flipped_rounds=[],
                           fast_path_gained=[], fast_path_lost=[], items_kept=0, items_dropped=0,
                           calls_delta=0, tokens_delta=0, calls_delta_is_lower_bound=False)
    actions: list[str] = []
    flipped: list[int] = []
    gained: list[str] = []
    lost: list[str] = []
    kept = dropped = calls = tokens = 0
    outcome, note, lower_bound = recorded, "", False
    for k, rnd in enumerate(rounds):
        decision, why_not = round_decision(rnd, config)
        if decision is None:  # the grader must run here now: at least that call, then nothing recorded is known
            outcome, note, lower_bound = "needs_rerun", why_not or "", True
            calls, tokens = calls + LEAVING_CALLS["grade"] - len(later_usage(record, rnd)), \
                tokens - usage_tokens(later_usage(record, rnd))
            break
        actions.append(decision.action)
        kept, dropped = kept + len(decision.kept), dropped + len(decision.dropped)
        if decision.action != rnd["action"]:
            flipped.append(int(rnd["iteration"]))
        if decision.rule != rnd.get("rule"):
            if decision.rule is not None:
                gained.append(decision.rule)
            if rnd.get("rule") is not None:
                lost.append(str(rnd["rule"]))
        grader_calls, grader_tokens = grader_cost(rnd)
        if decision.rule is None and rnd.get("rule") is not None:
            calls, tokens = calls + grader_calls, tokens + grader_tokens
        elif decision.rule is not None and rnd.get("rule") is None:
            calls, tokens = calls - grader_calls, tokens - grader_tokens
        route = decisions.route_after_grade(decision.action, int(rnd["iteration"]), config.max_iterations)
        recorded_route = (
            "synthesize" if k == len(rounds) - 1
            else decisions.route_after_grade(rnd["action"], int(rnd["iteration"]), int(rnd["thresholds"]["max_iterations"]))
        )
        same_context = tuple(decision.kept) == tuple(i for i, item in enumerate(rnd["items"]) if item["id"] in rnd["kept"])
        later = later_usage(record, rnd)
        if route == "synthesize":
            calls -= len(later)
            tokens -= usage_tokens(later)
            if k < len(rounds) - 1:
                note = f"stops at round {rnd['iteration']} instead of {rounds[-1]['iteration']}"
            outcome = "GENERATE" if decision.action == "GENERATE" else "capped"
            break
        if route != recorded_route or not same_context:
            # The run leaves the recording after this round: what it recorded later is unknown now; the
            # next round needs at least its planning calls (its grading may be skipped by the pre-filter).
            outcome, lower_bound = "needs_rerun", True
            calls += LEAVING_CALLS[route] - len(later)
            tokens -= usage_tokens(later)
            note = (f"round {rnd['iteration']} would go to {route}; the recording never went there"
                    if route != recorded_route
                    else f"round {rnd['iteration']} keeps different items, so later rounds would see other evidence")
            break
    return QueryReplay(**base, outcome=outcome, first_action=actions[0] if actions else None, actions=actions,
                       flipped_rounds=flipped, fast_path_gained=gained, fast_path_lost=lost, items_kept=kept,
                       items_dropped=dropped, calls_delta=calls, tokens_delta=tokens,
                       calls_delta_is_lower_bound=lower_bound, note=note)
