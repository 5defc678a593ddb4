"""``grade_evidence``: pre-filter rules, one batch grader call, drop weak items, pick the action."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from crag_lab.audit import AuditLog
from crag_lab.decisions import (
    PARSE_FAILURE_SCORE,
    Decision,
    auto_approve,
    capped,
    decide,
    prefilter_rule,
)
from crag_lab.nodes._deps import Deps, Node
from crag_lab.parsing import parse_grades, parse_single_grade, strip_stats_blocks
from crag_lab.prompts import GRADE, GRADE_ONE, render_passage
from crag_lab.records import (
    ItemRecord,
    NodeName,
    RoundRecord,
    RoundThresholds,
    ShadowGrades,
    ToolCall,
    UsageRecord,
    usage_tokens,
)
from crag_lab.state import AgentState, EvidenceItem

NODE: NodeName = "grade_evidence"


def vector_scores(items: Sequence[EvidenceItem], history: Sequence[ToolCall]) -> list[float | None]:
    """Each item's cosine as recorded in ``tool_history`` by ``vector_search`` (None if it has none)."""
    recorded: dict[str, float | None] = {}
    for call in history:
        if call.get("tool") != "vector_search":
            continue
        for iid, score in zip(call.get("item_ids", []), call.get("scores", []), strict=False):
            recorded.setdefault(iid, score)
    return [recorded.get(item["id"]) for item in items]


def _grade(
    deps: Deps, query: str, items: Sequence[EvidenceItem], log: AuditLog, iteration: int
) -> tuple[list[float], list[UsageRecord], bool]:
    """Scores for ``items`` from the model: one batch call, or one call per item under per_item."""
    if not items:
        return [], [], True
    # the same evidence text as the prompt (render_passage): no stats block a document smuggled in
    inputs_items = [{"text": strip_stats_blocks(i["text"]), "title": i.get("title"), "path": i.get("path")}
                    for i in items]
    if deps.config.grading == "per_item":
        scores, usages, all_ok = [], [], True
        for item, payload in zip(items, inputs_items, strict=True):
            prompt = GRADE_ONE.format(query=query, passage=render_passage(item))
            reply, usage = deps.call(NODE, "grade", prompt, {"query": query, "items": [payload]}, log,
                                      iteration=iteration)
            usages.append(usage)
            score = parse_single_grade(reply.text) if reply else None
            if score is None:
                all_ok = False
                log.log_audit("grader_parse_failed", level="warning", item=item["id"],
                              fallback=PARSE_FAILURE_SCORE, output=(reply.text[:200] if reply else None))
                score = PARSE_FAILURE_SCORE
            scores.append(score)
        return scores, usages, all_ok
    passages = "\n\n".join(render_passage(item, n) for n, item in enumerate(items, 1))
    prompt = GRADE.format(query=query, passages=passages, n=len(items))
    reply, usage = deps.call(NODE, "grade", prompt, {"query": query, "items": inputs_items}, log,
                             iteration=iteration)
    parsed = parse_grades(reply.text, len(items)) if reply else None
    if parsed is None:
        log.log_audit("grader_parse_failed", level="warning", items=len(items), fallback=PARSE_FAILURE_SCORE,
                      output=(reply.text[:200] if reply else None))
        return [PARSE_FAILURE_SCORE] * len(items), [usage], False
    return parsed, [usage], True


def make_grade(deps: Deps) -> Node:
    def grade_evidence(state: AgentState) -> dict[str, Any]:
        cfg = deps.config
        log = deps.audit(NODE)
        query = state["query"]
        context = list(state.get("context", []))
        history = state.get("tool_history", [])
        iteration = state.get("iteration", 0) + 1
        previous = list(state.get("context_scores", []))[: len(context)]
        round_tools = [c["tool"] for c in history if c.get("round") == iteration]
        vscores = vector_scores(context, history)
        rule = prefilter_rule(
            round_tools=round_tools,
            item_tools=[item["tool"] for item in context],
            item_vector_scores=vscores,
            auto_approve_max_items=cfg.auto_approve_max_items,
            vector_score_threshold=cfg.vector_score_threshold,
        ) if cfg.prefilter else None
        usages: list[UsageRecord] = []
        parse_ok = True
        new_from = len(previous)
        shadow: ShadowGrades | None = None
        if rule is not None:
            decision: Decision = auto_approve(len(context), rule)
            log.log_audit("fast_path_hit", rule_name=rule, path_type="grader_prefilter", items=len(context))
            if deps.shadow_grading:
                # Record what the grader would have said, for replay at other thresholds. Not part
                # of the run: its scores decide nothing and its usage is kept apart.
                quiet = AuditLog(NODE)
                fresh, shadow_usage, _ = _grade(deps, query, context[new_from:], quiet, iteration - 1)
                shadow = ShadowGrades(scores=previous + fresh, usage=shadow_usage)
        else:
            fresh, usages, parse_ok = _grade(deps, query, context[new_from:], log, iteration - 1)
            decision = decide(previous + fresh, floor=cfg.relevance_floor,
                              generate_threshold=cfg.generate_threshold, aggregator=cfg.aggregator)
        for i in decision.dropped:
            item = context[i]
            log.log_audit("evidence_dropped", item=item["id"], path=item.get("path"), line=item.get("line"),
                          score=decision.scores[i], floor=cfg.relevance_floor)
        at_cap = capped(iteration, cfg.max_iterations)
        if at_cap and decision.action != "GENERATE":
            log.log_audit("max_iterations_reached", iteration=iteration, max_iterations=cfg.max_iterations,
                          action=decision.action, items_used=len(decision.kept))
        log.log_audit("graded", action=decision.action, aggregate=decision.aggregate, kept=len(decision.kept),
                      dropped=len(decision.dropped), iteration=iteration)
        round_record = RoundRecord(
            iteration=iteration,
            round_tools=round_tools,
            items=[
                ItemRecord(id=item["id"], path=item.get("path"), line=item.get("line"), tool=item["tool"],
                           vector_score=vscores[i], grader_score=decision.scores[i], new=i >= new_from)
                for i, item in enumerate(context)
            ],
            rule=rule,
            parse_ok=parse_ok,
            grader_calls=len(usages),
            aggregate=decision.aggregate,
            action=decision.action,
            kept=[context[i]["id"] for i in decision.kept],
            dropped=[context[i]["id"] for i in decision.dropped],
            capped=at_cap,
            thresholds=RoundThresholds(
                relevance_floor=cfg.relevance_floor, generate_threshold=cfg.generate_threshold,
                vector_score_threshold=cfg.vector_score_threshold, auto_approve_max_items=cfg.auto_approve_max_items,
                max_iterations=cfg.max_iterations, aggregator=cfg.aggregator),
            grader_tokens=usage_tokens(usages),
            shadow=shadow,
        )
        return {
            "context": [context[i] for i in decision.kept],
            "evidence_scores": list(decision.scores),
            "context_scores": [decision.scores[i] for i in decision.kept],
            "grader_action": decision.action,
            "iteration": iteration,
            "usage": usages,
            "audit": log.events,
            "rounds": [round_record],
            "dropped": [context[i] for i in decision.dropped],
            "path": [NODE],
        }

    return grade_evidence
