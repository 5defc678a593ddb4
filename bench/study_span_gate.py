"""Is the span reader's gate set on the knowledge base, or does training data agree with it?

The offline synthesizer quotes the unit holding the span reader's best span first (before the rules'
best unit) when that span's margin over "no answer" is at least ``SPAN_FIRST_MARGIN`` (9.0, picked on
the KB tuning split: the lowest of 0, 3, 6, 9 that kept its citation precision). A constant picked on
140 questions may fit them and nothing else, so this study asks the grader's training domains
(``bench/_grader_domains.py``; none is an evaluation set, and neither the span reader nor the answer
scorer trained on them) which gate they would pick:

- ``squad``: held-out SQuAD v1.1 train questions, each against its own paragraph and 7 neighbours;
- ``docs``: templated questions over held-out READMEs, against the answering chunk and 7 neighbours;
- ``multihop``: HotpotQA and MuSiQue **train** questions with their 10 paragraphs.

For every answerable question (one with a gold item) the runtime reads its items (`reading.read`),
ranks units with the rules (`synthesizer.ranked`) and reads each item's best units with the span
reader (`synthesizer.reader_passage`, as `synthesizer.span_first` does). At each gate of `GATES`,
the first quoted unit is the span reader's when its margin reaches the gate and the rules' otherwise;
measured: how often that unit's item is gold (what citation precision counts) and, where the source
gives answer strings, how often the unit holds one. The training domains pick the gate (the best
mean over them of the first measure); the KB tuning split (where 9.0 was picked) and the held-out
sets (the KB test split, HotpotQA dev) are shown beside it, measured only. Nothing here ships.

    .venv/bin/python bench/study_span_gate.py      # writes docs/dev/span_gate.md (+ .json)

Needs ../shared/train (the squad domain) and .cache/multihop (see bench/fit_grader.py); a domain whose
source is absent is skipped, said so. Runs in about five minutes on two cores.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from _common import ROOT, log, publish
from _report_fmt import table

sys.path.insert(0, str(ROOT / "bench"))

import fit_grader

from crag_lab.eval import load_dataset
from crag_lab.eval.metrics import answer_contained
from crag_lab.offline import synthesizer
from crag_lab.offline.reading import read
from crag_lab.offline.vectors import VectorCache

OUT = ROOT / "docs" / "dev" / "span_gate.md"
GATES = (None, -2.0, 0.0, 2.0, 4.0, 6.0, 8.0, 9.0, 10.0, 12.0, float("inf"))
"""Span margins tried as the gate; None quotes the span reader's unit first whenever it has one, inf never."""
TRAINING = ("squad", "docs", "multihop")
ROLES = {"squad": "training", "docs": "training", "multihop": "training", "kb": "KB tuning split (9.0 was picked here)",
         "kb-test": "held out", "hotpotqa": "held out"}


def answers() -> dict[str, list[str]]:
    """Answer strings by group id, from every source that gives them (the docs domain's templates do not)."""
    found: dict[str, list[str]] = {}
    squad = fit_grader.TRAIN / "squad11_train.jsonl.gz"
    if squad.is_file():
        with gzip.open(squad, "rt", encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                found[row["id"]] = row["answers"]
    hotpot, musique = fit_grader.MULTIHOP / "hotpotqa_train.json", fit_grader.MULTIHOP / "musique_train.json"
    for q in json.loads(hotpot.read_text(encoding="utf-8")) if hotpot.is_file() else []:
        found[f"hotpotqa-train/{q['_id']}"] = [q["answer"]]
    for q in json.loads(musique.read_text(encoding="utf-8")) if musique.is_file() else []:
        found[f"musique-train/{q['id']}"] = [q["answer"], *q.get("answer_aliases", [])]
    for path in (fit_grader.KB_QUERIES, fit_grader.KB_TEST, fit_grader.HOTPOT):
        for query in load_dataset(path).queries if path.exists() else []:
            found.setdefault(query.id, list(query.answers))
    return found


def readings(groups: Sequence[Mapping[str, Any]], cache: VectorCache, spans: Any,
             gold_answers: Mapping[str, list[str]]) -> list[dict[str, Any]]:
    """One row per answerable question: the span reader's best margin, and for the rules' best unit and the
    span reader's unit whether its item is gold and whether it holds an answer string (None: no strings)."""
    rows = []
    for k, group in enumerate(groups):
        if not any(group["labels"]):
            continue
        reading = read(group["query"], group["items"], cache)
        ordered = synthesizer.ranked(reading)
        if not ordered:
            continue
        position = {item.n: i for i, item in enumerate(reading.items)}
        rules = ordered[0][1]
        found = spans.read(group["query"], [synthesizer.reader_passage(item) for item in reading.items])
        best = max(range(len(found)), key=lambda i: found[i].margin)
        text = found[best].text
        unit = next((u for u in reading.items[best].units if text.strip() and text in u.unit.text), None)
        strings = gold_answers.get(group["id"]) or []
        rows.append({"domain": group["domain"], "margin": found[best].margin,
                     "rules_gold": bool(group["labels"][position[rules.unit.n]]),
                     "span_gold": None if unit is None else bool(group["labels"][best]),
                     "rules_answer": answer_contained(rules.unit.text, strings) if strings else None,
                     "span_answer": answer_contained(unit.unit.text, strings) if strings and unit else None})
        if k % 250 == 0:
            log(f"{k} of {len(groups)} groups read")
    return rows


def at_gate(rows: Sequence[Mapping[str, Any]], gate: float | None) -> dict[str, Any]:
    """First-quoted unit's item gold rate and answer rate, and how often the span reader's unit goes first."""
    def first(row: Mapping[str, Any], key: str) -> Any:
        fires = row["span_gold"] is not None and (gate is None or row["margin"] >= gate)
        return row[f"span_{key}"] if fires else row[f"rules_{key}"]

    with_strings = [r for r in rows if r["rules_answer"] is not None]
    return {"questions": len(rows),
            "first_item_gold": round(float(np.mean([first(r, "gold") for r in rows])), 4),
            "first_unit_answer": round(float(np.mean([bool(first(r, "answer")) for r in with_strings])), 4)
            if with_strings else None,
            "span_first": round(float(np.mean([r["span_gold"] is not None and (gate is None or r["margin"] >= gate)
                                               for r in rows])), 4)}


def gate_name(gate: float | None) -> str:
    return "any margin" if gate is None else ("never" if gate == float("inf") else f"{gate:g}")


def report(rows: Sequence[Mapping[str, Any]]) -> tuple[str, dict[str, Any]]:
    domains = [d for d in ROLES if any(r["domain"] == d for r in rows)]
    table_ = {d: {gate_name(g): at_gate([r for r in rows if r["domain"] == d], g) for g in GATES} for d in domains}
    training = [d for d in TRAINING if d in table_]
    mean = {gate_name(g): round(float(np.mean([table_[d][gate_name(g)]["first_item_gold"] for d in training])), 4)
            for g in GATES} if training else {}
    pick = gate_name(max(GATES, key=lambda g: (mean[gate_name(g)], GATES.index(g)))) if mean else None
    lines = ["# The span reader's gate, asked of the training domains", "",
             "Written by `bench/study_span_gate.py` (see its docstring). For each answerable question the first quoted "
             "unit is the span reader's when its margin over \"no answer\" reaches the gate, else the rules' best unit. "
             "Cells: share of questions whose first unit's item is gold (what citation precision counts) / share whose "
             "first unit holds an answer string (— where the source gives none) / share where the span reader's unit "
             f"went first. The shipped gate is `SPAN_FIRST_MARGIN` = {synthesizer.SPAN_FIRST_MARGIN:g}.", ""]

    def cell(c: Mapping[str, Any]) -> str:
        answer = "—" if c["first_unit_answer"] is None else f"{c['first_unit_answer']:.1%}"
        return f"{c['first_item_gold']:.1%} / {answer} / {c['span_first']:.0%}"

    lines.append(table(["gate", *(f"{d} ({ROLES[d]}, {table_[d]['never']['questions']} q.)" for d in domains),
                        "mean of the training domains, first item gold"],
                       [[gate_name(g), *(cell(table_[d][gate_name(g)]) for d in domains),
                         f"{mean.get(gate_name(g), float('nan')):.1%}"] for g in GATES]).rstrip("\n"))
    lines += ["", f"The training domains' pick (the best mean, the higher gate on a tie): **{pick}**. The kb and kb-test "
              "columns read the items the knowledge base's two tools return for each question (top 8 each, as the grader's "
              "kb domain), not the pipeline's graded evidence: `docs/dev/reader.md` measures the pipeline (its `any margin` "
              "row)."]
    return "\n".join(lines) + "\n", {"table": table_, "training_mean_first_item_gold": mean, "pick": pick,
                                     "shipped": synthesizer.SPAN_FIRST_MARGIN}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-write", action="store_true", help="print the report; write nothing")
    args = parser.parse_args(argv)
    from crag_lab.learned import AnswerScorer, SpanReader

    cache = VectorCache(store=fit_grader.CACHE / "vectors.sqlite", model_name="sentence-transformers/all-MiniLM-L6-v2")
    groups = fit_grader.domains(cache, AnswerScorer.load().card.trained)
    rows = readings(groups, cache, SpanReader.load(), answers())
    text, result = report(rows)
    publish(OUT, text, result, write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
