"""The offline reader, measured rule by rule: the rules, the learned scorer, and an ablation row for each
hand-written rule that stays.

The reader is the synthesizer's choice of what to quote and when to abstain
(`crag_lab.offline.synthesizer`). Every variant reads the *same evidence*: for the KB splits, what the
default graph handed the synthesizer (captured once per question, `study_answerability.capture`); for
HotpotQA dev (distractor), each question's ten paragraphs; for SQuAD 2.0 dev, the question's own
paragraph. So a row differs from another only in how it reads.

Variants:

- ``rules``: what ships (`synthesizer.respond` with the span reader: the rules decide when to
  abstain and pick what to quote; the unit holding the span reader's best span over all the evidence
  is quoted first when its margin is at least `synthesizer.SPAN_FIRST_MARGIN`, `synthesizer.span_first`;
  the span reader's answer in the first quote opens the answer in bold, `synthesizer.span_lead`).
  The span reader reads each item's `synthesizer.READ_UNITS` best units (`synthesizer.reader_passage`).
- ``span reader's unit first at any margin``: whatever its margin; ``span reader reading whole
  items``: every unit of each item instead of the best few.
- ``learned (rules abstain)``: the learned reader (``CRAG_OFFLINE_READER=learned``): the scorer
  re-orders the top `LEARNED_TOP_K` units, the rules' support decides when to abstain.
- ``learned (scorer abstains)``: the same ranking; the scorer's own threshold (set on its training
  data) decides when to abstain.
- ``rules − X``: what ships without one hand-written rule or learned part: answer kinds (the kind
  bonus and penalty and the finer shape), the finer shape alone (`synthesizer.SHAPE_WEIGHT`: a version
  for "which version", a command with arguments for "which command"), table labels (the label bonus),
  the FAQ-question penalty (`reading.QUESTION_PENALTY`, in the ranking and the support), the item's
  meaning (`synthesizer.ITEM_WEIGHT`: the item's cosine in a unit's score), same-item runners-up (further
  units of the best unit's item, `synthesizer.SAME_ITEM_UNITS`), a quote per part (the best unit for
  each further part of a multi-part question), a comparison's other side (`synthesizer.parallel_fact`),
  trimmed quotes (a wide labelled row cut to its answering pairs, a long unit to its clause:
  `synthesizer.shortest_span`), the names check (a name of
  the question no evidence holds), the negation check (`synthesizer.answers_the_negation`), the span
  reader's unit first (``CRAG_OFFLINE_SPAN_FIRST=0``), the span reader altogether (the rules' lead
  alone: ``CRAG_OFFLINE_LEAD=rules``), the rules' lead (only the span reader's lead; none where it
  finds none in the first quote).
- ``rules + doubt check``: what ships with the opt-in doubt check (``CRAG_OFFLINE_DOUBT=1``,
  `crag_lab.offline.doubt`): it also abstains when the doubt reader finds no answer to a question the
  router calls simple whose best unit is prose; and the same without each of its two gates (read for a
  question of any route, or for a best unit of any form). It reads the complexity the router gave
  (captured with the KB evidence; for the public sets the offline model's router is asked).

Metrics as `crag-lab eval` defines them (`crag_lab.eval.metrics`): containment, exact match and token
F1 on answerable questions (an abstention contains nothing), citation precision over cited items,
abstention on unanswerable and false abstention on answerable questions.

``.venv/bin/python bench/study_reader.py`` writes ``docs/dev/reader.md`` and ``.json``; the shared
datasets are skipped, saying so, when absent. Nothing here changes what ships.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _common import KB, ROOT, SCRATCH, log, publish
from study_answerability import capture
from study_scorer import shared_set

from crag_lab.eval import load_dataset
from crag_lab.eval import metrics as m
from crag_lab.learned.spans import DOUBT_DIR
from crag_lab.offline import doubt, reading, synthesizer
from crag_lab.offline.vectors import VectorCache

SPLITS = {"KB tuning": ROOT / "data" / "kb_queries.jsonl", "KB test": ROOT / "data" / "kb_queries_test.jsonl"}
OUT = ROOT / "docs" / "dev" / "reader.md"
CAPTURED = SCRATCH / "reader_evidence.json"
HOTPOT_LIMIT = 100
SQUAD_LIMIT = 250
_MARK = re.compile(r"\[(\d+)\]")


@contextlib.contextmanager
def patched(target: Any, **values: Any) -> Iterator[None]:
    old = {k: getattr(target, k) for k in values}
    for k, v in values.items():
        setattr(target, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(target, k, v)


def _no_names(read: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        from dataclasses import replace

        return replace(read(*args, **kwargs), ungrounded=())
    return wrapped


Variant = tuple[Callable[[], contextlib.AbstractContextManager[Any]], Any, Any, bool, Any]


def variants(scorer: Any, spans: Any, doubter: Any) -> dict[str, Variant]:
    """Name -> (a context in which `synthesizer.respond` reads that way, its scorer, its span reader,
    whether the span reader's unit is quoted first, its doubt reader)."""
    s, d = synthesizer, doubter
    return {
        "rules": (lambda: patched(s), None, spans, True, None),
        "span reader's unit first at any margin": (lambda: patched(s, SPAN_FIRST_MARGIN=float("-inf")), None, spans, True, None),
        "span reader reading whole items": (lambda: patched(s, READ_UNITS=10**6), None, spans, True, None),
        "learned (rules abstain)": (lambda: patched(s, LEARNED_ABSTAINS_BY="rules"), scorer, spans, True, None),
        "learned (scorer abstains)": (lambda: patched(s, LEARNED_ABSTAINS_BY="scorer"), scorer, spans, True, None),
        "rules + doubt check (CRAG_OFFLINE_DOUBT=1)": (lambda: patched(s), None, spans, True, d),
        "rules + doubt check, read for any route": (lambda: patched(doubt, applies=lambda c, t: doubt.prose(t)),
                                                    None, spans, True, d),
        "rules + doubt check, read for any unit": (lambda: patched(doubt, applies=lambda c, t: c == "simple"),
                                                   None, spans, True, d),
        "rules − answer kinds": (lambda: patched(s, KIND_BONUS=0.0, KIND_PENALTY=0.0, SHAPE_WEIGHT=0.0), None, spans, True, None),
        "rules − finer shape": (lambda: patched(s, SHAPE_WEIGHT=0.0), None, spans, True, None),
        "rules − table labels": (lambda: patched(s, LABEL_BONUS=0.0), None, spans, True, None),
        "rules − FAQ-question penalty": (lambda: patched(reading, QUESTION_PENALTY=0.0), None, spans, True, None),
        "rules − the item's meaning": (lambda: patched(s, ITEM_WEIGHT=0.0), None, spans, True, None),
        "rules − same-item runners-up": (lambda: patched(s, SAME_ITEM_UNITS=0), None, spans, True, None),
        "rules − a quote per part": (lambda: patched(s, _best_for_part=lambda *a: None), None, spans, True, None),
        "rules − a comparison's other side": (lambda: patched(s, parallel_fact=lambda *a: None), None, spans, True, None),
        "rules − trimmed quotes": (lambda: patched(s, shortest_span=lambda unit, *a: unit.unit.text.strip()),
                                   None, spans, True, None),
        "rules − names check": (lambda: patched(s, read=_no_names(reading.read)), None, spans, True, None),
        "rules − negation check": (lambda: patched(s, answers_the_negation=lambda *a: True), None, spans, True, None),
        "rules − span reader's unit first (CRAG_OFFLINE_SPAN_FIRST=0)": (lambda: patched(s), None, spans, False, None),
        "rules − span reader": (lambda: patched(s), None, None, False, None),
        "rules − the rules' lead": (lambda: patched(s, short_answer=lambda *a: None), None, spans, True, None),
    }


def _lines(path: str, text: str, cache: dict[str, list[str]], kb: Path = KB) -> tuple[int | None, int | None]:
    """Where ``text`` (whole lines of ``path``) sits in the knowledge base ``kb``'s file, or (None, None)."""
    if path not in cache:
        file = kb / path
        cache[path] = file.read_text(encoding="utf-8").split("\n") if file.is_file() else []
    lines, want = cache[path], text.split("\n")
    for i in range(len(lines) - len(want) + 1):
        if lines[i] == want[0] and lines[i:i + len(want)] == want:
            return i + 1, i + len(want)
    return None, None


def kb_cases(lab: Any) -> dict[str, list[dict[str, Any]]]:
    """Per KB split: question, answers, answerable, gold locations and the captured evidence with its lines."""
    if CAPTURED.is_file():
        return json.loads(CAPTURED.read_text(encoding="utf-8"))
    files: dict[str, list[str]] = {}
    out: dict[str, list[dict[str, Any]]] = {}
    for split, path in SPLITS.items():
        log(f"reader study: capturing {split}")
        queries = {q.id: q for q in load_dataset(path).queries}
        rows = [q.row() for q in queries.values() if q.complexity != "chitchat"]
        cases = []
        for row, evidence, seen, _, complexity in capture(lab, rows):
            q = queries[row["id"]]
            for item in evidence:
                item["line"], item["line_end"] = _lines(str(item.get("path", "")), str(item["text"]), files)
            cases.append({"question": q.question, "answers": list(q.answers), "answerable": q.answerable,
                          "gold": [[g.path, g.start, g.end] for g in q.gold], "evidence": evidence, "seen": seen,
                          "complexity": complexity})
        out[split] = cases
    CAPTURED.parent.mkdir(parents=True, exist_ok=True)
    CAPTURED.write_text(json.dumps(out), encoding="utf-8")
    return out


def score(cases: Sequence[Mapping[str, Any]], answer: Callable[[Mapping[str, Any]], str]) -> dict[str, Any]:
    contained, em, f1, precision, abst_u, abst_a = [], [], [], [], [], []
    for case in cases:
        text = answer(case)
        abstained = m.is_abstention(text)
        by_n = {int(e.get("n", i + 1)): e for i, e in enumerate(case["evidence"])}
        cited = [by_n[int(n)] for n in dict.fromkeys(_MARK.findall(text)) if int(n) in by_n]
        if case["gold"] and cited:
            gold = [m.GoldRef(p, s, e) for p, s, e in case["gold"]]
            precision.append(np.mean([m.is_gold(c.get("path"), c.get("line"), c.get("line_end"), gold) for c in cited]))
        if case["answerable"]:
            abst_a.append(abstained)
            contained.append(bool(m.answer_contained(text, case["answers"])))
            em.append(bool(m.exact_match(text, case["answers"])))
            f1.append(m.token_f1(text, case["answers"]) or 0.0)
        else:
            abst_u.append(abstained)

    def mean(xs: Sequence[Any]) -> float | None:
        return float(np.mean(xs)) if len(xs) else None

    return {"questions": len(cases), "containment": mean(contained), "exact_match": mean(em), "token_f1": mean(f1),
            "citation_precision": mean(precision), "abstention": mean(abst_u), "false_abstention": mean(abst_a)}


def public_cases(model: Any) -> dict[str, list[dict[str, Any]]]:
    """HotpotQA dev (distractor): each question's ten paragraphs; SQuAD 2.0 dev: its own paragraph. Each with the
    complexity ``model`` (the offline model) routes it as, which the doubt check reads."""
    out: dict[str, list[dict[str, Any]]] = {}

    def routed(question: str) -> str | None:
        plan = json.loads(model.complete("analyze", "", {"query": question, "available_tools": []}).text)
        return plan.get("complexity")  # type: ignore[no-any-return]

    def items(corpus: Mapping[str, Mapping[str, Any]], ids: Sequence[str]) -> list[dict[str, Any]]:
        return [{"n": i + 1, "text": corpus[d]["text"], "title": corpus[d].get("title") or "", "path": d}
                for i, d in enumerate(ids)]

    found = shared_set("hotpotqa_distractor_dev250")
    if found is not None:
        corpus, queries = found
        out["HotpotQA"] = [{"question": q["question"], "answers": q["answers"], "answerable": True,
                            "gold": [[d, None, None] for d in q["gold_doc_ids"]],
                            "evidence": items(corpus, q["context_doc_ids"]), "complexity": routed(q["question"])}
                           for q in queries[:HOTPOT_LIMIT]]
    found = shared_set("squad2_dev250")
    if found is not None:
        corpus, queries = found
        out["SQuAD 2.0"] = [{"question": q["question"], "answers": q["answers"], "answerable": bool(q["answerable"]),
                             "gold": [[q["paired_doc_id"], None, None]] if q["answerable"] else [],
                             "evidence": items(corpus, [q["paired_doc_id"]]), "complexity": routed(q["question"])}
                            for q in queries[:SQUAD_LIMIT]]
    return out


def pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def markdown(result: Mapping[str, Any]) -> str:
    sets = list(next(iter(result["rows"].values())))
    head = ["# The offline reader, rule by rule", "",
            "Written by `bench/study_reader.py` (see its docstring): every row reads the same evidence; "
            "percentages. KB: containment / citation precision / abstention on unanswerable / false abstention. "
            "HotpotQA: containment / exact match / token F1 (×100) / citation precision (gold paragraphs). "
            "SQuAD 2.0: containment / abstention / false abstention.", ""]
    cols = []
    for name in sets:
        cols.append(f"{name} ({result['sizes'][name]} q.)")
    lines = [*head, "| reader | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for variant, per_set in result["rows"].items():
        cells = []
        for name in sets:
            r = per_set[name]
            if name.startswith("KB"):
                cells.append(" / ".join(pct(r[k]) for k in ("containment", "citation_precision", "abstention",
                                                            "false_abstention")))
            elif name == "HotpotQA":
                cells.append(" / ".join(pct(r[k]) for k in ("containment", "exact_match", "token_f1",
                                                            "citation_precision")))
            else:
                cells.append(" / ".join(pct(r[k]) for k in ("containment", "abstention", "false_abstention")))
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    lines += ["", "The answer's short form (its bold lead when it has one, else the whole answer; as `crag-lab eval` "
              "scores it): exact match / token F1 on answerable questions, ×100.", "",
              "| reader | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for variant, per_set in result["rows"].items():
        lines.append(f"| {variant} | " + " | ".join(" / ".join(pct(per_set[n][k]) for k in ("exact_match", "token_f1"))
                                                     for n in sets) + " |")
    base = result["rows"].get("rules", {})
    ablations = [v for v in result["rows"] if v.startswith("rules −")]
    if ablations and base:
        checks = [(name, key, label) for name in sets for key, label in (
            ("containment", "containment"), ("token_f1", "F1"), ("citation_precision", "citation precision"),
            ("abstention", "abstention"), ("false_abstention", "false abstention")) if base[name].get(key) is not None
            and not (name == "HotpotQA" and "abstention" in key)
            and not (name == "SQuAD 2.0" and key == "citation_precision")]
        lines += ["", "What removing each rule changes, in points against `rules` (for false abstention, a rise "
                  "is worse); a rule earns its place when removing it costs at least one question on the KB test "
                  "split or a public set (the tuning split, where the rules were written, does not count), and "
                  "what removing it would gain there is named beside it:", "",
                  "| removed | " + " | ".join(f"{n}: {lab}" for n, _, lab in checks) + " | earns its place |",
                  "|---|" + "---|" * (len(checks) + 1)]
        for variant in ablations:
            deltas, costs, gains = [], [], []
            for name, key, label in checks:
                before, after = base[name][key], result["rows"][variant][name][key]
                d = 100 * (after - before)
                deltas.append(f"{d:+.1f}")
                worse = d >= 0.95 if key == "false_abstention" else d <= -0.95
                better = d <= -0.95 if key == "false_abstention" else d >= 0.95
                if worse and name != "KB tuning":
                    costs.append(f"{name} {label}")
                if better and name != "KB tuning":
                    gains.append(f"{name} {label}")
            verdict = ("yes: " + ", ".join(costs) if costs else "**no**") + (
                f" (removing it gains {', '.join(gains)})" if gains else "")
            lines.append(f"| {variant.removeprefix('rules − ')} | " + " | ".join(deltas) + f" | {verdict} |")
    lines += ["", f"Learned reader: the scorer reads the top {result['top_k']} units of the rules' ranking and adds "
              f"{result['weight']} × its probability; its own abstention threshold is {result['threshold']} "
              "(set on its training data's held-out unanswerable groups). Span reader: it reads each item's "
              f"{result.get('read_units', synthesizer.READ_UNITS)} best units; the unit of its best span over all the "
              "evidence is quoted first when that span's margin over no answer is at least "
              f"{result.get('span_first_margin', synthesizer.SPAN_FIRST_MARGIN)} (the tuning split's pick), and its "
              "span inside the first quote is the bold lead. "
              "The `rules −` rows remove one rule from what ships; the `rules + doubt check` rows add the opt-in doubt "
              "check (`crag_lab.offline.doubt`), and the same without each of its two gates. SQuAD 2.0's evidence here "
              "is the question's own paragraph alone, where the graph hands the synthesizer several (docs/dev/doubt.md)."]
    if result.get("candidate"):
        lines += ["", f"The learned rows read a candidate scorer (`{result['candidate']}`), not the one that ships."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--scorer", help="a scorer folder other than the one that ships (a candidate): the learned rows read it")
    parser.add_argument("--out", help="where a candidate's report goes (default: docs/dev/reader.md)")
    parser.add_argument("--only", action="append", default=[], help="measure only this variant (repeatable)")
    args = parser.parse_args(argv)
    from crag_lab import Lab
    from crag_lab.learned import AnswerScorer, SpanReader

    scorer = AnswerScorer.load(args.scorer)
    spans = SpanReader.load()
    doubter = SpanReader.load(DOUBT_DIR)
    lab = Lab.from_directory(KB, remote=False)
    sets = {**kb_cases(lab), **public_cases(lab.model)}
    cache = VectorCache()
    rows: dict[str, dict[str, Any]] = {}
    for variant, (context, reader, lead, first, doubts) in variants(scorer, spans, doubter).items():
        if args.only and variant not in args.only:
            continue
        log(f"reader study: {variant}")
        with context():
            rows[variant] = {name: score(cases, lambda c, r=reader, sp=lead, f=first, dr=doubts: synthesizer.respond(
                c["question"], c["evidence"], cache, r, sp, f, c.get("seen", []), dr, c.get("complexity"))[0])
                for name, cases in sets.items()}
    result = {"rows": rows, "sizes": {k: len(v) for k, v in sets.items()}, "top_k": synthesizer.LEARNED_TOP_K,
              "weight": synthesizer.LEARNED_WEIGHT, "threshold": scorer.card.abstain_below,
              "span_first_margin": synthesizer.SPAN_FIRST_MARGIN, "read_units": synthesizer.READ_UNITS,
              "candidate": args.scorer}
    publish(ROOT / args.out if args.out else OUT, markdown(result), result, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
