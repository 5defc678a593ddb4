"""The offline planner: tool calls from the routing plan, with refined keywords on REFINE."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from crag_lab.offline.text import content_terms, tokens

_ISSUE_KEY = re.compile(r"\b[A-Z][A-Z0-9]{1,9}-\d{1,6}\b")
_PATH = re.compile(r"\b[\w./-]+\.(?:md|markdown|txt|rst)\b")
_URL = re.compile(r"https?://\S+")


def _done(history: Sequence[Mapping[str, Any]]) -> set[str]:
    return {json.dumps({"tool": h.get("tool"), "args": h.get("args")}, sort_keys=True) for h in history}


def missing_terms(query: str, context: Sequence[Mapping[str, Any]]) -> list[str]:
    """Query words (unstemmed) whose stems the kept evidence does not contain yet."""
    have = set(content_terms(" ".join(str(item.get("text", "")) for item in context)))
    words = [t for t in tokens(query) if content_terms(t) and content_terms(t)[0] not in have]
    return list(dict.fromkeys(words))


def plan(inputs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The calls the offline model proposes (JSON-ready)."""
    query: str = inputs["query"]
    routing: Mapping[str, Any] = inputs.get("routing_plan") or {}
    top_k: int = int(inputs.get("top_k", 5))
    available = set(inputs.get("available_tools", []))
    suggested = [t for t in routing.get("suggested_tools", []) if t in available] or ["vector_search"]
    keywords = list(routing.get("grep_keywords", []))
    keyword_k = max(1, (top_k + 1) // 2)
    done = _done(inputs.get("tool_history", []))
    calls: list[dict[str, Any]] = []

    def add(tool: str, args: dict[str, Any]) -> None:
        if tool in available and json.dumps({"tool": tool, "args": args}, sort_keys=True) not in done:
            calls.append({"tool": tool, "args": args})

    def refined_calls() -> list[dict[str, Any]]:
        """Searches for what the kept evidence lacks: each sub-question, then the missing words."""
        gaps = missing_terms(query, inputs.get("context", []))
        refined = " ".join(gaps) if gaps else query
        for sub in routing.get("sub_questions", [])[1:]:
            add("vector_search", {"query": sub, "top_k": top_k})
        add("keyword_search", {"query": refined, "top_k": top_k})
        add("vector_search", {"query": refined, "top_k": top_k})
        return calls[:3]

    if inputs.get("refine"):
        return refined_calls()
    for tool in suggested:
        if tool == "vector_search":
            add(tool, {"query": query, "top_k": top_k})
        elif tool == "keyword_search":
            # BM25 complements the dense hits; its top few add most of what it can add.
            add(tool, {"query": query, "top_k": keyword_k if "vector_search" in suggested else top_k})
        elif tool == "grep" and keywords:
            add("grep", {"pattern": "|".join(re.escape(k) for k in keywords)})
        elif tool == "read_file" and (m := _PATH.search(query)):
            add("read_file", {"path": m.group(0)})
        elif tool == "jira_fetch" and (m := _ISSUE_KEY.search(query)):
            add("jira_fetch", {"key": m.group(0)})
        elif tool == "web_fetch" and (m := _URL.search(query)):
            add("web_fetch", {"url": m.group(0).rstrip(").,;")})
    if not calls and inputs.get("tool_history"):
        # A retry whose new strategy has nothing to run (grep without an identifier, say) must still
        # bring new evidence, or the round would grade nothing.
        return refined_calls()
    return calls
