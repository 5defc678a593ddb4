"""The offline planner: tool calls from the routing plan; on REFINE, a new query built from the evidence.

A REFINE means the kept evidence is on topic but not enough. The planner reads it: the unit that
best matches the question usually names the *bridge* — the entity through which the question
reaches its answer ("Owning team: Payments Core" for "who leads the team that owns card-router?").
The refined query is what the question still asks ("leads") about that entity ("Payments Core"),
searched densely and with BM25. The rewritten query is in the ``planned`` audit event.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from crag_lab.offline.reading import coverage, read
from crag_lab.offline.text import content_terms, tokens
from crag_lab.offline.units import expand, question_terms
from crag_lab.offline.vectors import VectorCache

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


_NAME = re.compile(r"`[^`]{2,60}`|#[\w-]+|\b[A-Z][\w-]*(?:\s+[A-Z][\w-]*)*\b|\b[a-z0-9]+(?:-[a-z0-9]+)+\b")


def bridge_entities(query: str, context: Sequence[Mapping[str, Any]], vectors: VectorCache | None) -> list[str]:
    """Names the kept evidence adds next to what the question asks: the bridge of a multi-hop question.

    Reads the units of the kept items, takes the one that best matches the question, and returns
    its names (capitalised words, kebab-case identifiers, ``#channels``, code) that the question
    does not already contain — the value side of a ``key: value`` row first.
    """
    if not context or vectors is None:
        return []
    reading = read(query, [{"n": i, "text": c.get("text", ""), "title": c.get("title"), "path": c.get("path")}
                           for i, c in enumerate(context, 1)], vectors)
    units = [u for item in reading.items for u in item.units]
    if not units:
        return []
    best = max(units, key=lambda u: (u.coverage + u.cos, -len(u.unit.text)))
    text = best.unit.text
    if ":" in text:  # "Owning team: Payments Core" -> the value names the bridge
        text = text.split(":", 1)[1]
    asked = expand(content_terms(query))
    names = []
    for match in _NAME.finditer(text):
        name = match.group(0).strip("`")
        terms = set(content_terms(name))
        if terms and not terms <= asked:
            names.append(name)
    return list(dict.fromkeys(names))[:2]


def refined_query(query: str, context: Sequence[Mapping[str, Any]], vectors: VectorCache | None) -> str:
    """What the question still asks, about the bridge the kept evidence names; the query if neither is found."""
    gaps = missing_terms(query, context)
    bridge = bridge_entities(query, context, vectors)
    if bridge:
        named = frozenset(content_terms(" ".join(bridge)))
        asked = [w for w in tokens(query) if content_terms(w) and coverage(question_terms(w), named) == 0]
        head = gaps or asked[:3]
        return " ".join([*bridge, *head])
    return " ".join(gaps) if gaps else query


def plan(inputs: Mapping[str, Any], vectors: VectorCache | None = None) -> list[dict[str, Any]]:
    """The calls the offline model proposes (JSON-ready); ``vectors`` lets REFINE read the evidence."""
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
        refined = refined_query(query, inputs.get("context", []), vectors)
        add("vector_search", {"query": refined, "top_k": top_k})
        add("keyword_search", {"query": refined, "top_k": keyword_k})
        for sub in routing.get("sub_questions", [])[1:]:
            add("vector_search", {"query": sub, "top_k": top_k})
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
