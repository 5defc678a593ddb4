"""What the learned answer scorer reads, measured on questions it was not trained on.

The scorer (`crag_lab.learned.AnswerScorer`, trained by ``python -m crag_lab.learned.train`` on
SQuAD v1.1 train and package documentation) is compared with what ships today, on the same units:

- **KB splits** (tuning and test; the evidence the default graph hands the synthesizer): the share
  of answerable questions whose top-ranked unit holds the gold answer — the synthesizer's own
  ranking (`synthesizer.ranked`) against the scorer's, and the two combined (`answer_score` plus
  ``w`` times the scorer's probability, for each ``w`` in `WEIGHTS`; pick ``w`` on the tuning split,
  judge it on the test split) — and, per item, AUROC of the grade against
  the gold files (the offline grader's grade against the item's best unit score).
- **SQuAD 2.0 dev** (the shared dev split, read only here): top-1 unit of the paired paragraph,
  MiniLM cosine against the scorer, and answerable vs unanswerable AUROC of the best unit's score;
  abstention at the training data's threshold (``scorer.json``'s ``abstain_below``).
- **HotpotQA dev** (distractor setting): gold vs distractor paragraph AUROC, the offline grader
  against the scorer.

Nothing here changes what ships. ``.venv/bin/python bench/study_scorer.py`` writes
``docs/dev/scorer.md`` and ``.json``; the shared datasets are skipped, saying so, when absent.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from _common import KB, ROOT, SHARED_DATASETS, log, publish
from study_answerability import capture

from crag_lab.eval import load_dataset
from crag_lab.eval.ceiling import answer_rank
from crag_lab.learned import AnswerScorer
from crag_lab.learned.data import unit_text
from crag_lab.learned.router_data import read_jsonl
from crag_lab.offline import synthesizer
from crag_lab.offline.grader import CalibratedGrader
from crag_lab.offline.reading import read
from crag_lab.offline.units import units_of

WEIGHTS = (0.25, 0.5, 1.0)
"""Weights of the scorer's probability added to the synthesizer's own `answer_score` (combined rankings)."""
SPLITS = {"tuning": ROOT / "data" / "kb_queries.jsonl", "test": ROOT / "data" / "kb_queries_test.jsonl"}
OUT = ROOT / "docs" / "dev" / "scorer.md"


def auroc(labels: Sequence[int], scores: Sequence[float]) -> float | None:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels, scores)) if 0 < sum(labels) < len(labels) else None


def _units(item: Mapping[str, Any]) -> list[str]:
    title = str(item.get("title") or "")
    return [unit_text(title, u) for u in units_of(1, str(item.get("text", "")), title or None)]


def _gold_item(item: Mapping[str, Any], gold: Sequence[str]) -> int:
    path = str(item.get("path", ""))
    return int(any(g.split(":L")[0] == path for g in gold))


def kb_split(lab: Any, scorer: AnswerScorer, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    cache = lab.model.vectors
    top1 = {"shipped": 0, "scorer": 0, **{f"combined {w}": 0 for w in WEIGHTS}}
    answerable = 0
    best: list[tuple[int, float]] = []
    items: list[tuple[int, float, float]] = []
    grader = CalibratedGrader(cache)
    for row, ev, seen, _, _ in capture(lab, [r for r in rows if r.get("complexity") != "chitchat"]):
        ranked = synthesizer.ranked(read(row["question"], ev, cache, seen))
        ordered = [u for _, u in ranked]
        keyed = [(unit_text(str(next((e.get("title") or "" for e in ev if int(e.get("n", 0)) == u.unit.n), "")), u.unit), u)
                 for u in ordered]
        scores = scorer.predict([(row["question"], k) for k, _ in keyed]) if keyed else np.zeros(0)
        best.append((int(bool(row.get("answerable"))), float(scores.max()) if len(scores) else 0.0))
        grades = grader.score_items(row["question"], ev)
        for item, grade in zip(ev, grades, strict=True):
            unit_scores = scorer.predict([(row["question"], t) for t in _units(item)])
            items.append((_gold_item(item, row.get("gold") or []), grade,
                          float(unit_scores.max()) if len(unit_scores) else 0.0))
        if not (row.get("answerable") and row.get("answers")):
            continue
        answerable += 1
        texts = [u.unit.text for u in ordered]
        top1["shipped"] += answer_rank(texts[:1], row["answers"]) == 1
        by_scorer = [texts[i] for i in np.argsort(-scores, kind="stable")]
        top1["scorer"] += answer_rank(by_scorer[:1], row["answers"]) == 1
        for w in WEIGHTS:
            combined = np.array([own for own, _ in ranked]) + w * scores
            top1[f"combined {w}"] += answer_rank([texts[int(np.argmax(combined))]], row["answers"]) == 1
    labels = [g for g, _, _ in items]
    return {
        "answerable": answerable,
        "top1": {k: v / answerable for k, v in top1.items()} if answerable else {},
        "answerability_auroc": auroc([a for a, _ in best], [s for _, s in best]),
        "item_auroc": {"offline grader": auroc(labels, [g for _, g, _ in items]),
                       "scorer (best unit)": auroc(labels, [s for _, _, s in items])},
        "items": len(items), "gold_items": sum(labels),
    }



def shared_set(name: str) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]] | None:
    """The passages (by id) and queries of a shared dev set; None, saying so, when it is not there."""
    folder = SHARED_DATASETS / name
    if not folder.is_dir():
        log(f"skipping {name}: {folder} not found")
        return None
    return {d["id"]: d for d in read_jsonl(folder / "corpus.jsonl")}, read_jsonl(folder / "queries.jsonl")


def squad(scorer: AnswerScorer, lab: Any) -> dict[str, Any] | None:
    found = shared_set("squad2_dev250")
    if found is None:
        return None
    corpus, queries = found
    cache = lab.model.vectors
    best, top1 = [], {"cosine": 0, "scorer": 0}
    answerable = 0
    for q in queries:
        doc = corpus[q["paired_doc_id"]]
        units = units_of(1, doc["text"], doc.get("title") or None)
        texts = [u.text for u in units]
        scores = scorer.predict([(q["question"], unit_text(doc.get("title") or "", u)) for u in units])
        best.append((int(q["answerable"]), float(scores.max())))
        if q["answerable"]:
            answerable += 1
            cos = cache.group(texts) @ cache.query(q["question"])
            top1["cosine"] += answer_rank([texts[int(np.argmax(cos))]], q["answers"]) == 1
            top1["scorer"] += answer_rank([texts[int(np.argmax(scores))]], q["answers"]) == 1
    threshold = scorer.card.abstain_below
    unans = [s for a, s in best if not a]
    ans = [s for a, s in best if a]
    return {"questions": len(best), "top1": {k: v / answerable for k, v in top1.items()},
            "answerability_auroc": auroc([a for a, _ in best], [s for _, s in best]), "threshold": threshold,
            "abstention": float(np.mean([s < threshold for s in unans])),
            "false_abstention": float(np.mean([s < threshold for s in ans]))}


def hotpot(scorer: AnswerScorer, lab: Any) -> dict[str, Any] | None:
    found = shared_set("hotpotqa_distractor_dev250")
    if found is None:
        return None
    corpus, queries = found
    grader = CalibratedGrader(lab.model.vectors)
    labels, grades, scores = [], [], []
    for q in queries:
        docs = [corpus[i] for i in q["context_doc_ids"]]
        items = [{"text": d["text"], "title": d.get("title") or ""} for d in docs]
        grades += grader.score_items(q["question"], items)
        for item in items:
            unit_scores = scorer.predict([(q["question"], t) for t in _units(item)])
            scores.append(float(unit_scores.max()) if len(unit_scores) else 0.0)
        labels += [int(d["id"] in q["gold_doc_ids"]) for d in docs]
    return {"paragraphs": len(labels), "auroc": {"offline grader": auroc(labels, grades),
                                                  "scorer (best unit)": auroc(labels, scores)}}


def pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def num(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def markdown(result: Mapping[str, Any]) -> str:
    lines = ["# The learned answer scorer, measured", "",
             "Written by `bench/study_scorer.py` (see its docstring); nothing here changes what ships.", "",
             "| KB split | answerable | top unit holds the answer: shipped ranking | scorer | "
             + " | ".join(f"shipped + {w} x scorer" for w in WEIGHTS) + " | "
             "answerable vs not, AUROC of the best unit | gold item AUROC: offline grader | scorer |",
             "|---|---|---|---|" + "---|" * len(WEIGHTS) + "---|---|---|"]
    for split, r in result["kb"].items():
        combined = " | ".join(pct(r["top1"].get(f"combined {w}")) for w in WEIGHTS)
        lines.append(f"| {split} | {r['answerable']} | {pct(r['top1'].get('shipped'))} | {pct(r['top1'].get('scorer'))} | "
                     f"{combined} | {num(r['answerability_auroc'])} | {num(r['item_auroc']['offline grader'])} | "
                     f"{num(r['item_auroc']['scorer (best unit)'])} |")
    s = result.get("squad")
    if s:
        lines += ["", "| SQuAD 2.0 dev | questions | top unit holds the answer: MiniLM cosine | scorer | "
                  "answerable vs not, AUROC | abstention at the training threshold | false abstention |",
                  "|---|---|---|---|---|---|---|",
                  f"| paired paragraph | {s['questions']} | {pct(s['top1']['cosine'])} | {pct(s['top1']['scorer'])} | "
                  f"{num(s['answerability_auroc'])} | {pct(s['abstention'])} (below {s['threshold']}) | "
                  f"{pct(s['false_abstention'])} |"]
    h = result.get("hotpot")
    if h:
        lines += ["", "| HotpotQA dev (distractor) | paragraphs | gold vs distractor AUROC: offline grader | scorer |",
                  "|---|---|---|---|",
                  f"| 10 per question | {h['paragraphs']} | {num(h['auroc']['offline grader'])} | "
                  f"{num(h['auroc']['scorer (best unit)'])} |"]
    card = result["card"]
    lines += ["", f"Scorer: {card['steps']} steps over {card['pairs']} pairs ({card['sources']}), "
              f"abstention threshold {result['threshold']} set on the training data's held-out unanswerable groups."]
    if result.get("candidate"):
        lines += ["", f"A candidate scorer (`{result['candidate']}`), not the one that ships. The offline grader's "
                  "columns read with it through the shipped calibration, which was fitted on the shipped scorer's "
                  "logits: they are not what a grader refitted on this scorer would give."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--scorer", help="a scorer folder other than the one that ships (a candidate)")
    parser.add_argument("--out", help="where a candidate's report goes (default: docs/dev/scorer.md, the shipped one's)")
    args = parser.parse_args(argv)
    from crag_lab import Lab

    scorer = AnswerScorer.load(args.scorer)
    lab = Lab.from_directory(KB, remote=False)
    kb = {}
    for split, path in SPLITS.items():
        log(f"scorer study: {split}")
        kb[split] = kb_split(lab, scorer, [q.row() for q in load_dataset(path).queries])
    result = {"kb": kb, "squad": squad(scorer, lab), "hotpot": hotpot(scorer, lab),
              "card": {k: scorer.card.trained.get(k) for k in ("steps", "pairs", "sources")},
              "threshold": scorer.card.abstain_below, "candidate": args.scorer}
    publish(ROOT / args.out if args.out else OUT, markdown(result), result, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
