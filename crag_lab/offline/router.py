"""The offline router: complexity and tool suggestions from what a message is.

Chitchat is recognised by meaning first: the message's MiniLM vector is compared with varied
prototype messages (greetings, thanks, apologies, goodbyes, small talk, questions about the
assistant; and, against them, information-seeking questions), shipped in
``crag_lab/_data/router_prototypes.json`` and written for the router, not taken from any evaluation
set. A few phrasing rules back it up without a vector. Complexity is structure: a comparison, a
change over time, a second question joined by "and", a choice between alternatives or an entity
named through another one ("the team that owns X") is complex; anything else is one fact, simple.
`explain` names the rule that decided, so a student can see why a question took its route.

``router="learned"`` (the offline model's default) asks trained classifiers instead
(`crag_lab.learned.LearnedRouter`: a small head over the same MiniLM vector and a LoRA-tuned MiniLM
that reads the message's tokens, learned from public chit-chat and question sets); it names itself
``"learned"`` and reports its probabilities and each reader's vote.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any, get_args

import numpy as np

from crag_lab.config import OfflineRouter
from crag_lab.offline.text import content_terms

if TYPE_CHECKING:
    from crag_lab.learned.router import Route
    from crag_lab.offline.vectors import VectorCache

Router = OfflineRouter
ROUTERS: tuple[str, ...] = get_args(OfflineRouter)
"""The routers by name (`crag_lab.config.OfflineRouter`, the setting's own type)."""

MEANING_MARGIN = 0.04
"""Chitchat by meaning: the nearest chitchat prototype must beat the nearest question prototype by this."""
MEANING_MIN = 0.45
"""... and be at least this close (cosine) to the message."""
MEANING_MAX_TERMS = 8
"""Only short messages are tested for chitchat; a long one carries a request."""

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
# Questions about the assistant itself: what it can do in general, which languages it speaks.
_ABOUT_ASSISTANT = re.compile(
    r"^\s*(?:can|could|will|would|do) you\s+(?:(?:help|assist)\b.*\b(?:things?|stuff|anything|something|"
    r"everything|questions?)\b|(?:speak|talk|understand|read|write)\s+\w+\s*\??\s*$)",
    re.IGNORECASE,
)
_COMPARATIVE = (r"(?:higher|lower|longer|shorter|larger|smaller|bigger|faster|slower|tighter|looser|older|newer|"
                r"earlier|later|more|less|fewer|better|worse|greater|stricter|cheaper)")
# Complexity rules, by name, in the order they are tried. Each is about phrasing, never about a topic.
COMPLEX_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("comparison", re.compile(
        r"\b(?:compare|comparison|compared|differ(?:ence|ences|ent)?|versus|vs\.?|contrast|trade-?offs?|both)\b",
        re.IGNORECASE)),
    ("change_over_time", re.compile(
        r"\b(?:changed|changes|superseded|supersedes|evolv\w*|history of|over time|before and after)\b|"
        r"\bhow (?:did|has|have|does|do)\b.{0,80}\bchange\b",
        re.IGNORECASE)),
    ("between", re.compile(r"\bbetween\b.+\band\b", re.IGNORECASE)),
    # A second question joined by "and": ", and which ...", "and at what ...", ", and is that ...".
    ("two_questions", re.compile(
        r"\band\s+(?:(?:at|in|on|under|from|to|for|by|with|after|before|until)\s+)?"
        r"(?:what|which|who|whom|whose|how|when|where|why)\b|"
        r",\s*and\s+(?:is|are|was|were|does|do|did|can|could|should|must|will|has|have)\b",
        re.IGNORECASE)),
    # A choice between alternatives: "which has the longer X, A or B?", "does it do A or B?".
    ("alternatives", re.compile(
        rf"\b{_COMPARATIVE}\b[^?]*\bor\b|^\s*(?:does|do|is|are|did|was|were|should|can|will)\b[^?]*\bor\b",
        re.IGNORECASE)),
    # An entity named by a relation to another one: "the team that owns X", "the woman who played Y".
    ("bridge", re.compile(
        r"\b(?:the|an?)\s+(?!(?:first|last|only|next|same|\w+est)\b)(?:[\w-]+\s+){0,2}?[\w-]+\s+"
        r"(?:(?:that|who|whose)\s+\w+|responsible for|in charge of)\b|"
        r"\b(?:explain how|relationship|relate[sd]?)\b",
        re.IGNORECASE)),
)
_ISSUE_KEY = re.compile(r"\b[A-Z][A-Z0-9]{1,9}-\d{1,6}\b")
# Exact tokens worth a literal search. Kebab-case names (``api-gateway``) are left to BM25: they
# are everywhere in a knowledge base, so grepping them floods the context.
_IDENTIFIER = re.compile(
    r"`[^`]+`|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b|\b\d{2,5}\b|\b[a-z]+(?:_[a-z0-9]+)+\b|--[a-z-]+|"
    r"\b[A-Z][A-Z0-9]{1,9}-\d{1,6}\b"
)
_PATH = re.compile(r"\b[\w./-]+\.(?:md|markdown|txt|rst)\b")
_SPLIT = re.compile(r"\s*(?:,?\s+and\s+|;\s*|\?\s+)", re.IGNORECASE)


@functools.lru_cache(maxsize=1)
def prototypes() -> dict[str, tuple[str, ...]]:
    """The router's prototype messages by class (``chitchat``, ``question``)."""
    text = resources.files("crag_lab").joinpath("_data").joinpath("router_prototypes.json").read_text(encoding="utf-8")
    data = json.loads(text)
    return {"chitchat": tuple(data["chitchat"]), "question": tuple(data["question"])}


def prototype_vectors(vectors: VectorCache) -> np.ndarray:
    """The prototypes' vectors, chitchat rows first (one group: encoded once, then stored)."""
    protos = prototypes()
    return vectors.group([*protos["chitchat"], *protos["question"]])


def chitchat_by_meaning(query: str, vectors: VectorCache) -> bool:
    """True when the message is nearer in meaning to the chitchat prototypes than to the questions."""
    chit = prototypes()["chitchat"]
    sims = prototype_vectors(vectors) @ vectors.query(query.strip().lower())
    near_chit, near_quest = float(sims[: len(chit)].max()), float(sims[len(chit):].max())
    return near_chit >= MEANING_MIN and near_chit >= near_quest + MEANING_MARGIN


_KB_SIGNAL = re.compile(r"\d|[A-Z]{2,}|[\w-]+-[\w-]+|`|/")
"""Digits, acronyms, kebab-case names, code or paths: a message carrying these asks about something."""


def check_router(name: str) -> Router:
    """``name`` if it is a router, else a `ValueError` naming the valid ones.

    >>> check_router("rule")
    Traceback (most recent call last):
    ...
    ValueError: unknown router 'rule'; choose one of: rules, learned
    """
    if name not in ROUTERS:
        raise ValueError(f"unknown router {name!r}; choose one of: {', '.join(ROUTERS)}")
    return name  # type: ignore[return-value]


def learned_route(query: str, vectors: VectorCache | None = None) -> Route:
    """The learned router's decision and probabilities for ``query`` (its vector is the one the
    offline model reads the evidence with, so a pipeline that asks pays nothing extra)."""
    from crag_lab.learned.router import LearnedRouter
    from crag_lab.offline.vectors import VectorCache

    return LearnedRouter.load().route(query, vectors if vectors is not None else VectorCache())


def explain(query: str, vectors: VectorCache | None = None, *, router: str = "rules") -> tuple[str, str]:
    """The complexity and the name of the rule that decided it (``"learned"`` for the learned router).

    >>> explain("Which team owns the service on port 7070, and in which channel do I reach them?")
    ('complex', 'two_questions')
    >>> explain("Can you speak Dutch?")
    ('chitchat', 'about_assistant')
    """
    if check_router(router) == "learned":
        return learned_route(query, vectors).complexity, "learned"
    text = query.strip()
    n_terms = len(content_terms(text))
    if n_terms <= 6:
        if _CHITCHAT.match(text):
            return "chitchat", "small_talk"
        if _ABOUT_ASSISTANT.match(text):
            return "chitchat", "about_assistant"
    if (vectors is not None and n_terms <= MEANING_MAX_TERMS and not _KB_SIGNAL.search(text)
            and chitchat_by_meaning(text, vectors)):
        return "chitchat", "chitchat_by_meaning"
    for name, pattern in COMPLEX_RULES:
        if pattern.search(text):
            return "complex", name
    if text.count("?") > 1:
        return "complex", "several_questions"
    return "simple", "one_fact"


def classify(query: str, vectors: VectorCache | None = None, *, router: str = "rules") -> str:
    """``chitchat``, ``simple`` or ``complex``.

    >>> classify("thanks!"), classify("Which port does the gateway admin API use?")
    ('chitchat', 'simple')
    >>> classify("What changed between ADR-0004 and ADR-0009?")
    'complex'
    """
    return explain(query, vectors, router=router)[0]


def identifiers(query: str) -> list[str]:
    """Exact tokens worth a literal search: `code`, ISSUE-12, ENV_VARS, ports, kebab-case names."""
    found = [m.strip("`") for m in _IDENTIFIER.findall(query)]
    return list(dict.fromkeys(f for f in found if len(f) >= 2))


def sub_questions(query: str, complexity: str) -> list[str]:
    """Self-contained parts of a complex question (split on "and", ";" and multiple "?")."""
    if complexity != "complex":
        return [query]
    parts = [p.strip(" ?") for p in _SPLIT.split(query) if len(content_terms(p)) >= 2]
    return [query, *[p + "?" for p in parts if p.strip(" ?") != query.strip(" ?")][:3]]


def analyze(
    query: str, *, available: Sequence[str], tried: Sequence[str] = (), retrying: bool = False,
    vectors: VectorCache | None = None, router: str = "rules",
) -> dict[str, Any]:
    """The routing plan as the analyze prompt asks for it (a JSON-ready dict).

    With ``router="learned"`` the plan also says who decided and how sure it was:
    ``"router": {"name": "learned", "probabilities": {...}, "votes": {"vector": {...}, "tokens": {...}}}``, with
    ``"language": "other"`` when the router for other languages decided (`crag_lab.offline.spelling.other_language`).
    """
    why: dict[str, Any] = {}
    if check_router(router) == "learned":
        route = learned_route(query, vectors)
        complexity = route.complexity
        why = {"router": {"name": "learned", "probabilities": route.probabilities,
                          **({"votes": route.votes} if route.votes else {}),
                          **({"language": route.language} if route.language != "english" else {})}}
    else:
        complexity = classify(query, vectors)
    if complexity == "chitchat":
        return {"query_type": "chitchat", "complexity": "chitchat", "sub_questions": [],
                "suggested_tools": [], "grep_keywords": [], **why}
    idents = identifiers(query)
    tools: list[str] = []
    if _PATH.search(query):
        tools.append("read_file")
    tools += ["vector_search", "keyword_search"]  # dense + BM25: each finds what the other misses
    if idents:
        tools.append("grep")
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
            "suggested_tools": tools, "grep_keywords": idents[:6], **why}
