"""The doubt check: abstain when a reader that learned what written unanswerable questions look like finds no answer.

The synthesizer's rules catch a question about an absent topic (its best unit's support is low), one that names
something no evidence holds (the names check) and one about what is not so (the negation check). A question
*written against the right paragraph* that lacks its answer passes all three: "Who demolished the Kessock
lighthouse?" over a paragraph naming its builder. SQuAD 2.0's unanswerable questions are made that way. The
doubt reader (``crag_lab/_data/doubt``, a `crag_lab.learned.SpanReader` trained with 16,588 such questions; its
data card) reads the evidence as the span reader does (`synthesizer.reader_passage`) and gives its best margin
over "no answer"; below its card's ``abstain_margin`` the synthesizer abstains.

The margin is read only where the reader learned to doubt (`applies`):

- a one-fact question (the router's ``simple``): a multi-hop question's answer spans items, so no one passage
  holds it and every margin is low;
- whose best unit is prose: a labelled row (``Retention: 13 months``) or a unit holding code is read as
  prose by a reader that learned on paragraphs, and its margin there is low for answerable questions too.

The cut is set on the reader's training data, never on a knowledge base or an evaluation set: the highest
margin below which at most 15 % of the held-out answerable questions fall (`cut_from`), the rule the answer
scorer's abstention threshold follows.

Opt-in (``CRAG_OFFLINE_DOUBT=1``, ``OfflineModel(doubt=True)``): on SQuAD 2.0 dev it withholds most written
unanswerable questions (31.9 → 72.3 % abstention, false abstention 15.1 → 26.4 %), but on the knowledge base's
test split it withholds no unanswerable question more and seven answers, five of them right (docs/dev/doubt.md).

>>> applies("simple", "The gateway listens on port 8443."), applies("complex", "The gateway listens on 8443.")
(True, False)
>>> applies("simple", "Retention: 13 months"), applies("simple", "Run `make reset` to start over.")
(False, False)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from crag_lab.offline.units import labelled

HELD_OUT_SHARE = 0.15
"""`cut_from`'s rule: at most this share of the held-out answerable questions fall below the cut."""


def prose(unit_text: str) -> bool:
    """Whether a unit is prose: no labelled row (``Label: value``) and no code."""
    return "`" not in unit_text and not labelled(unit_text)


def applies(complexity: str | None, unit_text: str) -> bool:
    """Whether the doubt reader's margin decides for a question the router calls ``complexity`` whose best unit
    (by the rules) reads ``unit_text``: a one-fact question quoted from prose (the module's docstring says why)."""
    return complexity == "simple" and prose(unit_text)


def doubted(query: str, items: Sequence[tuple[int, str]], reader: Any) -> str | None:
    """Why to abstain, in one clause for the trace, when ``reader``'s best margin over "no answer" in ``items``
    (``(n, passage)``: each evidence item's number and what the span reader reads of it) is below its card's
    ``abstain_margin``; else None."""
    cut = reader.card.get("abstain_margin")
    if cut is None or not items:
        return None
    found = reader.read(query, [passage for _, passage in items])
    best = max(range(len(found)), key=lambda k: found[k].margin)
    if found[best].margin >= cut:
        return None
    return (f"the doubt reader finds no answer in the evidence: its best margin over 'no answer' "
            f"({found[best].text.strip()[:60]!r} in item [{items[best][0]}]) is {found[best].margin:.1f}, "
            f"below its abstain_margin {cut:g}")


def cut_from(answerable_margins: Sequence[float], share: float = HELD_OUT_SHARE) -> float:
    """The highest margin, to 2 places, below which at most ``share`` of ``answerable_margins`` fall.

    >>> cut_from([-1.0, 0.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0], share=0.15)
    0.5
    """
    ordered = sorted(answerable_margins)
    allowed = int(share * len(ordered))  # this many may fall below
    return math.floor(ordered[allowed] * 100) / 100 if allowed < len(ordered) else math.inf
