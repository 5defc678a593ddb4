"""JSON schemas of what analyze, plan and grade must reply, for providers that constrain decoding.

OpenAI-compatible servers (OpenAI, vLLM, llama.cpp's server) accept ``response_format`` with a JSON
schema and then cannot produce anything else; `crag_lab.models.LlamaIndexModel` sends it where the
provider supports it. The tolerant parsers of `crag_lab.parsing` stay: they read both the
constrained replies (objects: ``{"scores": [...]}``, ``{"calls": [...]}``) and free text.
Synthesis is free text and has no schema. Every root is an object (OpenAI's strict mode needs one).

>>> schema = task_schema("grade", {"items": [{}, {}]})
>>> schema["properties"]["scores"]["minItems"], schema["properties"]["scores"]["maxItems"]
(2, 2)
>>> task_schema("synthesize", {}) is None
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from crag_lab.parsing import COMPLEXITIES

MAX_LIST = 3
"""Longest list a schema allows (sub-questions, tools, keywords, tool calls): a constrained small
model otherwise repeats an item until its token budget runs out."""
MAX_TEXT = 100
SCORE_LEVELS = [round(k / 10, 1) for k in range(11)]


def _strings() -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string", "maxLength": MAX_TEXT}, "maxItems": MAX_LIST}


def analyze_schema(tools: Sequence[str]) -> dict[str, Any]:
    """The routing plan: query type, complexity, sub-questions, tools, literal keywords."""
    tool = {"type": "string", "enum": list(tools)} if tools else {"type": "string"}
    return {
        "type": "object",
        "properties": {
            "query_type": {"type": "string", "maxLength": 40},
            "complexity": {"type": "string", "enum": list(COMPLEXITIES)},
            "sub_questions": _strings(),
            "suggested_tools": {"type": "array", "items": tool, "maxItems": MAX_LIST},
            "grep_keywords": _strings(),
        },
        "required": ["query_type", "complexity", "sub_questions", "suggested_tools", "grep_keywords"],
        "additionalProperties": False,
    }


def _text(min_length: int = 1) -> dict[str, Any]:
    return {"type": "string", "minLength": min_length, "maxLength": 80}


_LINE = {"type": "integer", "minimum": 1}
TOOL_ARGS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "vector_search": ({"query": _text(2), "top_k": {"type": "integer", "minimum": 1, "maximum": 20}}, ["query"]),
    "keyword_search": ({"query": _text(2), "top_k": {"type": "integer", "minimum": 1, "maximum": 20}}, ["query"]),
    "grep": ({"pattern": _text()}, ["pattern"]),
    "read_file": ({"path": _text(), "start_line": _LINE, "end_line": _LINE}, ["path"]),
    "jira_fetch": ({"key": _text()}, ["key"]),
    "confluence_fetch": ({"page": _text()}, ["page"]),
    "web_fetch": ({"url": _text(8)}, ["url"]),
}
"""Each tool's arguments (properties, required) as the tools validate them (`crag_lab.prompts.TOOL_ARGS` in words)."""


def _call(tool: str) -> dict[str, Any]:
    props, required = TOOL_ARGS.get(tool, ({}, []))
    args: dict[str, Any] = {"type": "object", "properties": props, "required": required, "additionalProperties": False} \
        if props else {"type": "object"}
    return {"type": "object", "properties": {"tool": {"const": tool}, "args": args},
            "required": ["tool", "args"], "additionalProperties": False}


def plan_schema(tools: Sequence[str]) -> dict[str, Any]:
    """Tool calls: at least one, each naming a known tool with the arguments that tool needs."""
    call: dict[str, Any] = {"anyOf": [_call(t) for t in tools]} if tools else {
        "type": "object", "properties": {"tool": {"type": "string"}, "args": {"type": "object"}},
        "required": ["tool", "args"]}
    return {"type": "object",
            "properties": {"calls": {"type": "array", "items": call, "minItems": 1, "maxItems": MAX_LIST}},
            "required": ["calls"], "additionalProperties": False}


def grade_schema(n: int) -> dict[str, Any]:
    """Exactly ``n`` scores in [0, 1], in passage order."""
    # Eleven levels rather than a range: llama.cpp's grammars enforce an enum, not a number's bounds.
    score = {"type": "number", "enum": SCORE_LEVELS}
    return {"type": "object",
            "properties": {"scores": {"type": "array", "items": score, "minItems": n, "maxItems": n}},
            "required": ["scores"], "additionalProperties": False}


def fingerprint() -> str:
    """A short hash of every schema rule (limits, levels, tool arguments): a response cache keys on it,
    so replies cached under other schemas are not reused after a change here.

    >>> len(fingerprint())
    12
    """
    import hashlib
    import json

    rules = {"max_list": MAX_LIST, "max_text": MAX_TEXT, "levels": SCORE_LEVELS, "tools": TOOL_ARGS,
             "samples": [analyze_schema(["t"]), plan_schema(list(TOOL_ARGS)), grade_schema(2)]}
    return hashlib.sha256(json.dumps(rules, sort_keys=True).encode()).hexdigest()[:12]


def task_schema(task: str, inputs: Mapping[str, Any]) -> dict[str, Any] | None:
    """The schema a reply to ``task`` must follow, from the call's structured inputs; None for free text."""
    if task == "analyze":
        return analyze_schema(list(inputs.get("available_tools") or []))
    if task == "plan":
        return plan_schema(list(inputs.get("available_tools") or []))
    if task == "grade":
        items = inputs.get("items")
        return grade_schema(len(items) if isinstance(items, Sequence) else 1)
    return None


__all__ = ["analyze_schema", "fingerprint", "grade_schema", "plan_schema", "task_schema"]
