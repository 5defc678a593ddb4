"""What the offline synthesizer weighed for one answer, as the audit trail shows it (`Answered`).

The synthesizer ranks every unit of the evidence (`synthesizer.ranked`) and quotes from the top. The trace lists the
best few with their scores, so that a reader of the trace sees how close the choice was, and why an abstention
happened: the best unit's support against `synthesizer.ABSTAIN_BELOW`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from crag_lab.offline.reading import UnitReading, unit_support

WEIGHED_UNITS = 5
"""How many of the best-ranked units the trace lists with their scores (`Answered.weighed`): the runners-up show how
close the choice was."""


@dataclass(frozen=True)
class Answered:
    """What the synthesizer says (`read_answer`): the answer or the abstention sentence, why, and the units it weighed.

    ``weighed`` lists the `WEIGHED_UNITS` best-ranked units of the evidence, best first, as plain dicts for the
    audit trail, and after them any quoted unit ranked lower (the span reader's can be): ``rank`` (1 = best),
    ``item`` (the evidence's number, as the prompt numbered it), ``unit`` (its whole text; a quote may cut a wide
    row to the pairs that answer), ``score`` (what it was ranked by: `answer_score`, plus the learned scorer's
    share with the learned reader), ``support`` (`unit_support`, what `ABSTAIN_BELOW` is checked against; the
    learned reader's opt-in scorer abstention checks its probability instead, as the reason says) and ``quoted``
    (whether the answer quotes it; never for an abstention).
    """

    text: str
    why: str | None
    weighed: tuple[dict[str, Any], ...] = ()


def weighed_units(ranked: Sequence[tuple[float, UnitReading]],
                  quoted: Sequence[UnitReading] = ()) -> tuple[dict[str, Any], ...]:
    """`Answered.weighed` for the order a choice was made from (`synthesizer.Choice.ranked`: units with their
    scores, best first): its best `WEIGHED_UNITS` units, any ``quoted`` one ranked below them too, and which are
    quoted."""
    said = {(u.unit.n, u.unit.text) for u in quoted}
    return tuple({"rank": rank, "item": u.unit.n, "unit": u.unit.text, "score": round(score, 3),
                  "support": round(unit_support(u), 3), "quoted": (u.unit.n, u.unit.text) in said}
                 for rank, (score, u) in enumerate(ranked, 1)
                 if rank <= WEIGHED_UNITS or (u.unit.n, u.unit.text) in said)

