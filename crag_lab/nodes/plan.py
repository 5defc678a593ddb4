"""``plan``: turn the routing plan into concrete tool calls (JSON), with a guarded text fallback."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from crag_lab.nodes._deps import Deps, Node
from crag_lab.parsing import parse_plan
from crag_lab.prompts import PLAN, cite_location, compact_json, tool_args_text
from crag_lab.records import NodeName, RoutingPlan
from crag_lab.state import AgentState
from crag_lab.tools import ToolError
from crag_lab.tools._patterns import extract_args, validate_args

NODE: NodeName = "plan"
REMOTE_TOOLS = ("jira_fetch", "confluence_fetch", "web_fetch")
SEARCH_TOOLS = ("vector_search", "keyword_search")
_PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.(?:md|markdown|txt|rst))\b")
_IDENT = re.compile(r"`([^`]{2,60})`|\b([A-Z][A-Z0-9]+-\d+|[A-Z][A-Z0-9]*_[A-Z0-9_]+|\d{3,5})\b")


def grep_pattern(query: str, keywords: Sequence[str]) -> str | None:
    """A literal-alternation regex over the routing plan's keywords or the query's identifiers."""
    words = [k for k in keywords if k.strip()]
    if not words:
        words = [a or b for a, b in _IDENT.findall(query)]
    if not words:
        return None
    return "|".join(re.escape(w) for w in dict.fromkeys(words))


def applicable_args(tool: str, query: str, plan: RoutingPlan, top_k: int) -> dict[str, Any] | None:
    """Arguments for ``tool`` derived from the query alone, or None when the tool does not apply.

    Remote tools apply only when the query holds a valid argument for them (an issue key, a
    Confluence page, an http(s) URL): the plan fallback must never invent one.

    >>> applicable_args("jira_fetch", "what is the weather?", {}, 5) is None
    True
    """
    if tool in SEARCH_TOOLS:
        return {"query": query, "top_k": top_k}
    if tool == "grep":
        pattern = grep_pattern(query, plan.get("grep_keywords", []))
        return {"pattern": pattern} if pattern else None
    if tool == "read_file":
        match = _PATH.search(query)
        return {"path": match.group(1)} if match else None
    if tool in REMOTE_TOOLS:
        return extract_args(tool, query)
    return None


def fallback_calls(text: str, query: str, plan: RoutingPlan, top_k: int) -> list[dict[str, Any]]:
    """Tool calls extracted from a plan that was not valid JSON (spec 003's fallback rule).

    Only tools in ``plan["suggested_tools"]`` are considered: those the text mentions, or all of
    them when it mentions none; each is kept only if `applicable_args` finds valid arguments.
    """
    suggested = list(plan.get("suggested_tools", []))
    mentioned = [t for t in suggested if re.search(rf"\b{re.escape(t)}\b", text or "")]
    calls = []
    for tool in mentioned or suggested:
        args = applicable_args(tool, query, plan, top_k)
        if args is not None:
            calls.append({"tool": tool, "args": args})
    return calls


def _complete_args(call: Mapping[str, Any], query: str, top_k: int) -> dict[str, Any]:
    """Fill the defaults a planner may leave out; validate remote-tool arguments."""
    tool, args = call["tool"], dict(call.get("args") or {})
    if tool in SEARCH_TOOLS:
        if not isinstance(args.get("query"), str) or not args["query"].strip():
            args["query"] = query
        if not isinstance(args.get("top_k"), int) or isinstance(args.get("top_k"), bool) or args["top_k"] < 1:
            args["top_k"] = top_k
    if tool in REMOTE_TOOLS:
        args = validate_args(tool, args)
    return {"tool": tool, "args": args}


def _refine_note(state: AgentState) -> str:
    if state.get("grader_action") != "REFINE":
        return ""
    kept = [cite_location(item) for item in state.get("context", [])]
    done = [compact_json({"tool": h["tool"], "args": h["args"]}) for h in state.get("tool_history", [])]
    return (
        "The evidence so far is only partly relevant (grader action REFINE). Kept evidence: "
        f"{', '.join(kept) or 'none'}. Calls already made: {'; '.join(done)}. Search for the missing "
        "parts with refined keywords; do not repeat a call.\n"
    )


def make_plan(deps: Deps) -> Node:
    def plan(state: AgentState) -> dict[str, Any]:
        log = deps.audit(NODE)
        query = state["query"]
        routing = state.get("routing_plan") or RoutingPlan(suggested_tools=["vector_search"])
        top_k = deps.config.top_k
        available = list(deps.tools)
        refine = state.get("grader_action") == "REFINE"
        prompt = PLAN.format(
            tool_args=tool_args_text(available),
            routing_plan=compact_json(routing),
            refine_note=_refine_note(state),
            query=query,
        )
        inputs = {"query": query, "routing_plan": routing, "refine": refine, "top_k": top_k,
                  "context": state.get("context", []), "tool_history": state.get("tool_history", []),
                  "available_tools": available}
        reply, usage = deps.call(NODE, "plan", prompt, inputs, log, iteration=state.get("iteration", 0))
        calls = parse_plan(reply.text, available) if reply else None
        if calls is None:
            calls = fallback_calls(reply.text if reply else "", query, routing, top_k)
            log.log_audit("plan_parse_failed", level="warning", fallback="text_extraction",
                          extracted=[c["tool"] for c in calls], output=(reply.text[:200] if reply else None))
        done = {compact_json({"tool": h["tool"], "args": h["args"]}) for h in state.get("tool_history", [])}
        planned: list[dict[str, Any]] = []
        for call in calls:
            try:
                complete = _complete_args(call, query, top_k)
            except ToolError as exc:
                log.log_audit("tool_call_rejected", level="warning", tool=call["tool"], reason=str(exc))
                continue
            key = compact_json(complete)
            if key in done:
                log.log_audit("duplicate_call_skipped", tool=complete["tool"], args=complete["args"])
                continue
            done.add(key)
            planned.append(complete)
        log.log_audit("planned", calls=planned, refine=refine)
        return {"planned_calls": planned, "usage": [usage], "audit": log.events, "path": [NODE]}

    return plan
