"""How the offline model reads evidence for one question: per item and per unit, meaning and words.

`read` turns a question and its evidence items into a `Reading`: each item's MiniLM cosine with
the question (the vector the index already holds, via `VectorCache`), and each of its units
(`crag_lab.offline.units`) with its own cosine, the share of the question's content words it holds,
and whether it holds the kind of thing the question asks for (a number, a person, a date, ...).
The grader turns an item's reading into features; the synthesizer picks the units to quote.

A unit's and an item's numbers depend only on the question and that item, never on the other
items of the batch, so batch and per-item grading agree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from crag_lab.offline.text import content_terms, one_slip, term_parts
from crag_lab.offline.units import (
    Unit,
    asks_for,
    expand,
    holds,
    kind_labels,
    labelled,
    names,
    question_terms,
    shape_of,
    units_of,
)
from crag_lab.offline.vectors import VectorCache, passage_key

CONTEXT_WEIGHT = 0.5
"""How much a question term counts when it is only in a unit's heading or the item's title."""
MAX_UNITS_PER_ITEM = 40
"""Units beyond this many per item are not embedded (a 400-line file excerpt, say)."""


def has_term(term: str, terms: frozenset[str]) -> bool:
    """The term, or every part of a compound term (``api-gateway``), is among ``terms``."""
    if term in terms:
        return True
    parts = term_parts(term)
    return bool(parts) and all(p in terms for p in parts)


def coverage(q_terms: Sequence[str], own: frozenset[str], context: frozenset[str] = frozenset()) -> float:
    """Share of the question's terms found in ``own`` (full credit) or only in ``context`` (half).

    >>> coverage(["port", "gateway"], frozenset({"port"}), frozenset({"gateway"}))
    0.75
    """
    if not q_terms:
        return 0.0
    got = 0.0
    for term in q_terms:
        if has_term(term, own):
            got += 1.0
        elif has_term(term, context):
            got += CONTEXT_WEIGHT
    return got / len(q_terms)


SLIP_MIN_LETTERS = 5
"""A name's word of at least this many letters counts as held when one typing slip away from an
evidence word, or when it starts one (a shortened name: ``Postgres`` for ``PostgreSQL``)."""


def grounded(name: Sequence[str], held: frozenset[str]) -> bool:
    """Every term of a name (`units.names`) is among the evidence's terms ``held``; a word of
    `SLIP_MIN_LETTERS` letters or more also when one typing slip away (``Kelven`` for ``Kelvin``) or
    the start of an evidence word (``Postgres`` for ``PostgreSQL``). Numbers must match exactly:
    7070 and 7071 are different ports.

    >>> held = frozenset({"kelvin", "report", "postgresql"})
    >>> grounded(["kelven"], held), grounded(["postgr"], held), grounded(["7071"], frozenset({"7070"}))
    (True, True, False)
    """
    return all(has_term(term, held) or (term.isalpha() and len(term) >= SLIP_MIN_LETTERS and any(
        one_slip(term, word) or word.startswith(term) for word in held)) for term in name)


def echoes(term: str, q_terms: Sequence[str]) -> bool:
    """The (stemmed) term is a question term or a part of one (``payment`` of ``team-payments``).

    >>> echoes("payment", ["team-payments"]), echoes("kotlin", ["languag"])
    (True, False)
    """
    return any(term == q or term in term_parts(q) for q in q_terms)


def label_names_asked(label: str, q_terms: Sequence[str], kind: str | None) -> bool:
    """The label of a pair names what the question asks: one of its terms, or the asked kind
    (``Date`` for when, ``Lead`` for who).

    >>> label_names_asked("Lead", ["payment"], "person"), label_names_asked("Slack", ["payment"], "person")
    (True, False)
    """
    label_terms = expand(content_terms(label))
    return bool(label_terms & kind_labels(kind)) or any(has_term(t, label_terms) for t in q_terms)


def label_answers(text: str, q_terms: Sequence[str], kind: str | None) -> bool:
    """A labelled unit (``Language: Python 3.12``) whose label names what the question asks — one of
    its terms, or the asked kind (``Date`` for when) — and whose value is mostly new to the question.

    A row whose value only repeats the question (``Consumes: notify.outbound.v2``) names the subject,
    not the answer.

    >>> label_answers("Language: Python 3.12", ["servic", "languag"], None)
    True
    >>> label_answers("Consumes: notify.outbound.v2", ["consum", "notify.outbound.v2"], None)
    False
    """
    for label, value in labelled(text):
        if not label_names_asked(label, q_terms, kind):
            continue
        value_terms = expand(content_terms(value))
        new = [t for t in value_terms if not echoes(t, q_terms)]
        if len(new) >= max(1, len(value_terms) / 2):
            return True
    return False


@dataclass(frozen=True)
class UnitReading:
    """One unit's reading: cosine, word coverage, whether it holds the asked kind of answer, whether
    a label of it names what is asked (`label_answers`) and whether it has the asked finer shape
    (`units.shape_of`: a version, a share, a command with arguments; None when none is asked)."""

    unit: Unit
    cos: float
    coverage: float
    holds: bool | None
    label_hit: bool = False
    shaped: bool | None = None


@dataclass(frozen=True)
class ItemReading:
    """One evidence item: its cosine with the question, its word coverage and its units."""

    n: int
    title: str
    cos: float
    coverage: float
    n_words: int
    units: tuple[UnitReading, ...]

    @property
    def best_unit(self) -> UnitReading | None:
        return max(self.units, key=unit_support, default=None)


QUESTION_PENALTY = 0.3
"""Taken from a unit that is itself a question (an FAQ heading, ``**Which port?**``): it echoes the
question's words and never answers it. `unit_support` and the synthesizer's ranking both take it."""


def question_penalty(u: UnitReading) -> float:
    """`QUESTION_PENALTY` for a unit that ends with ``?`` (bold or italic marks aside), else 0."""
    return QUESTION_PENALTY if u.unit.text.rstrip("*_ ").endswith("?") else 0.0


def unit_support(u: UnitReading) -> float:
    """How strongly one unit answers the question on its own: meaning, words and answer kind."""
    bonus = 0.15 if u.holds is True else (-0.1 if u.holds is False else 0.0)
    return u.cos + 0.6 * u.coverage + bonus - question_penalty(u)


@dataclass(frozen=True)
class Reading:
    """A question's reading of its evidence; ``ungrounded`` are the names the question uses
    (`units.names`: ``Maestro``, ``PAY-142``, ``7070``) that no item's text or title holds (nor an item the
    grader dropped, when the synthesizer is told of them: `read`)."""

    query: str
    kind: str | None
    terms: tuple[str, ...]
    items: tuple[ItemReading, ...]
    ungrounded: tuple[str, ...] = ()


def unit_key(title: str, unit: Unit) -> str:
    """A unit as it is encoded and scored: ``"Title: unit"`` (the unit alone without a title)."""
    return f"{title}: {unit.text}" if title else unit.text


def item_groups(text: str, title: str | None) -> list[list[str]]:
    """The texts `read` encodes together for an item (its units), as a list of groups (none if no units)."""
    units = units_of(1, text, title or None)[:MAX_UNITS_PER_ITEM]
    return [[unit_key(title or "", u) for u in units]] if units else []


def read(query: str, items: Sequence[Mapping[str, Any]], cache: VectorCache,
         seen: Sequence[Mapping[str, Any]] = ()) -> Reading:
    """Read ``items`` (``text`` and optional ``title``/``path``/``n``) for ``query``.

    A name of the question is ``ungrounded`` when no item holds it, nor any of ``seen`` (items the run
    found and its grader dropped: a multi-hop question names the entity that links its hops, and the
    item about that entity need not answer it).

    The cache gives the question's vector, each item's (the stored chunk vector when the index holds
    it) and each item's units, encoded together per item (`VectorCache.group`) when not yet seen.
    """
    kind = asks_for(query)
    shape = shape_of(query, kind)
    q_terms = tuple(question_terms(query)) or tuple(content_terms(query))
    texts = [str(item.get("text", "")) for item in items]
    titles = [str(item.get("title") or "") for item in items]
    per_item = [units_of(int(item.get("n", i + 1)), text, title or None)[:MAX_UNITS_PER_ITEM]
                for i, (item, text, title) in enumerate(zip(items, texts, titles, strict=True))]
    q_vec = cache.query(query)
    item_keys = [passage_key(text, item.get("path"), title or None)
                 for item, text, title in zip(items, texts, titles, strict=True)]
    item_cos = cache.texts(item_keys) @ q_vec if items else np.zeros(0)
    # An item's units are encoded together, as one group: their vectors never depend on other items.
    unit_cos = [cache.group([unit_key(title, u) for u in units]) @ q_vec if units else np.zeros(0)
                for title, units in zip(titles, per_item, strict=True)]
    readings = []
    held: set[str] = set()
    for i, (item, text, title, units) in enumerate(zip(items, texts, titles, per_item, strict=True)):
        title_terms = expand(content_terms(title))
        own = expand(content_terms(text))
        held |= own | title_terms
        unit_rows = tuple(UnitReading(u, float(c), coverage(q_terms, u.terms, u.context), holds(kind, u.text, query),
                                      label_answers(u.text, q_terms, kind),
                                      None if shape is None else bool(shape.search(u.text)))
                          for u, c in zip(units, unit_cos[i], strict=True))
        readings.append(ItemReading(
            n=int(item.get("n", i + 1)), title=title, cos=float(item_cos[i]),
            coverage=coverage(q_terms, own, title_terms), n_words=len(text.split()), units=unit_rows,
        ))
    for item in seen:
        held |= expand(content_terms(str(item.get("text", "")))) | expand(content_terms(str(item.get("title") or "")))
    everything = frozenset(held)
    ungrounded = tuple(name for name, terms in names(query) if not grounded(terms, everything))
    return Reading(query, kind, q_terms, tuple(readings), ungrounded)


GRADER_FEATURES: tuple[str, ...] = (
    "cos_item", "cos_best_unit", "coverage_item", "coverage_best_unit", "support_best_unit", "kind_found",
    "log_words",
)
"""The grader's features, in order (see `features`)."""


def features(item: ItemReading, kind: str | None) -> list[float]:
    """The grader's feature row for one item.

    ``kind_found`` is 1 when a unit covering at least half of what the best-covering unit covers
    holds the asked kind of answer, 0 when none does, and 0.5 when the question asks for no kind.
    """
    units = item.units
    best_cov = max((u.coverage for u in units), default=0.0)
    kind_found = 0.5 if kind is None else float(any(u.holds and u.coverage >= 0.5 * best_cov for u in units))
    best = item.best_unit
    return [
        item.cos,
        max((u.cos for u in units), default=item.cos),
        item.coverage,
        best_cov,
        unit_support(best) if best is not None else item.cos,
        kind_found,
        math.log1p(item.n_words),
    ]
