"""Parsers for raw model output. They never raise: a failure returns None and the node falls back.

Models wrap JSON in prose and code fences, truncate it, or answer with the wrong length; each parser
finds the first JSON value of the expected shape and validates it strictly.

>>> parse_grades('Sure! ```json\\n[0.9, 0.2]\\n```', 2)
[0.9, 0.2]
>>> parse_grades("[0.9]", 2) is None
True
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Collection
from typing import Any

from crag_lab.state import RoutingPlan

_MAX_CANDIDATES = 64
_MAX_CHARS = 200_000
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
COMPLEXITIES = ("chitchat", "simple", "complex")
_ANALYSIS_KEYS = frozenset({"query_type", "complexity", "sub_questions", "suggested_tools", "grep_keywords"})


def _json_values(text: str, opener: str) -> list[Any]:
    """JSON values starting with ``opener`` found in ``text``: the whole text, fenced blocks, then scans."""
    text = text[:_MAX_CHARS]
    values: list[Any] = []
    candidates = [text.strip()] + [m.group(1).strip() for m in _FENCE.finditer(text)]
    for candidate in candidates:
        if candidate.startswith(opener):
            # RecursionError: nesting deeper than the interpreter allows (e.g. "[[[[...")
            with contextlib.suppress(ValueError, RecursionError):
                values.append(json.loads(candidate))
    if values:
        return values
    # No clean candidate: scan for every decodable value, so a "[1]" in the prose before the real
    # answer does not hide it; callers take the first of the shape they need.
    decoder = json.JSONDecoder()
    start = text.find(opener)
    tries = 0
    while start != -1 and tries < _MAX_CANDIDATES:
        tries += 1
        try:
            value, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            start = text.find(opener, start + 1)
            continue
        values.append(value)
        start = text.find(opener, end)
    return values


def _is_score(value: Any) -> bool:
    # NaN and infinities fail the comparison; huge JSON integers compare without a float conversion.
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0


def parse_grades(text: str, n: int) -> list[float] | None:
    """N relevance scores in [0, 1] from a grader's output, or None if it did not give exactly that.

    Accepts a bare JSON array or ``{"scores": [...]}``, with prose or code fences around it. A wrong
    length, a non-number, NaN or a score outside [0, 1] makes the whole answer invalid.
    """
    if not isinstance(text, str):
        return None
    for value in _json_values(text, "[") + _json_values(text, "{"):
        if isinstance(value, dict):
            value = value.get("scores")
        if isinstance(value, list) and len(value) == n and all(_is_score(v) for v in value):
            return [float(v) for v in value]
    return None


def parse_single_grade(text: str) -> float | None:
    """One score for per-item grading: ``[0.8]``, ``{"score": 0.8}`` or a bare number."""
    if not isinstance(text, str):
        return None
    grades = parse_grades(text, 1)
    if grades is not None:
        return grades[0]
    for value in _json_values(text, "{"):
        if isinstance(value, dict) and _is_score(value.get("score")):
            return float(value["score"])
    try:
        value = float(text.strip()[:64])
    except ValueError:
        return None
    return value if _is_score(value) else None


def _str_list(value: Any, allowed: Collection[str] | None = None) -> list[str]:
    if not isinstance(value, list):
        return []
    items = [v.strip() for v in value if isinstance(v, str) and v.strip()]
    if allowed is not None:
        items = [v for v in items if v in allowed]
    return list(dict.fromkeys(items))


def _probabilities(raw: Any) -> dict[str, float]:
    """The numeric entries of a ``{class: probability}`` mapping; anything else gives ``{}``."""
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, (int, float))} if isinstance(raw, dict) else {}


def parse_analysis(text: str, known_tools: Collection[str]) -> RoutingPlan:
    """The routing plan from ``analyze_and_route``'s output; unknown parts come back empty.

    ``complexity`` is None when missing or not one of chitchat / simple / complex (the graph then
    runs the full pipeline), and ``parsed`` says whether any JSON object was found at all.
    """
    obj: dict[str, Any] = {}
    if isinstance(text, str):
        dicts = [v for v in _json_values(text, "{") if isinstance(v, dict)]
        obj = next((d for d in dicts if _ANALYSIS_KEYS & d.keys()), dicts[0] if dicts else {})
    complexity = obj.get("complexity")
    if isinstance(complexity, str):
        complexity = complexity.strip().lower()
    query_type = obj.get("query_type")
    plan = RoutingPlan(
        query_type=query_type.strip() if isinstance(query_type, str) else "unknown",
        complexity=complexity if complexity in COMPLEXITIES else None,  # type: ignore[typeddict-item]
        sub_questions=_str_list(obj.get("sub_questions")),
        suggested_tools=_str_list(obj.get("suggested_tools"), known_tools),
        grep_keywords=_str_list(obj.get("grep_keywords"))[:8],
        parsed=bool(obj),
    )
    router = obj.get("router")
    if isinstance(router, dict) and isinstance(router.get("name"), str):  # a learned router says how sure it was
        plan["router"] = {"name": router["name"], "probabilities": _probabilities(router.get("probabilities"))}
        votes = router.get("votes")
        if isinstance(votes, dict) and votes:  # each reader's own probabilities (the learned router has two)
            plan["router"]["votes"] = {str(k): _probabilities(v) for k, v in votes.items() if isinstance(v, dict)}
        if isinstance(router.get("language"), str):  # the router for other languages decided
            plan["router"]["language"] = router["language"]
    return plan


def parse_plan(text: str, known_tools: Collection[str]) -> list[dict[str, Any]] | None:
    """Tool calls ``[{"tool": name, "args": {...}}]`` from ``plan``'s output, or None.

    Entries naming unknown tools or without an args object are dropped; a plan with no valid entry
    is a parse failure (None), so the node falls back to text extraction.
    """
    if not isinstance(text, str):
        return None
    for value in _json_values(text, "[") + _json_values(text, "{"):
        if isinstance(value, dict):
            value = value.get("calls", value.get("tool_calls", [value]))
        if not isinstance(value, list):
            continue
        calls = [
            {"tool": entry["tool"], "args": dict(entry.get("args") or {})}
            for entry in value
            if isinstance(entry, dict)
            and isinstance(entry.get("tool"), str)
            and entry["tool"] in known_tools
            and isinstance(entry.get("args", {}), dict)
        ]
        if calls:
            return calls
    return None


_STATS_TITLE = re.compile(r"LLM\s+Usage\s+Stats", re.IGNORECASE)
_DECORATION = re.compile(r"[ \t#>*_]*")
_TITLE_TAIL = re.compile(r"[ \t*_:]*(?:\n|$)")
_RULE_LINE = re.compile(r"[ \t]*-{3,}[ \t]*")
_EMOJI_REACH = 40


def _stats_header_start(text: str) -> int | None:
    """Where the first stats header begins, or None.

    A header is "📊" shortly before "LLM Usage Stats" anywhere on a line (a copied or hallucinated
    block need not start its line), or a line that is only a decorated "LLM Usage Stats" title. It
    begins at its line's start when only markdown decoration precedes it. Linear in ``text``.
    """
    line_start, scanned = 0, 0
    for match in _STATS_TITLE.finditer(text):
        newline = text.rfind("\n", scanned, match.start())
        if newline != -1:
            line_start = newline + 1
        scanned = match.start()
        emoji = text.rfind("📊", max(line_start, match.start() - _EMOJI_REACH), match.start())
        if emoji != -1:
            return line_start if _decoration_only(text, line_start, emoji) else emoji
        if _decoration_only(text, line_start, match.start()) and _TITLE_TAIL.match(text, match.end()):
            return line_start
    return None


def _decoration_only(text: str, start: int, end: int) -> bool:
    """True if ``text[start:end]`` is only spaces and markdown marks (``#``, ``>``, ``*``, ``_``)."""
    match = _DECORATION.match(text, start, end)
    return match is not None and match.end() == end


def strip_stats_blocks(text: str) -> str:
    """Cut ``text`` at the first ``📊 **LLM Usage Stats:**`` block (and its ``---`` rule).

    The block is always the end of an answer, so everything from its header on goes.

    Used on conversation history before any prompt, on model output before the system appends the
    one true block, and on evidence text so a document cannot smuggle in a second block.

    >>> strip_stats_blocks("Answer.\\n\\n---\\n📊 **LLM Usage Stats:**\\n- API calls: 3")
    'Answer.'
    """
    start = _stats_header_start(text)
    if start is None:
        return text
    body = text[:start].rstrip()
    last_line = body[body.rfind("\n") + 1 :]
    if _RULE_LINE.fullmatch(last_line):
        body = body[: len(body) - len(last_line)].rstrip()
    return body
