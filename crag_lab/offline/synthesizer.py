"""The offline synthesizer: extractive answers that cite the evidence they quote, or abstain.

Each evidence item is cut into units: a sentence of a paragraph (wrapped lines joined first), a
list item, a table row rendered with its header (``Port: 8443``), a line of code. A unit is scored
by the IDF-weighted share of the question's content terms it contains (its section heading and the
item's title count a little), plus a bonus when it holds the kind of thing the question asks for (a
number for "how many", a date or time for "when", a command for "which command") and a penalty
when it does not or when it is itself a question. The best unit answers; for a question with several
parts, the best unit of each part joins it. When the best unit covers too little of the question,
the answer is the spec's abstention sentence.

>>> answer("Which port does the gateway use?", [{"n": 1, "text": "The gateway listens on port 8443."}])
'The gateway listens on port 8443 [1].'
>>> answer("Who is the data protection officer?", [{"n": 1, "text": "The gateway listens on port 8443."}])
"I couldn't find relevant information in the knowledge base to answer this question."
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from crag_lab.offline.text import content_terms, term_parts
from crag_lab.prompts import NO_EVIDENCE_ANSWER

ABSTAIN_BELOW = 0.25
"""Without embeddings: the best unit must cover this share of the question (IDF-weighted) or the
answer is the abstention."""
ABSTAIN_BELOW_SEMANTIC = 0.9
"""With embeddings: abstain when best coverage + ``SEMANTIC_WEIGHT`` x the best question-unit cosine
falls below this. Tuned on ``data/kb_queries.jsonl`` (see docs/evaluation.md)."""
SEMANTIC_WEIGHT = 1.0
PART_MIN_COVERAGE = 0.5
"""A unit joins the answer for one part of a multi-part question only if it covers this much of the part."""
CONTEXT_WEIGHT = 0.5
"""How much a term counts when it is only in the unit's heading or the item's title."""
ITEM_WEIGHT = 0.2
"""How much the coverage of a unit's whole evidence item adds to the unit's own score."""
TYPE_BONUS = 0.2
TYPE_PENALTY = 0.15
MAX_UNITS = 4
SAME_ITEM_UNITS = 3
"""At most this many units of the best unit's evidence item are quoted."""
SAME_ITEM_MARGIN = 0.5
"""A unit of the same item is quoted only if it scores within this margin of the best one."""
MAX_UNIT_CHARS = 400

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(\"'*])")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_LINK_ONLY = re.compile(r"^\W*(?:!?\[[^\]]*\]\([^)]*\)[\s,;.:-]*)+$")
_BRACKET_NUMBER = re.compile(r"\[(\d{1,3})\]")
_PARTS = re.compile(r",\s*and\s+|\s+and\s+(?=(?:(?:at|in|on|under|from|to|for|by|with|after|before)\s+)?"
                    r"(?:what|which|who|whom|whose|how|when|where|why)\b)|;\s*|\?\s+", re.IGNORECASE)

# What the question asks for, from its phrasing, and what a unit holding it looks like.
_DURATION = (r"(?:ms|milliseconds?|s|sec|seconds?|min|minutes?|h|hours?|days?|weeks?|months?|years?|"
             r"business days?|calendar days?)")
_ASKS = (
    ("reason", re.compile(r"^\s*why\b|\bwhy (?:did|does|do|is|was|must|should|are|were)\b|\bthe reason\b",
                          re.IGNORECASE)),
    ("code", re.compile(r"\b(?:which|what)\s+(?:\w+\s+)?(?:command|commands|flags?|target|prefix|option|"
                        r"subcommand|script|role|setting|variable|endpoint|header|key prefix)\b|"
                        r"\bhow (?:do|can|should) (?:i|we)\b", re.IGNORECASE)),
    ("duration", re.compile(r"\bhow (?:long|often|quickly|fast|soon)\b|\bhow much time\b|"
                            r"\b(?:what|which)\b[^?,]{0,40}?\b(?:timeout|ttl|retention|deadline|lifetime|"
                            r"interval|objective)\b", re.IGNORECASE)),
    ("time", re.compile(r"\bwhen\b|\bwhat (?:time|date|day|year)\b|\bwhich (?:day|date|year|month)\b",
                        re.IGNORECASE)),
    ("quantity", re.compile(r"\bhow (?:many|much|far|big|large|old)\b|"
                            r"\b(?:what|which)\b[^?,]{0,40}?\b(?:port|version|percentage|share|number|size|"
                            r"limit|amount|target|code|status|threshold)s?\b|\blargest\b|\bsmallest\b|\bmaximum\b|"
                            r"\bminimum\b", re.IGNORECASE)),
    ("person", re.compile(r"\bwho(?:m|se)?\b|\bby name\b", re.IGNORECASE)),
)
_LOOKS = {
    "reason": re.compile(r"\b(?:because|since|so that|otherwise|due to|caused|causes|as a result|"
                         r"which made|to avoid|in order to|reverted|would)\b", re.IGNORECASE),
    "code": re.compile(r"`[^`]+`|\b[\w.-]+(?:[-_:./][\w]+)+\b|--[a-z][\w-]*"),
    "duration": re.compile(rf"(?<![\w.-])\d[\d,.]*\s*(?:-\s*)?{_DURATION}\b|\b(?:daily|weekly|monthly|hourly|"
                           r"quarterly|yearly|nightly|every \w+)\b", re.IGNORECASE),
    "time": re.compile(r"\b\d{1,4}(?:[-:./]\d{1,4})+\b|\b(?:monday|tuesday|wednesday|thursday|friday|saturday|"
                       r"sunday|january|february|march|april|may|june|july|august|september|october|november|"
                       r"december|daily|weekly|monthly|quarterly|yearly|nightly)\b|\b\d+\s*(?:am|pm|h|cet|utc)\b|"
                       r"\b(?:19|20)\d\d\b", re.IGNORECASE),
    "quantity": re.compile(r"(?<![\w.-])\d[\d,.]*(?:\s*%)?(?![\w-])"),
    "person": re.compile(r"\b[A-Z][a-z]+(?:\s+(?:de|van|von|da|del|der|la|le)?\s*[A-Z][a-z]+)+\b"),
}


@dataclass(frozen=True)
class Unit:
    """One quotable piece of an evidence item: its text, its own terms and its heading/title terms."""

    n: int
    text: str
    terms: frozenset[str]
    context: frozenset[str] = frozenset()


def _expand(terms: list[str]) -> frozenset[str]:
    out = set(terms)
    for term in terms:
        out.update(term_parts(term))
    return frozenset(out)


def _clean(text: str) -> str:
    text = _LINK.sub(r"\1", text)
    return _BRACKET_NUMBER.sub(r"(\1)", text).strip()


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def units_of(n: int, text: str, title: str | None = None) -> list[Unit]:
    """Quotable units of one evidence text; table rows carry their header (``Port: 8443``).

    >>> text = "## Ports\\n\\nThe gateway listens\\non 8443. It is TLS.\\n\\n| Name | Port |\\n|---|---|\\n| a | 8443 |"
    >>> [u.text for u in units_of(1, text)]
    ['The gateway listens on 8443.', 'It is TLS.', 'Name: a; Port: 8443']
    """
    out: list[Unit] = []
    title_terms = content_terms(title or "")
    heading = ""
    header: list[str] | None = None
    in_code = False
    block: list[str] = []

    def add(raw: str) -> None:
        body = _clean(raw)
        if len(body) <= 3:
            return
        context = _expand(content_terms(heading) + title_terms)
        for sentence in _SENTENCE.split(body) if not body.startswith("`") else [body]:
            if len(sentence) > 3:
                out.append(Unit(n, sentence[:MAX_UNIT_CHARS], _expand(content_terms(sentence)), context))

    def flush() -> None:
        if block:
            add(" ".join(block))
            block.clear()

    lines = text.splitlines()
    for i, raw in enumerate(lines):
        line = raw.strip()
        if line.startswith("```"):
            flush()
            in_code = not in_code
            continue
        if in_code:
            if line and not line.startswith("#"):
                add(f"`{line}`")
            continue
        if not line:
            flush()
            header = None
            continue
        if line.startswith("#"):
            flush()
            heading = line.lstrip("#").strip()
            continue
        if line.startswith("|"):
            flush()
            if _TABLE_RULE.match(line):
                continue
            nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
            if header is None and _TABLE_RULE.match(nxt):
                header = _cells(line)
                continue
            cells = _cells(line)
            if header and len(header) == len(cells) and any(header):
                rendered = "; ".join(f"{h}: {c}" if h else c for h, c in zip(header, cells, strict=True) if c)
            else:
                rendered = ": ".join(c for c in cells if c)
            add(rendered)
            continue
        if _LIST_ITEM.match(line):
            flush()
            item = _LIST_ITEM.sub("", line)
            if not _LINK_ONLY.match(item):  # a bare link is navigation, not an answer
                block.append(item)
            continue
        block.append(line)
    flush()
    return out


_FRAME = re.compile(r"\bhow (?:many|much(?: time)?|long|often|far|quickly|fast|big|large|soon|old)\b|"
                    r"\bwhat (?:time|date|day|year)\b|\bwhich (?:day|date|year|month)\b|\bby name\b",
                    re.IGNORECASE)


def question_terms(question: str) -> list[str]:
    """The content terms of a question without its framing ("how many", "what time", ...).

    >>> question_terms("How much time does a reviewer get?")
    ['review']
    """
    return content_terms(_FRAME.sub(" ", question))


def asks_for(question: str) -> str | None:
    """The kind of answer the phrasing asks for: code, time, quantity, person, or None.

    >>> asks_for("How many brokers are there?"), asks_for("When is the freeze?"), asks_for("What is it?")
    ('quantity', 'time', None)
    """
    question = re.sub(r"\b(what|who|when|where|how)'s\b", r"\1 is", question, flags=re.IGNORECASE)
    for kind, pattern in _ASKS:
        if pattern.search(question):
            return kind
    return None


def _holds(kind: str | None, unit: Unit, question: str) -> bool | None:
    """Whether the unit holds a thing of the asked kind that the question does not already hold."""
    if kind is None:
        return None
    found = {m.group(0).lower() for m in _LOOKS[kind].finditer(unit.text)}
    given = {m.group(0).lower() for m in _LOOKS[kind].finditer(question)}
    return bool(found - given)


class _Scorer:
    """IDF-weighted coverage of a set of question terms by units (IDF over the units at hand)."""

    def __init__(self, units: Sequence[Unit]) -> None:
        df: Counter[str] = Counter()
        for unit in units:
            df.update(unit.terms | unit.context)
        total = len(units) + 1
        self._idf = {t: math.log(1 + total / (1 + c)) for t, c in df.items()}
        self._unseen = math.log(1 + total)

    def weights(self, terms: Sequence[str]) -> dict[str, float]:
        return {t: self._idf.get(t, self._unseen) for t in terms}

    @staticmethod
    def _has(term: str, terms: frozenset[str]) -> bool:
        if term in terms:
            return True
        parts = term_parts(term)
        return bool(parts) and all(p in terms for p in parts)

    def coverage(self, weights: Mapping[str, float], units: Sequence[Unit]) -> float:
        total = sum(weights.values())
        if not total:
            return 0.0
        own = frozenset().union(*(u.terms for u in units))
        ctx = frozenset().union(*(u.context for u in units))
        got = 0.0
        for term, w in weights.items():
            if self._has(term, own):
                got += w
            elif self._has(term, ctx):
                got += CONTEXT_WEIGHT * w
        return got / total


def _score(scorer: _Scorer, weights: Mapping[str, float], unit: Unit, kind: str | None, question: str) -> float:
    score = scorer.coverage(weights, [unit])
    holds = _holds(kind, unit, question)
    if holds is True:
        score += TYPE_BONUS
    elif holds is False:
        score -= TYPE_PENALTY
    if kind != "code" and unit.text.startswith("`") and unit.text.endswith("`"):
        score -= 0.1  # a bare line of code rarely answers a question that is not about a command
    if unit.text.rstrip("*_ ").endswith("?"):
        score -= 0.5  # a question (an FAQ heading, say) never answers one
    if not unit.terms - set(weights):
        score -= 0.2  # says nothing the question does not already say
    return score


def question_parts(question: str) -> list[str]:
    """The parts of a multi-part question ("..., and which ...?"); a one-part question gives ``[]``.

    >>> question_parts("Which team owns it, and in which channel do I reach them?")
    ['Which team owns it', 'in which channel do I reach them']
    """
    parts = [p.strip(" ?,") for p in _PARTS.split(question) if len(question_terms(p)) >= 2]
    return parts if len(parts) > 1 else []


Embed = Callable[[Sequence[str]], Sequence[Sequence[float]]]
"""Embeds texts; the first is the question (embedded as a query), the rest are passages."""


def _best_cosine(embed: Embed, query: str, units: Sequence[Unit], titles: Mapping[int, str]) -> float:
    vectors = [[float(x) for x in v] for v in embed([query, *(f"{titles.get(u.n, '')}: {u.text}" for u in units)])]
    norms = [math.sqrt(sum(x * x for x in v)) or 1.0 for v in vectors]
    return max(sum(a * b for a, b in zip(vectors[0], v, strict=True)) / (norms[0] * n)
               for v, n in zip(vectors[1:], norms[1:], strict=True))


def confidence(query: str, evidence: Sequence[Mapping[str, object]], embed: Embed | None = None) -> float:
    """How sure the synthesizer is that the evidence answers: best coverage (+ best cosine with ``embed``)."""
    return _select(query, evidence, embed)[2]


def select(query: str, evidence: Sequence[Mapping[str, object]]) -> tuple[list[Unit], float]:
    """The units that answer the question, and the coverage of the best one (0 when nothing fits).

    >>> [u.text for u in select("Which port?", [{"n": 1, "text": "Port: 8443. Lunch at noon."}])[0]]
    ['Port: 8443.']
    """
    chosen, coverage, _ = _select(query, evidence, None)
    return chosen, coverage


def _select(query: str, evidence: Sequence[Mapping[str, object]], embed: Embed | None
            ) -> tuple[list[Unit], float, float]:
    """Chosen units, best coverage and the confidence the abstention threshold applies to.

    The best unit comes first; up to ``SAME_ITEM_UNITS - 1`` of the next best units of the same
    evidence item follow (quoting more of a passage costs no citation precision); each further part
    of a multi-part question adds its own best unit.
    """
    q_terms = question_terms(query)
    units = [u for item in evidence for u in units_of(int(str(item["n"])), str(item.get("text", "")),
                                                       str(item.get("title") or "") or None)]
    if not q_terms or not units:
        return [], 0.0, 0.0
    scorer = _Scorer(units)
    weights = scorer.weights(q_terms)
    kind = asks_for(query)
    by_item: dict[int, list[Unit]] = {}
    for unit in units:
        by_item.setdefault(unit.n, []).append(unit)
    item_coverage = {n: scorer.coverage(weights, members) for n, members in by_item.items()}
    scores = {id(u): _score(scorer, weights, u, kind, query) + ITEM_WEIGHT * item_coverage[u.n] for u in units}
    ranked = sorted(units, key=lambda u: (-scores[id(u)], len(u.text)))
    best = ranked[0]
    best_coverage = max(scorer.coverage(weights, [u]) for u in units)
    chosen = [best]
    for unit in ranked[1:]:
        if len(chosen) >= SAME_ITEM_UNITS:
            break
        if unit.n == best.n and scores[id(unit)] >= scores[id(best)] - SAME_ITEM_MARGIN:
            chosen.append(unit)
    for part in question_parts(query):
        if len(chosen) >= MAX_UNITS:
            break
        part_weights = scorer.weights(question_terms(part))
        part_kind = asks_for(part)
        part_scores = {id(u): _score(scorer, part_weights, u, part_kind, part) for u in units}
        top = max(units, key=lambda u: (part_scores[id(u)], -len(u.text)))
        if top in chosen or any(part_scores[id(u)] >= part_scores[id(top)] - 0.05 for u in chosen):
            continue
        if scorer.coverage(part_weights, [top]) >= PART_MIN_COVERAGE:
            chosen.append(top)
    sure = best_coverage
    if embed is not None:
        titles = {int(str(item["n"])): str(item.get("title") or "") for item in evidence}
        sure += SEMANTIC_WEIGHT * _best_cosine(embed, query, units, titles)
    return chosen, best_coverage, sure


def answer(query: str, evidence: Sequence[Mapping[str, object]], embed: Embed | None = None) -> str:
    """An extractive answer with ``[N]`` markers, or the abstention sentence.

    ``embed`` (optional) adds the semantic half of the abstention test; without it the test is
    lexical only (``ABSTAIN_BELOW``).
    """
    chosen, _, sure = _select(query, evidence, embed)
    if not chosen or sure < (ABSTAIN_BELOW if embed is None else ABSTAIN_BELOW_SEMANTIC):
        return NO_EVIDENCE_ANSWER
    parts = []
    for unit in chosen:
        text = unit.text.rstrip()
        if text.endswith("."):
            text = text[:-1]
        parts.append(f"{text} [{unit.n}].")
    return " ".join(parts)


_REPLIES = (
    (re.compile(r"\b(thank|thanks|thx|cheers)\b", re.I), "You're welcome! Ask me anything about the knowledge base."),
    (re.compile(r"\b(bye|goodbye|see you|see ya|have a)\b", re.I), "Goodbye! Come back with more questions any time."),
    (re.compile(r"\b(who|what) are you\b|\bwhat (can|do) you do\b|\bare you\b|\bhelp\b", re.I),
     "I'm an offline corrective-RAG assistant: I search the knowledge base, grade what I find, and answer "
     "with citations to the files and lines I used."),
    (re.compile(r"\bjoke\b", re.I), "Why did the index go to therapy? Too many unresolved references."),
    (re.compile(r"\b(speak|talk|understand)\b", re.I),
     "I answer in English, from the knowledge base; ask me about anything it covers."),
)


def chitchat(query: str) -> str:
    """A short conversational reply, no citations."""
    for pattern, reply in _REPLIES:
        if pattern.search(query):
            return reply
    return "Hello! Ask me a question about the knowledge base and I'll find the answer with sources."


NORMAL_ANSWER = (
    "The offline model has no knowledge of its own beyond the knowledge base; "
    'ask with mode="knowledge_base" to search it.'
)
