"""The offline synthesizer: extractive answers that cite the lines they quote, or abstain.

Each evidence item is cut into units (a sentence, a list item, a table row rendered with its
header). A unit's score is the IDF-weighted share of the question's content terms it contains;
the best units that together cover the question are quoted with their ``[N]`` marker. When the best
unit covers too little of the question, the answer is the spec's abstention sentence.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crag_lab.offline.text import content_terms
from crag_lab.prompts import NO_EVIDENCE_ANSWER

ABSTAIN_BELOW = 0.45
MAX_UNITS = 3
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(\"'])")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}")


@dataclass(frozen=True)
class Unit:
    n: int
    text: str
    terms: frozenset[str]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def units_of(n: int, text: str) -> list[Unit]:
    """Quotable units of one evidence text; table rows carry their header (``Port: 8443``)."""
    out: list[Unit] = []
    header: list[str] | None = None
    heading = ""
    in_code = False
    lines = text.splitlines()
    for i, raw in enumerate(lines):
        line = raw.strip()
        if line.startswith("```"):
            in_code = not in_code
            continue
        if not line:
            header = None
            continue
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
            continue
        if line.startswith("|"):
            if _TABLE_RULE.match(line):
                continue
            nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
            if header is None and _TABLE_RULE.match(nxt):
                header = _cells(line)
                continue
            cells = _cells(line)
            if header and len(header) == len(cells):
                rendered = "; ".join(f"{h}: {c}" for h, c in zip(header, cells, strict=True) if c)
            else:
                rendered = " | ".join(c for c in cells if c)
            out.append(Unit(n, rendered, frozenset(content_terms(f"{heading} {rendered}"))))
            continue
        if in_code:
            out.append(Unit(n, f"`{line}`", frozenset(content_terms(f"{heading} {line}"))))
            continue
        body = re.sub(r"^(?:[-*+]|\d+[.)])\s+", "", line)
        for sentence in _SENTENCE.split(body):
            if len(sentence) > 3:
                out.append(Unit(n, sentence, frozenset(content_terms(f"{heading} {sentence}"))))
    return out


def _idf(units: Sequence[Unit]) -> dict[str, float]:
    df: Counter[str] = Counter()
    for unit in units:
        df.update(unit.terms)
    total = len(units) + 1
    return {term: math.log(1 + total / (1 + count)) for term, count in df.items()}


def select(query: str, evidence: Sequence[Mapping[str, Any]]) -> tuple[list[Unit], float]:
    """The units that best cover the question, and the coverage of the best single unit."""
    q_terms = content_terms(query)
    units = [u for item in evidence for u in units_of(int(item["n"]), str(item.get("text", "")))]
    if not q_terms or not units:
        return [], 0.0
    idf = _idf(units)
    weight = {t: idf.get(t, math.log(1 + (len(units) + 1))) for t in q_terms}
    total = sum(weight.values())

    def coverage(terms: set[str] | frozenset[str]) -> float:
        return sum(w for t, w in weight.items() if t in terms) / total

    ranked = sorted(units, key=lambda u: (-coverage(u.terms), len(u.text)))
    best = coverage(ranked[0].terms)
    chosen: list[Unit] = [ranked[0]]
    covered = set(ranked[0].terms)
    for unit in ranked[1:]:
        if len(chosen) >= MAX_UNITS:
            break
        gain = coverage(covered | unit.terms) - coverage(covered)
        if gain >= 0.15 and coverage(unit.terms) >= 0.3:
            chosen.append(unit)
            covered |= unit.terms
    return chosen, best


def answer(query: str, evidence: Sequence[Mapping[str, Any]]) -> str:
    """An extractive answer with ``[N]`` markers, or the abstention sentence."""
    chosen, best = select(query, evidence)
    if not chosen or best < ABSTAIN_BELOW:
        return NO_EVIDENCE_ANSWER
    parts = []
    for unit in chosen:
        text = unit.text.rstrip()
        if not text.endswith((".", "!", "?", "`")):
            text += "."
        parts.append(f"{text[:-1] if text.endswith('.') else text} [{unit.n}].")
    return " ".join(parts)


_REPLIES = (
    (re.compile(r"\b(thank|thanks|thx|cheers)\b", re.I), "You're welcome! Ask me anything about the knowledge base."),
    (re.compile(r"\b(bye|goodbye|see you|see ya|have a)\b", re.I), "Goodbye! Come back with more questions any time."),
    (re.compile(r"\b(who|what) are you\b|\bwhat (can|do) you do\b|\bare you\b|\bhelp\b", re.I),
     "I'm an offline corrective-RAG assistant: I search the knowledge base, grade what I find, and answer "
     "with citations to the files and lines I used."),
    (re.compile(r"\bjoke\b", re.I), "Why did the index go to therapy? Too many unresolved references."),
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
