"""Set the doubt reader's abstention cut on its held-out training data: ``python -m crag_lab.learned.doubt_cut``.

    python -m crag_lab.learned.doubt_cut --val D/val.json.gz --reader crag_lab/_data/doubt

``--val`` is the validation file ``train_spans --dump D --written UNANSQ --docs`` wrote (held-out articles and
distributions only); ``--reader`` the folder of a trained span reader (adapter and ``spans.json``). Each
validation question is read against its passage as `crag_lab.learned.SpanReader` reads it; the cut is the
highest margin, to 2 places, below which at most 15 % of the answerable ones fall
(`crag_lab.offline.doubt.cut_from`). It is written into ``spans.json`` as ``abstain_margin``, with the rule and
the share of each validation source below it (``held_out_at_the_cut``). No knowledge base and no evaluation set
is read.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RULE = ("the highest margin (to 2 places) below which at most 15 % of the held-out answerable validation questions "
        "fall (crag_lab.offline.doubt.cut_from), measured on the stored adapter loaded on the float32 base")


def margins(reader: Any, rows: Sequence[tuple[str, str, int, str, str]]) -> list[tuple[str, bool, float]]:
    """(source, answerable, margin) of each ``(question, passage, start, answer, source)`` row, read per question."""
    by_question: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_question[row[0]].append(i)
    found: dict[int, float] = {}
    for question, indices in by_question.items():
        for i, span in zip(indices, reader.read(question, [rows[i][1] for i in indices]), strict=True):
            found[i] = span.margin
    return [(row[4], row[2] >= 0, found[i]) for i, row in enumerate(rows)]


def card_update(measured: Sequence[tuple[str, bool, float]]) -> dict[str, Any]:
    """``abstain_margin``, ``abstain_rule`` and ``held_out_at_the_cut`` for the reader's card."""
    from crag_lab.offline.doubt import cut_from

    cut = cut_from([m for _, answerable, m in measured if answerable])
    sources: dict[str, list[float]] = defaultdict(list)
    for source, _, m in measured:
        sources[source].append(m)
    below = {s: {"rows": len(ms), "below_abstain_margin": round(sum(m < cut for m in ms) / len(ms), 4)}
             for s, ms in sources.items()}
    return {"abstain_margin": cut, "abstain_rule": RULE, "held_out_at_the_cut": below}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m crag_lab.learned.doubt_cut", description=__doc__.split("\n\n")[0])
    parser.add_argument("--val", required=True, help="validation examples (train_spans --dump D --written UNANSQ --docs)")
    parser.add_argument("--reader", required=True, help="a trained span reader's folder; its spans.json is updated")
    args = parser.parse_args(argv)
    from crag_lab.learned.fit_spans import read_examples
    from crag_lab.learned.spans import CARD_FILE, SpanReader

    card_file = Path(args.reader) / CARD_FILE
    if not Path(args.val).is_file():
        raise SystemExit(f"doubt_cut: --val {args.val} is not a file; write it with python -m crag_lab.learned.train_spans "
                         "--dump D --written UNANSQ --docs")
    update = card_update(margins(SpanReader.load(args.reader), read_examples(args.val)))
    card = json.loads(card_file.read_text(encoding="utf-8"))
    card_file.write_text(json.dumps({**card, **update}, indent=1) + "\n", encoding="utf-8")
    print(f"{card_file}: abstain_margin {update['abstain_margin']}; below it: "
          + ", ".join(f"{s} {100 * v['below_abstain_margin']:.1f} %" for s, v in update["held_out_at_the_cut"].items()))


if __name__ == "__main__":
    main()
