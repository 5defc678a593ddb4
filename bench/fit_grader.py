"""Fit the offline grader (crag_lab/offline/grader.py) on two labelled domains, with honest cross-validation.

Label: "this item helps answer the question" — it overlaps a labelled answer location.

- ``kb``: the knowledge base's tuning questions (``data/kb_queries.jsonl``, never the frozen test
  split): for each non-chitchat question, the items ``vector_search`` and ``keyword_search`` return
  (top 8 each); an item is positive when it overlaps a gold line range; every item of an
  unanswerable question is negative.
- ``hotpotqa``: HotpotQA distractor dev (``../shared/datasets``): each question's 10 paragraphs
  as the knowledge base would hold them, the 2 supporting ones positive.

Features come from the runtime code (`crag_lab.offline.reading.features`). A logistic regression is
fitted at *even odds*: within each domain, helpful and unhelpful items carry equal total weight, and
the two domains weigh the same. A grade is thus the probability that the item helps when helpful
and unhelpful items are equally likely a priori — a property of the item, not of how many other
items the retriever happened to return (the base rate of gold items falls as top_k grows; a grade
must not). 5-fold GroupKFold over questions gives out-of-fold probabilities, from which the
per-domain AUROC, calibration error and reliability tables of docs/dev/grader_calibration.md are
computed — no question is ever scored by a model fitted on it.
The final model is fitted on everything and written to ``crag_lab/_data/grader_calibration.json``.

    .venv/bin/python bench/fit_grader.py             # fit, report, write the JSON
    .venv/bin/python bench/fit_grader.py --no-write  # report only

Vectors are kept in ``.cache/grader/vectors.sqlite`` (a `GroupStore`; git-ignored). Needs scikit-learn (dev extra).
Skips cleanly when ../shared/datasets is absent (then the KB domain alone is fitted and reported).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from crag_lab.offline.reading import GRADER_FEATURES, features, read  # noqa: E402
from crag_lab.offline.vectors import VectorCache  # noqa: E402

DATASETS = ROOT.parent / "shared" / "datasets"
HOTPOT = DATASETS / "hotpotqa_distractor_dev250"
KB_QUERIES = ROOT / "data" / "kb_queries.jsonl"
CACHE = ROOT / ".cache" / "grader" / "vectors.sqlite"
OUT = ROOT / "crag_lab" / "_data" / "grader_calibration.json"
PER_TOOL = 8
FOLDS = 5
C = 1.0
CLIP = (0.5, 99.5)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def kb_groups() -> list[dict[str, Any]]:
    """Items retrieved for each tuning question, labelled by gold overlap."""
    from crag_lab.eval.metrics import GoldRef, is_gold
    from crag_lab.kb import KnowledgeBase
    from crag_lab.tools.kb_tools import kb_tools

    kb = KnowledgeBase.build(ROOT / "data" / "kb")
    tools = {t.name: t for t in kb_tools(kb, PER_TOOL)}
    groups = []
    for row in read_jsonl(KB_QUERIES):
        if row["complexity"] == "chitchat":
            continue
        gold = [GoldRef.parse(g) for g in row["gold"]]
        items: dict[tuple[Any, ...], dict[str, Any]] = {}
        for tool in ("vector_search", "keyword_search"):
            for hit in json.loads(tools[tool]({"query": row["question"], "top_k": PER_TOOL})):
                items.setdefault((hit["path"], hit["line"], hit["line_end"]), hit)
        hits = list(items.values())
        labels = [bool(row["answerable"]) and is_gold(h["path"], h["line"], h["line_end"], gold) for h in hits]
        groups.append({"id": row["id"], "query": row["question"], "items": hits, "labels": labels, "domain": "kb"})
    return groups


def hotpot_groups() -> list[dict[str, Any]]:
    """Each HotpotQA question's 10 paragraphs, as the knowledge base would hold them."""
    from crag_lab.eval.datasets import Passage, passage_filename, passage_markdown

    corpus = {p["id"]: p for p in read_jsonl(HOTPOT / "corpus.jsonl")}
    groups = []
    for q in read_jsonl(HOTPOT / "queries.jsonl"):
        gold = set(q["gold_doc_ids"])
        items, labels = [], []
        for doc_id in q["context_doc_ids"]:
            doc = corpus[doc_id]
            text = passage_markdown(Passage(doc_id, doc.get("title", ""), doc["text"]))
            items.append({"text": text, "title": doc.get("title", ""), "path": passage_filename(doc_id)})
            labels.append(doc_id in gold)
        groups.append({"id": q["id"], "query": q["question"], "items": items, "labels": labels, "domain": "hotpotqa"})
    return groups


SCORER_UNITS = 4
"""With ``--with-scorer``: the learned scorer reads this many units of each item, its best by support."""


def scorer_logit(query: str, item: Any, scorer: Any) -> float:
    """The logit of the learned scorer's best probability over the item's `SCORER_UNITS` best-supported units."""
    from crag_lab.offline.reading import unit_key, unit_support

    units = sorted(item.units, key=unit_support, reverse=True)[:SCORER_UNITS]
    if not units:
        return -10.0
    p = float(np.clip(scorer.predict([(query, unit_key(item.title, u.unit)) for u in units]).max(), 1e-4, 1 - 1e-4))
    return float(np.log(p / (1 - p)))


def extract(groups: list[dict[str, Any]], cache: VectorCache,
            scorer: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    xs, ys, gs, ds = [], [], [], []
    for g, group in enumerate(groups):
        reading = read(group["query"], group["items"], cache)
        for item, label in zip(reading.items, group["labels"], strict=True):
            row = features(item, reading.kind)
            xs.append([*row, scorer_logit(group["query"], item, scorer)] if scorer is not None else row)
            ys.append(label)
            gs.append(g)
            ds.append(group["domain"])
    return np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=bool), np.asarray(gs), np.asarray(ds)


def even_odds_weights(y: np.ndarray, domains: np.ndarray) -> np.ndarray:
    """Weights that give each (domain, label) cell the same total: even odds, domains alike."""
    weights = np.ones(len(y))
    cells = [(dom, label) for dom in np.unique(domains) for label in (False, True)]
    for dom, label in cells:
        sel = (domains == dom) & (y == label)
        if sel.any():
            weights[sel] = len(y) / (len(cells) * sel.sum())
    return weights


def fit(x: np.ndarray, y: np.ndarray, domains: np.ndarray) -> dict[str, Any]:
    from sklearn.linear_model import LogisticRegression

    low, high = np.percentile(x, CLIP[0], axis=0), np.percentile(x, CLIP[1], axis=0)
    xc = np.clip(x, low, high)
    mean, scale = xc.mean(axis=0), xc.std(axis=0)
    scale[scale == 0] = 1.0
    lr = LogisticRegression(C=C, max_iter=2000)
    lr.fit((xc - mean) / scale, y, sample_weight=even_odds_weights(y, domains))
    return {"features": list(GRADER_FEATURES), "low": low.tolist(), "high": high.tolist(), "mean": mean.tolist(),
            "scale": scale.tolist(), "coef": lr.coef_[0].tolist(), "intercept": float(lr.intercept_[0])}


def predict(model: dict[str, Any], x: np.ndarray) -> np.ndarray:
    xc = np.clip(x, model["low"], model["high"])
    logit = ((xc - np.asarray(model["mean"])) / np.asarray(model["scale"])) @ np.asarray(model["coef"])
    return np.asarray(1.0 / (1.0 + np.exp(-(logit + model["intercept"]))))


def out_of_fold(x: np.ndarray, y: np.ndarray, groups: np.ndarray, domains: np.ndarray) -> np.ndarray:
    from sklearn.model_selection import GroupKFold

    p = np.zeros(len(y))
    for train, test in GroupKFold(n_splits=FOLDS).split(x, y, groups):
        p[test] = predict(fit(x[train], y[train], domains[train]), x[test])
    return p


def auroc(y: np.ndarray, p: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, p))


def _even(y: np.ndarray) -> np.ndarray:
    """Weights that put one domain's gold and non-gold items at even odds."""
    return np.where(y, len(y) / (2 * max(y.sum(), 1)), len(y) / (2 * max((~y).sum(), 1)))


def ece(y: np.ndarray, p: np.ndarray, bins: int = 10) -> float:
    """Expected calibration error at even odds (the scale grades are fitted to)."""
    w = _even(y)
    idx = np.minimum((p * bins).astype(int), bins - 1)
    return float(sum(abs(np.average(y[idx == b], weights=w[idx == b]) - np.average(p[idx == b], weights=w[idx == b]))
                     * w[idx == b].sum() for b in range(bins) if np.any(idx == b)) / w.sum())


def reliability(y: np.ndarray, p: np.ndarray) -> list[dict[str, Any]]:
    """Rows per score band of the spec's scale: how often items in the band were gold, raw and at even odds."""
    w = _even(y)
    rows = []
    for lo, hi in ((0.0, 0.1), (0.1, 0.3), (0.3, 0.5), (0.5, 0.7), (0.7, 0.9), (0.9, 1.01)):
        sel = (p >= lo) & (p < hi)
        rows.append({"band": f"{lo:.1f}–{min(hi, 1.0):.1f}", "items": int(sel.sum()),
                     "mean_score": round(float(p[sel].mean()), 3) if sel.any() else None,
                     "gold_rate": round(float(y[sel].mean()), 3) if sel.any() else None,
                     "gold_rate_even_odds": round(float(np.average(y[sel], weights=w[sel])), 3) if sel.any() else None})
    return rows


def report(y: np.ndarray, p: np.ndarray) -> dict[str, Any]:
    return {"items": len(y), "gold": int(y.sum()), "auroc": round(auroc(y, p), 3), "ece_even_odds": round(ece(y, p), 3),
            "gold_kept_at_0.3": round(float(np.mean(p[y] >= 0.3)), 3),
            "gold_at_or_above_0.7": round(float(np.mean(p[y] >= 0.7)), 3),
            "non_gold_below_0.3": round(float(np.mean(p[~y] < 0.3)), 3),
            "reliability": reliability(y, p)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-write", action="store_true", help="report only; leave the calibration JSON alone")
    parser.add_argument("--with-scorer", action="store_true",
                        help="a study: add the learned scorer's best-unit logit as an eighth feature, and fit the "
                             "scorer's logit alone; report out-of-fold numbers for all three, write nothing")
    args = parser.parse_args(argv)
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    cache = VectorCache(store=CACHE, model_name="sentence-transformers/all-MiniLM-L6-v2")
    groups = kb_groups()
    if HOTPOT.exists():
        groups += hotpot_groups()
    else:
        print(f"skipping HotpotQA: {HOTPOT} not found (fitting on the KB domain alone)")
    if args.with_scorer:
        return scorer_study(groups, cache)
    x, y, g, d = extract(groups, cache)
    p = out_of_fold(x, y, g, d)
    cv = {dom: report(y[d == dom], p[d == dom]) for dom in np.unique(d).tolist()}
    cv["pooled"] = report(y, p)
    model = fit(x, y, d)
    in_sample = {dom: round(auroc(y[d == dom], predict(model, x[d == dom])), 3) for dom in np.unique(d).tolist()}
    for dom, r in cv.items():
        print(f"{dom:9s} items {r['items']:5d} gold {r['gold']:4d}  out-of-fold AUROC {r['auroc']:.3f}  "
              f"ECE {r['ece_even_odds']:.3f}  gold kept at 0.3 {r['gold_kept_at_0.3']:.0%}  gold >= 0.7 "
              f"{r['gold_at_or_above_0.7']:.0%}  non-gold < 0.3 {r['non_gold_below_0.3']:.0%}")
        for row in r["reliability"]:
            print(f"    {row['band']:>9s}  items {row['items']:5d}  mean score {row['mean_score']}  gold "
                  f"{row['gold_rate']}  gold at even odds {row['gold_rate_even_odds']}")
    print("in-sample AUROC:", in_sample)
    print("coefficients:", dict(zip(GRADER_FEATURES, np.round(model["coef"], 3).tolist(), strict=True)))
    if not args.no_write:
        data = {
            "description": "Offline relevance grader: logistic regression on crag_lab.offline.reading features, "
                           "label 'the item overlaps a labelled answer location', fitted at even odds (gold and non-gold items "
                           "weighted equally within each domain) on the KB tuning questions' "
                           "retrieved items and HotpotQA distractor paragraphs (domains weighted equally). "
                           "Written by bench/fit_grader.py.",
            "fitted": dt.date.today().isoformat(),
            "model": model,
            "cross_validation": {"folds": FOLDS, "grouped_by": "question", **cv},
            "in_sample_auroc": in_sample,
        }
        OUT.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


def scorer_study(groups: list[dict[str, Any]], cache: VectorCache) -> int:
    """Out of fold, per domain: the shipped features, the shipped features + the scorer's logit, the logit alone."""
    from crag_lab.learned import AnswerScorer

    x, y, g, d = extract(groups, cache, AnswerScorer.load())
    variants = {"offline features (what ships)": x[:, :-1], "offline features + scorer": x, "scorer alone": x[:, -1:]}
    print("| grader | domain | items | gold | AUROC | ECE (even odds) | gold kept at 0.3 | gold >= 0.7 | non-gold < 0.3 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, cols in variants.items():
        p = out_of_fold(cols, y, g, d)
        for dom in [*np.unique(d).tolist(), "pooled"]:
            sel = np.ones(len(y), bool) if dom == "pooled" else d == dom
            r = report(y[sel], p[sel])
            print(f"| {name} | {dom} | {r['items']:,} | {r['gold']} | {r['auroc']:.3f} | {r['ece_even_odds']:.3f} | "
                  f"{r['gold_kept_at_0.3']:.0%} | {r['gold_at_or_above_0.7']:.0%} | {r['non_gold_below_0.3']:.0%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
