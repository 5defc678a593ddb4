"""``analyze_and_route``: classify the question's complexity and suggest retrieval tools."""

from __future__ import annotations

from typing import Any

from crag_lab.nodes._deps import Deps, Node
from crag_lab.parsing import parse_analysis
from crag_lab.prompts import ANALYZE, render_history
from crag_lab.records import NodeName, RoutingPlan
from crag_lab.state import AgentState

NODE: NodeName = "analyze_and_route"
# The retrieval strategies a RE_RETRIEVE cycles through, in order of preference.
STRATEGIES = ("vector_search", "keyword_search", "grep")


def next_strategies(suggested: list[str], tried: list[str], available: list[str]) -> list[str]:
    """Suggested tools not yet tried; if none remain, the first untried strategy; else the suggestion.

    >>> next_strategies(["vector_search"], ["vector_search"], ["vector_search", "keyword_search"])
    ['keyword_search']
    """
    fresh = [t for t in suggested if t not in tried]
    if fresh:
        return fresh
    untried = [t for t in STRATEGIES if t in available and t not in tried]
    return untried[:1] or suggested


def make_analyze(deps: Deps) -> Node:
    def analyze_and_route(state: AgentState) -> dict[str, Any]:
        log = deps.audit(NODE)
        query = state["query"]
        tried = list(state.get("tried_tools", []))
        retrying = state.get("grader_action") == "RE_RETRIEVE"
        available = list(deps.tools)
        retry_note = (
            f"Earlier retrieval with {', '.join(tried)} found no relevant evidence: "
            "suggest a different strategy.\n"
            if retrying
            else ""
        )
        prompt = ANALYZE.format(
            tools=", ".join(available) or "(none)",
            retry_note=retry_note,
            history=render_history(state.get("history")),
            query=query,
        )
        inputs = {"query": query, "history": state.get("history") or [], "tried_tools": tried,
                  "available_tools": available, "retrying": retrying}
        reply, usage = deps.call(NODE, "analyze", prompt, inputs, log, iteration=state.get("iteration", 0))
        plan: RoutingPlan = parse_analysis(reply.text if reply else "", available)
        if plan.get("complexity") is None:
            log.log_audit("classification_unavailable", level="warning", parsed=plan.get("parsed", False),
                          fallback="complex")
            plan["complexity"] = "complex"
            plan["classified"] = False
        else:
            plan["classified"] = True
        if not plan.get("suggested_tools"):
            plan["suggested_tools"] = [t for t in STRATEGIES[:1] if t in available]
        if retrying:
            if plan["complexity"] != "complex":
                log.log_audit("complexity_kept", was=plan["complexity"], kept="complex",
                              reason="a RE_RETRIEVE continues the graded pipeline")
                plan["complexity"] = "complex"
            chosen = next_strategies(plan["suggested_tools"], tried, available)
            log.log_audit("strategy_changed", tried=tried, chosen=chosen)
            plan["suggested_tools"] = chosen
        if not deps.config.routing and plan["complexity"] != "complex":
            log.log_audit("routing_disabled", was=plan["complexity"], kept="complex")
            plan["complexity"] = "complex"
        if plan["complexity"] in ("chitchat", "simple"):
            log.log_audit("fast_path_hit", rule_name=plan["complexity"], path_type="complexity_route")
        log.log_audit("routed", complexity=plan["complexity"], suggested_tools=plan["suggested_tools"],
                      query_type=plan.get("query_type"))
        return {"routing_plan": plan, "usage": [usage], "audit": log.events, "path": [NODE]}

    return analyze_and_route
