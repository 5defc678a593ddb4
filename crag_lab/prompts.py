"""Prompt templates, one per task, rendered with LlamaIndex's `PromptTemplate`.

Every evidence text and history turn passes through `strip_stats_blocks` first, so no prompt ever
carries an ``LLM Usage Stats`` block.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.prompts import PromptTemplate

from crag_lab.parsing import strip_stats_blocks

NO_EVIDENCE_ANSWER = "I couldn't find relevant information in the knowledge base to answer this question."

TOOL_ARGS = {
    "vector_search": '{"query": str, "top_k": int}',
    "keyword_search": '{"query": str, "top_k": int}',
    "grep": '{"pattern": str}',
    "read_file": '{"path": str, "start_line"?: int, "end_line"?: int}',
    "jira_fetch": '{"key": "PROJ-123"}',
    "confluence_fetch": '{"page": "page id or URL"}',
    "web_fetch": '{"url": "https://..."}',
}

ANALYZE = PromptTemplate(
    "You route questions for an assistant that answers from an engineering knowledge base.\n"
    "Classify the question and suggest retrieval tools. Reply with one JSON object with keys:\n"
    '  "query_type": short label (e.g. "how_to", "fact", "comparison", "greeting"),\n'
    '  "complexity": "chitchat" (small talk, no lookup needed), "simple" (one fact in one place) '
    'or "complex" (several facts, comparisons, changes over time, multi-step reasoning),\n'
    '  "sub_questions": list of self-contained questions to look up,\n'
    '  "suggested_tools": list chosen from {tools},\n'
    '  "grep_keywords": exact identifiers worth a literal search (keys, ports, commands).\n'
    "{retry_note}"
    "Conversation so far:\n{history}\n\n"
    "Question: {query}\n"
    "JSON:"
)

PLAN = PromptTemplate(
    "Plan the tool calls that will find evidence for the question.\n"
    "Available tools and their arguments:\n{tool_args}\n"
    "Routing plan: {routing_plan}\n"
    "{refine_note}"
    "Reply with a JSON array of objects {{\"tool\": name, \"args\": {{...}}}}, nothing else.\n"
    "Question: {query}\n"
    "JSON:"
)

GRADE = PromptTemplate(
    "Grade how relevant each numbered passage is to the question, from 0.0 (irrelevant) to 1.0 "
    "(directly answers it). Reply with only a JSON array of {n} numbers, in passage order.\n\n"
    "Question: {query}\n\n"
    "Passages:\n{passages}\n\n"
    "JSON array of {n} scores:"
)

GRADE_ONE = PromptTemplate(
    "Grade how relevant the passage is to the question, from 0.0 (irrelevant) to 1.0 (directly "
    "answers it). Reply with only the number.\n\n"
    "Question: {query}\n\n"
    "Passage:\n{passage}\n\n"
    "Score:"
)

SYNTHESIZE = PromptTemplate(
    "Answer the question using only the numbered evidence below. After each claim, cite the "
    "evidence it comes from with its number in square brackets, e.g. [1] or [2]. Do not write a "
    "list of sources and do not add usage statistics: the system appends both. If the evidence "
    f'does not answer the question, reply exactly: "{NO_EVIDENCE_ANSWER}"\n\n'
    "Conversation so far:\n{history}\n\n"
    "Evidence:\n{evidence}\n\n"
    "Question: {query}\n"
    "Answer:"
)

CHITCHAT = PromptTemplate(
    "You are a friendly assistant for an engineering knowledge base. Reply briefly and "
    "conversationally; no citations.\n\n"
    "Conversation so far:\n{history}\n\n"
    "User: {query}\n"
    "Assistant:"
)

NORMAL = PromptTemplate(
    "Answer the question from your own knowledge, briefly. Say so if you do not know.\n\n"
    "Conversation so far:\n{history}\n\n"
    "Question: {query}\n"
    "Answer:"
)


def render_history(history: Sequence[Mapping[str, str]] | None) -> str:
    """Conversation turns as ``role: content`` lines, stats blocks removed."""
    if not history:
        return "(none)"
    lines = []
    for turn in history:
        content = strip_stats_blocks(str(turn.get("content", "")))
        lines.append(f"{turn.get('role', 'user')}: {content}")
    return "\n".join(lines)


def render_passage(item: Mapping[str, Any], n: int | None = None) -> str:
    """One evidence item for a prompt: ``[n] path:Lx-Ly`` then its text."""
    head = f"[{n}] " if n is not None else ""
    return f"{head}{cite_location(item)}\n{strip_stats_blocks(str(item.get('text', '')))}"


def cite_location(item: Mapping[str, Any]) -> str:
    """``path:L12-L30``, ``path:L42`` or just ``path`` when the item has no line number.

    >>> cite_location({"path": "runbooks/x.md", "line": 12, "line_end": 30})
    'runbooks/x.md:L12-L30'
    >>> cite_location({"path": "runbooks/x.md", "line": None})
    'runbooks/x.md'
    """
    path = str(item.get("path") or "(unknown source)")
    line = item.get("line")
    if line is None:
        return path
    end = item.get("line_end")
    return f"{path}:L{line}-L{end}" if end is not None and end != line else f"{path}:L{line}"


def tool_args_text(tools: Sequence[str]) -> str:
    return "\n".join(f"- {name} {TOOL_ARGS.get(name, '{...}')}" for name in tools)


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)
