"""How well can the offline synthesizer tell an answerable question from an unanswerable one?

A study, not a fit that ships: it decides whether a learned abstention rule is worth having. The
synthesizer abstains when its best unit's support is below ``ABSTAIN_BELOW`` (set on the KB tuning
split), when the question uses a name no evidence item holds (``Reading.ungrounded``), or when it
asks what is not so and no quoted unit negates anything (``Choice.unnegated``); and, for a one-fact
question quoted from prose, when the doubt reader finds no answer (`crag_lab.offline.doubt`). Here
every signal it could use is measured on two domains:

- ``kb``: the KB tuning split (``data/kb_queries.jsonl``; never the frozen test split), whose
  unanswerable questions are about absent topics;
- ``squad``: all 250 questions of SQuAD 2.0 dev (``../shared/datasets/squad2_dev250``), half of
  them unanswerable by construction: written against a paragraph about their subject that lacks
  the answer (a changed entity, a negation, a detail the paragraph does not give).

Each question is asked once through the default graph; the synthesizer's inputs are kept, and for
its chosen unit the features below are computed with the runtime code, with three learned signals: the
answer scorer's best probability over the units it reads (`synthesizer.learned_ranked`), and the span
reader's and the doubt reader's best margin over "no answer" across the evidence items, each read as
the synthesizer reads it (`synthesizer.reader_passage`); ``doubted`` is the doubt check's decision. A
logistic regression over them is fitted at even odds (each domain and class weighted equally) and
scored out of fold (5-fold, stratified by domain and label):
its AUROC per domain, and the abstention / false abstention it would give at a few cut-offs, next to
the current support score alone and each learned signal alone. ``--spans FOLDER`` reads with
another span reader (one trained by ``fit_spans.py``, its ``spans.json`` beside the adapter) and
writes nothing under docs/: it prints the results and writes ``FOLDER/answerability.json``.

    .venv/bin/python bench/study_answerability.py      # writes docs/dev/answerability.md (+ .json)

Skips cleanly (exit 0) when ../shared/datasets is absent. Needs scikit-learn (dev extra).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from crag_lab.offline import doubt, synthesizer  # noqa: E402
from crag_lab.offline.reading import has_term, read, unit_support  # noqa: E402
from crag_lab.offline.text import content_terms  # noqa: E402
from crag_lab.offline.units import expand  # noqa: E402
from crag_lab.offline.vectors import VectorCache  # noqa: E402

SQUAD = ROOT.parent / "shared" / "datasets" / "squad2_dev250"
OUT = ROOT / "docs" / "dev" / "answerability.md"
FEATURES = ("support", "unit_cos", "unit_coverage", "item_cos", "terms_missing_everywhere",
            "terms_missing_in_item", "terms_missing_in_unit", "kind_holds", "no_kind_asked", "name_missing",
            "negation_unanswered", "scorer_best", "span_margin", "doubt_margin", "doubted")
LEARNED = ("scorer_best", "span_margin", "doubt_margin")
"""The learned signals, also reported alone."""
MARGIN_FLOOR = -20.0
"""A span margin below this (or none: an item too short to read) counts as this."""
CUTS = (0.3, 0.4, 0.5, 0.6)
MARGIN_CUTS = (-4.0, -2.0, 0.0)
"""Span margins below which the rules-and-span-reader rule (`summary`'s ``with_spans``) also abstains."""


Captured = tuple[Mapping[str, Any], list[dict[str, Any]], list[dict[str, Any]], str, str | None]


def capture(lab: Any, rows: Sequence[Mapping[str, Any]], mode: str = "knowledge_base") -> list[Captured]:
    """(row, the evidence the synthesizer was given, the items the run's grader dropped that it was given as
    ``seen``, the answer it gave, the router's complexity it was told) for each non-chitchat question that
    reached it, asked in graph ``mode``. A study that answers again from the evidence passes ``seen`` and the
    complexity too, so that it reads what the graph read."""
    box: dict[str, Any] = {}
    original = synthesizer.read_answer

    def spy(query: str, evidence: Sequence[Mapping[str, Any]], cache: VectorCache, *rest: Any,
            **named: Any) -> Any:
        box["evidence"] = [dict(e) for e in evidence]
        box["seen"] = [dict(e) for e in named.get("seen", ())]
        box["complexity"] = named.get("complexity")
        box["answer"] = original(query, evidence, cache, *rest, **named)
        return box["answer"]

    synthesizer.read_answer = spy  # the offline model looks the function up on the module at each call
    out = []
    try:
        for row in rows:
            box.clear()
            lab.ask(row["question"], mode=mode)
            if "evidence" in box and row.get("complexity") != "chitchat":
                out.append((row, box["evidence"], box["seen"], box["answer"].text, box["complexity"]))
    finally:
        synthesizer.read_answer = original
    asked = [r for r in rows if r.get("complexity") != "chitchat"]
    if asked and not out:  # the spy never ran: a study would report empty rows as if measured
        raise SystemExit(f"capture: none of {len(asked)} questions reached synthesizer.read_answer through the spy; "
                         "its signature no longer matches the offline model's call")
    return out


def features(query: str, evidence: Sequence[Mapping[str, Any]], cache: VectorCache,
             seen: Sequence[Mapping[str, Any]] = (), *, scorer: Any, spans: Any, doubter: Any,
             complexity: str | None) -> list[float] | None:
    reading = read(query, evidence, cache, seen)
    choice = synthesizer.choose(reading)
    if not choice.units:
        return None
    best = choice.units[0]
    position = [i.n for i in reading.items].index(best.unit.n)
    item = reading.items[position]
    owns = [expand(content_terms(f"{e.get('text', '')} {e.get('title') or ''}")) for e in evidence]
    terms = reading.terms or ("",)

    def missing(words: Sequence[frozenset[str]]) -> float:
        return sum(not any(has_term(t, w) for w in words) for t in terms) / len(terms)

    kind = 1.0 if best.holds is True else 0.0 if best.holds is False else 0.5
    _, scorer_best = synthesizer.learned_ranked(reading, scorer)
    passages = [synthesizer.reader_passage(i) for i in reading.items]
    margins = [s.margin for s in spans.read(query, passages)]
    doubt_margin = max([MARGIN_FLOOR, *(s.margin for s in doubter.read(query, passages))])
    doubted = doubt.applies(complexity, best.unit.text) and doubt_margin < doubter.card["abstain_margin"]
    return [unit_support(best), best.cos, best.coverage, item.cos, missing(owns), missing([owns[position]]),
            missing([best.unit.terms | best.unit.context]), kind, float(reading.kind is None),
            float(bool(reading.ungrounded)), float(choice.unnegated), scorer_best, max([MARGIN_FLOOR, *margins]),
            doubt_margin, float(doubted)]


def domain_matrix(lab: Any, rows: Sequence[Mapping[str, Any]], spans: Any) -> tuple[np.ndarray, np.ndarray]:
    from crag_lab.learned import AnswerScorer
    from crag_lab.offline import OfflineModel

    model = lab.model
    assert isinstance(model, OfflineModel), "the study reads the offline model's own vectors"
    scorer = AnswerScorer.load()
    x, y = [], []
    for row, evidence, seen, _, complexity in capture(lab, rows):
        f = features(row["question"], evidence, model.vectors, seen, scorer=scorer, spans=spans,
                     doubter=model.doubter, complexity=complexity)
        if f is not None:
            x.append(f)
            y.append(bool(row["answerable"]))
    return np.asarray(x), np.asarray(y)


def even_odds(y: np.ndarray, domain: np.ndarray) -> np.ndarray:
    """Sample weights giving each (domain, label) cell the same total, 1."""
    weight = np.zeros(len(y))
    for d in np.unique(domain):
        for label in (False, True):
            mask = (domain == d) & (y == label)
            weight[mask] = 1.0 / max(mask.sum(), 1)
    return weight


def rules(x: np.ndarray, *, doubt: bool = False) -> np.ndarray:
    """Where the synthesizer abstains on a `FEATURES` matrix: a best unit below ABSTAIN_BELOW, a name of the
    question no evidence holds, or a question about what is not so that no quoted unit negates; with ``doubt``,
    also where the opt-in doubt check does (`crag_lab.offline.doubt`)."""
    out = ((x[:, 0] < synthesizer.ABSTAIN_BELOW) | (x[:, FEATURES.index("name_missing")] > 0)
           | (x[:, FEATURES.index("negation_unanswered")] > 0))
    return out | (x[:, FEATURES.index("doubted")] > 0) if doubt else out


def rates(abstains: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Abstention on the unanswerable questions (``y`` false) and false abstention on the answerable ones."""
    return {"abstention": round(float(abstains[~y].mean()), 3), "false_abstention": round(float(abstains[y].mean()), 3)}


def out_of_fold(x: np.ndarray, y: np.ndarray, domain: np.ndarray) -> np.ndarray:
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    weight = even_odds(y, domain)
    z = (x - x.mean(0)) / (x.std(0) + 1e-9)
    p = np.zeros(len(y))
    strata = np.char.add(domain.astype(str), y.astype(str))
    for train, test in StratifiedKFold(5, shuffle=True, random_state=0).split(z, strata):
        fit = LogisticRegression(C=1.0, max_iter=1000).fit(z[train], y[train], sample_weight=weight[train])
        p[test] = fit.predict_proba(z[test])[:, 1]
    return p


def summary(x: np.ndarray, y: np.ndarray, p: np.ndarray) -> dict[str, Any]:
    from sklearn.metrics import roc_auc_score

    today = rules(x)
    margin = x[:, FEATURES.index("span_margin")]
    return {
        "questions": len(y), "unanswerable": int((~y).sum()),
        "auroc_learned": round(float(roc_auc_score(y, p)), 3),
        "auroc_support": round(float(roc_auc_score(y, x[:, 0])), 3),
        **{f"auroc_{name}": round(float(roc_auc_score(y, x[:, FEATURES.index(name)])), 3) for name in LEARNED},
        "cuts": {str(c): rates(p < c, y) for c in CUTS},
        "current": rates(today, y), "doubt": rates(rules(x, doubt=True), y),
        "with_spans": {str(c): rates(today | (margin < c), y)
                       for c in MARGIN_CUTS},
    }


def markdown(result: Mapping[str, Mapping[str, Any]]) -> str:
    lines = ["# Telling answerable from unanswerable, offline", "",
             "Written by `bench/study_answerability.py` (see its docstring for the method). Out-of-fold AUROC of a",
             "logistic regression over the chosen unit's features (" + ", ".join(f"`{f}`" for f in FEATURES) + "),",
             "fitted at even odds on both domains, against the support score alone and the synthesizer's rules",
             "(support below `ABSTAIN_BELOW`, a name of the question that no evidence holds, or a negated",
             "question whose quote negates nothing), alone and with the opt-in doubt check (`CRAG_OFFLINE_DOUBT=1`,",
             "`crag_lab.offline.doubt`: the doubt reader's best margin below its card's `abstain_margin`, for a",
             "question the router calls simple whose best unit is prose; `doubted`):", "",
             "| domain | questions | unanswerable | AUROC, learned | AUROC, support alone | "
             + " | ".join(f"AUROC, {name} alone" for name in LEARNED)
             + " | today's rules: abstention / false abstention | with the doubt check: abstention / false abstention |",
             "|---|---:|---:|---:|---:|" + "---:|" * len(LEARNED) + "---:|---:|"]
    for dom, r in result.items():
        alone = " | ".join(f"{r[f'auroc_{name}']:.3f}" for name in LEARNED)
        lines.append(f"| {dom} | {r['questions']} | {r['unanswerable']} | {r['auroc_learned']:.3f} | "
                     f"{r['auroc_support']:.3f} | {alone} | {100 * r['current']['abstention']:.1f} % / "
                     f"{100 * r['current']['false_abstention']:.1f} % | {100 * r['doubt']['abstention']:.1f} % / "
                     f"{100 * r['doubt']['false_abstention']:.1f} % |")
    lines += ["", "What the learned rule would give at a few cut-offs (abstain below the cut), out of fold:", "",
              "| cut | " + " | ".join(f"{d}: abstention | {d}: false abstention" for d in result) + " |",
              "|---|" + "---:|---:|" * len(result)]
    for c in CUTS:
        cells = [f"{100 * r['cuts'][str(c)]['abstention']:.1f} % | {100 * r['cuts'][str(c)]['false_abstention']:.1f} %"
                 for r in result.values()]
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    lines += ["", "The rules, also abstaining when the span reader's best margin over the evidence is below a cut:", "",
              "| margin cut | " + " | ".join(f"{d}: abstention | {d}: false abstention" for d in result) + " |",
              "|---|" + "---:|---:|" * len(result)]
    for c in MARGIN_CUTS:
        cells = [f"{100 * r['with_spans'][str(c)]['abstention']:.1f} % | "
                 f"{100 * r['with_spans'][str(c)]['false_abstention']:.1f} %" for r in result.values()]
        lines.append(f"| {c:g} | " + " | ".join(cells) + " |")
    lines += ["", "Reading it: where unanswerable questions are about absent topics (the KB tuning split) the",
              "support score already separates them; where they are written against a paragraph about their",
              "subject (SQuAD 2.0) the rules and the span reader's margin do not: that reader learned from 188",
              "written unanswerable questions, and a cut on its margin that helps SQuAD costs the knowledge base more.",
              "The doubt reader learned from 16,588 (its data card, `crag_lab/_data/doubt/DATA_CARD.md`), and its",
              "margin separates SQuAD's questions best of all the signals here. Its cut is set on its own held-out",
              "training data, and it is read only for a one-fact question quoted from prose, where it learned to",
              "doubt; on a table row, a line of code or a multi-hop question its margin is low for answerable",
              "questions too. It is opt-in: on the KB test split it withholds answers the rules give (docs/dev/doubt.md",
              "has the end-to-end numbers). The logistic regression over everything is not",
              "shipped: it was fitted on these questions. The names check (`name_missing`) is a rule, not a weight:",
              "it catches the unanswerable",
              "questions that name something the evidence does not (a changed entity, year or identifier); so is",
              "the negation check (`negation_unanswered`): a question about what is not so, quoted a unit that",
              "negates nothing.", ""]
    return "\n".join(lines)


def write(out: Path, text: str, result: Mapping[str, Any]) -> None:
    """A study's report (``out``, Markdown) and its numbers beside it (the same name, ``.json``)."""
    out.write_text(text, encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=Path, help="read with this span reader's folder instead of the shipped one")
    args = parser.parse_args(argv)
    if not SQUAD.is_dir():
        print(f"skipping: {SQUAD} not found")
        return 0
    from crag_lab import Lab
    from crag_lab.eval import load_dataset
    from crag_lab.learned import SpanReader

    spans = SpanReader.load(args.spans) if args.spans else SpanReader.load()

    kb_rows = [json.loads(line) for line in (ROOT / "data" / "kb_queries.jsonl").read_text(encoding="utf-8").splitlines()
               if line.strip()]
    squad = load_dataset(SQUAD, limit=None)
    squad_lab = Lab.from_directory(squad.write_kb(ROOT / ".cache" / "eval_kb"), remote=False)
    squad_lab.prepare()
    matrices = {"kb": domain_matrix(Lab.from_directory(ROOT / "data" / "kb", remote=False), kb_rows, spans),
                "squad": domain_matrix(squad_lab, [q.row() for q in squad.queries], spans)}
    x = np.vstack([m[0] for m in matrices.values()])
    y = np.concatenate([m[1] for m in matrices.values()])
    domain = np.concatenate([[d] * len(m[1]) for d, m in matrices.items()])
    p = out_of_fold(x, y, domain)
    result = {d: summary(x[domain == d], y[domain == d], p[domain == d]) for d in matrices}
    if args.spans:
        (args.spans / "answerability.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    else:
        write(OUT, markdown(result), result)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
