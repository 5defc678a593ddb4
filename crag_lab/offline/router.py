"""The offline router: complexity and tool suggestions from the question's surface form.

Deterministic rules, readable in one screen, so a student can see why a question took its route.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from crag_lab.offline.text import content_terms

_CHITCHAT = re.compile(
    r"^\s*(?:hi|hello|hey|hiya|howdy|yo|good (?:morning|afternoon|evening|night)|greetings|"
    r"thanks?(?: you)?|thank you(?: so much| very much)?|thx|cheers|ok(?:ay)?|cool|great|nice|awesome|"
    r"bye|goodbye|see you|see ya|have a (?:nice|good) (?:day|one|weekend)|"
    r"how are you(?: doing)?|how's it going|what's up|who are you|what are you|what can you do|"
    r"what do you do|are you (?:a bot|an ai|human|there)|can you help(?: me)?|help|"
    r"tell me (?:a joke|about yourself)|you(?:'re| are) (?:great|awesome|helpful)|nice to meet you|lol|haha)"
    r"\b[\s\w',!?.:)-]{0,40}$",
    re.IGNORECASE,
)
_COMPLEX = re.compile(
    r"\b(?:compare|comparison|compared|differ(?:ence|ences|ent)?|versus|vs\.?|contrast|"
    r"changed?|changes|superseded?|supersedes|replaced?|evolv\w*|history of|over time|"
    r"before and after|both|trade-?offs?|why|explain how|relationship|relate|"
    r"which (?:team|service|one)s? .{0,40}\b(?:and|also)\b|who (?:leads|owns|runs|is responsible for) the team|"
    r"the team that|the service that|whoever|lead of the team)\b",
    re.IGNORECASE,
)
_BETWEEN = re.compile(r"\bbetween\b.+\band\b", re.IGNORECASE)
_ISSUE_KEY = re.compile(r"\b[A-Z][A-Z0-9]{1,9}-\d{1,6}\b")
_IDENTIFIER = re.compile(
    r"`[^`]+`|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b|\b\d{2,5}\b|\b[a-z]+(?:[-_][a-z0-9]+){1,}\b|--[a-z-]+|\b[A-Z][A-Z0-9]{1,9}-\d{1,6}\b"
)
_PATH = re.compile(r"\b[\w./-]+\.(?:md|markdown|txt|rst)\b")
_SPLIT = re.compile(r"\s*(?:,?\s+and\s+|;\s*|\?\s+)", re.IGNORECASE)


def classify(query: str) -> str:
    """``chitchat``, ``simple`` or ``complex``.

    >>> classify("thanks!"), classify("Which port does the gateway admin API use?")
    ('chitchat', 'simple')
    >>> classify("What changed between ADR-0004 and ADR-0009?")
    'complex'
    """
    text = query.strip()
    if _CHITCHAT.match(text) and len(content_terms(text)) <= 6:
        return "chitchat"
    if _COMPLEX.search(text) or _BETWEEN.search(text):
        return "complex"
    if text.count("?") > 1:
        return "complex"
    return "simple"


def identifiers(query: str) -> list[str]:
    """Exact tokens worth a literal search: `code`, ISSUE-12, ENV_VARS, ports, kebab-case names."""
    found = [m.strip("`") for m in _IDENTIFIER.findall(query)]
    return list(dict.fromkeys(f for f in found if len(f) >= 2))


def sub_questions(query: str, complexity: str) -> list[str]:
    """Self-contained parts of a complex question (split on "and", ";" and multiple "?")."""
    if complexity != "complex":
        return [query]
    parts = [p.strip(" ?") for p in _SPLIT.split(query) if len(content_terms(p)) >= 2]
    return [query] + [p + "?" for p in parts if p.strip(" ?") != query.strip(" ?")][:3]


def analyze(query: str, *, available: Sequence[str], tried: Sequence[str] = (), retrying: bool = False) -> dict[str, Any]:
    """The routing plan as the analyze prompt asks for it (a JSON-ready dict)."""
    complexity = classify(query)
    if complexity == "chitchat":
        return {"query_type": "chitchat", "complexity": "chitchat", "sub_questions": [],
                "suggested_tools": [], "grep_keywords": []}
    idents = identifiers(query)
    tools: list[str] = []
    if _PATH.search(query):
        tools.append("read_file")
    tools.append("vector_search")
    if idents:
        tools += ["keyword_search", "grep"]
    if _ISSUE_KEY.search(query):
        tools.append("jira_fetch")
    if re.search(r"https?://", query):
        tools.append("web_fetch")
    if retrying:
        order = [t for t in ("keyword_search", "grep", "vector_search") if t not in tried]
        tools = order[:1] + [t for t in tools if t not in tried and t not in order[:1]]
    tools = [t for t in dict.fromkeys(tools) if t in available]
    query_type = "comparison" if complexity == "complex" else "fact"
    return {"query_type": query_type, "complexity": complexity, "sub_questions": sub_questions(query, complexity),
            "suggested_tools": tools, "grep_keywords": idents[:6]}
