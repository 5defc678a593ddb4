"""Fit the offline grader (crag_lab/offline/grader.py) on three training domains; measure it on two held-out ones.

Label: "this item helps answer the question" — it overlaps a labelled answer location. The domains
and how their items are drawn are in ``bench/_grader_domains.py``:

- fitted: ``kb`` (the knowledge base's tuning questions, never the frozen test split), ``squad``
  (SQuAD v1.1 train articles the answer scorer held out, with unanswerable questions), ``docs``
  (READMEs the answer scorer held out, templated questions) and ``multihop`` (HotpotQA and MuSiQue
  **train** questions with their paragraphs, `MULTIHOP`; see below) — training sources only;
- measured, never fitted: ``kb-test`` (the frozen test split) and ``hotpotqa`` (HotpotQA distractor
  dev, ``../shared/datasets``).

Features are the runtime's (`crag_lab.offline.reading.features`, and the answer scorer's best-unit
logit, `crag_lab.offline.grader.scorer_logits`). A logistic regression is fitted at *even odds*:
within each domain, helpful and unhelpful items carry equal total weight, and the domains weigh the
same — a grade is the probability that the item helps when helpful and unhelpful items are equally
likely a priori, a property of the item, not of how many other items the retriever returned
(`DOMAIN_WEIGHTS`: the knowledge base's questions count double).
5-fold GroupKFold over questions gives out-of-fold numbers on the fitted domains; the model fitted on
all of them is measured on the held-out domains. Every number written is out of fold or held out.

    .venv/bin/python bench/fit_grader.py             # fit, report, write the JSON and docs/dev/grader_fit.md
    .venv/bin/python bench/fit_grader.py --no-write  # report only

The multihop files are ``data/hotpotqa_train.json`` and ``data/musique_train.json`` of
github.com/OSU-NLP-Group/HippoRAG, branch ``legacy`` (commit b144c46; sha256 6c0e2689… and bca67474…),
100 questions each, copied into ``.cache/multihop/`` (``git show b144c46:data/hotpotqa_train.json``).

Vectors are kept in ``.cache/grader/vectors.sqlite`` and scorer probabilities in
``.cache/grader/scorer-<its fingerprint>.sqlite`` (git-ignored). Needs scikit-learn (dev extra) and ../shared/train
(the SQuAD domain); the docs domain reads the READMEs installed in .venv and .venv-phoenix. A domain
whose source is absent is skipped with a line saying so.
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
sys.path.insert(0, str(ROOT / "bench"))

from _grader_domains import CachedScorer, docs_groups, hotpot_groups, kb_groups, multihop_groups, squad_groups  # noqa: E402

from crag_lab.offline.grader import BRIDGE_FEATURE, SCORER_FEATURE, bridge_scores, scorer_logits  # noqa: E402
from crag_lab.offline.reading import GRADER_FEATURES, features, read  # noqa: E402
from crag_lab.offline.vectors import VectorCache  # noqa: E402

TRAIN = ROOT.parent / "shared" / "train"
HOTPOT = ROOT.parent / "shared" / "datasets" / "hotpotqa_distractor_dev250"
KB_QUERIES = ROOT / "data" / "kb_queries.jsonl"
KB_TEST = ROOT / "data" / "kb_queries_test.jsonl"
CACHE = ROOT / ".cache" / "grader"
SITES = [str(p) for p in (ROOT / ".venv-phoenix" / "lib").glob("python3*/site-packages")]
OUT = ROOT / "crag_lab" / "_data" / "grader_calibration.json"
REPORT = ROOT / "docs" / "dev" / "grader_fit.md"
MULTIHOP = ROOT / ".cache" / "multihop"
"""Default folder of the multi-hop training files (`_grader_domains.multihop_groups`; docs/dev/grader_fit.md says
where they come from)."""
FITTED = ("kb", "squad", "docs", "multihop")
HELD_OUT = ("kb-test", "hotpotqa")
FOLDS = 5
C = 1.0
CLIP = (0.5, 99.5)
DOMAIN_WEIGHTS = {"kb": 2.0}
"""Each domain's share of the fit (even odds within it), relative to 1 for the others. The knowledge base's
own questions count double: the product answers questions about engineering documents, and out of fold on
the fitted domains double weight calibrates the kb domain best of 1, 1.5, 2 and 3 (ECE 0.093, 0.070, 0.067,
0.073) at no cost in AUROC; docs/dev/grader_calibration.md shows the equal-weight fit beside it."""
SQUAD_QUESTIONS = 360
DOCS_PER_README = 10
BOOTSTRAP = 1000
"""Resamples of each domain's questions behind the shipped grader's intervals (`intervals`)."""
SHIPS = "offline features + scorer + bridge (ships)"


def domains(cache: VectorCache, trained: dict[str, Any], multihop: Path | None = MULTIHOP) -> list[dict[str, Any]]:
    """Every labelled group, fitted domains first; a domain whose source is absent is skipped, said so.
    ``trained`` is the answer scorer's card (its seed and held-out documents pick the held-out sources)."""
    groups = kb_groups(ROOT, KB_QUERIES, "kb")
    if TRAIN.exists():
        groups += squad_groups(TRAIN, cache, seed=int(trained["seed"]), questions=SQUAD_QUESTIONS)
    else:
        print(f"skipping squad: {TRAIN} not found")
    groups += docs_groups(cache, names=trained["held_out_documents"], sites=SITES, seed=int(trained["seed"]),
                          per_doc=DOCS_PER_README)
    if multihop is not None and multihop.is_dir():
        groups += multihop_groups(multihop, cache)
    elif multihop is not None:
        print(f"skipping multihop: {multihop} not found")
    groups += kb_groups(ROOT, KB_TEST, "kb-test")
    if HOTPOT.exists():
        groups += hotpot_groups(HOTPOT)
    else:
        print(f"skipping hotpotqa: {HOTPOT} not found")
    return groups


def extract(groups: list[dict[str, Any]], cache: VectorCache,
            scorer: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Feature rows (the runtime's seven, the scorer's logit, the bridge), labels, question keys and domains."""
    xs, ys, qs, ds = [], [], [], []
    for group in groups:
        reading = read(group["query"], group["items"], cache)
        logits, bridges = scorer_logits(reading, scorer), bridge_scores(reading)
        for item, label, logit, bridge in zip(reading.items, group["labels"], logits, bridges, strict=True):
            xs.append([*features(item, reading.kind), float(logit), float(bridge)])
            ys.append(label)
            qs.append(f"{group['domain']}/{group['query']}")  # one question's groups share a fold
            ds.append(group["domain"])
    return np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=bool), np.asarray(qs), np.asarray(ds)


def even_odds_weights(y: np.ndarray, domains: np.ndarray, domain_weights: dict[str, float] | None = None) -> np.ndarray:
    """Weights that give each (domain, label) cell the same total (even odds), times its domain's weight."""
    weights = np.ones(len(y))
    cells = [(dom, label) for dom in np.unique(domains) for label in (False, True)]
    for dom, label in cells:
        sel = (domains == dom) & (y == label)
        if sel.any():
            weights[sel] = len(y) / (len(cells) * sel.sum()) * (domain_weights or {}).get(str(dom), 1.0)
    return weights


def fit(x: np.ndarray, y: np.ndarray, domains: np.ndarray, domain_weights: dict[str, float] | None = None) -> dict[str, Any]:
    from sklearn.linear_model import LogisticRegression

    low, high = np.percentile(x, CLIP[0], axis=0), np.percentile(x, CLIP[1], axis=0)
    xc = np.clip(x, low, high)
    mean, scale = xc.mean(axis=0), xc.std(axis=0)
    scale[scale == 0] = 1.0
    lr = LogisticRegression(C=C, max_iter=2000)
    lr.fit((xc - mean) / scale, y, sample_weight=even_odds_weights(
        y, domains, DOMAIN_WEIGHTS if domain_weights is None else domain_weights))
    return {"features": COLUMNS[:x.shape[1]], "low": low.tolist(), "high": high.tolist(), "mean": mean.tolist(),
            "scale": scale.tolist(), "coef": lr.coef_[0].tolist(), "intercept": float(lr.intercept_[0])}


def predict(model: dict[str, Any], x: np.ndarray) -> np.ndarray:
    xc = np.clip(x, model["low"], model["high"])
    logit = ((xc - np.asarray(model["mean"])) / np.asarray(model["scale"])) @ np.asarray(model["coef"])
    return np.asarray(1.0 / (1.0 + np.exp(-(logit + model["intercept"]))))


def out_of_fold(x: np.ndarray, y: np.ndarray, groups: np.ndarray, domains: np.ndarray,
                domain_weights: dict[str, float] | None = None) -> np.ndarray:
    from sklearn.model_selection import GroupKFold

    p = np.zeros(len(y))
    for train, test in GroupKFold(n_splits=FOLDS).split(x, y, groups):
        p[test] = predict(fit(x[train], y[train], domains[train], domain_weights), x[test])
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
    """AUROC, ECE at even odds, accuracy at 0.5 raw and at even odds (the CRAG paper's evaluator accuracy is
    the raw kind, on its own mix), and the share of gold and non-gold items on each side of the thresholds."""
    right = (p >= 0.5) == y
    return {"items": len(y), "gold": int(y.sum()), "auroc": round(auroc(y, p), 3), "ece_even_odds": round(ece(y, p), 3),
            "accuracy": round(float(right.mean()), 3),
            "accuracy_even_odds": round(float(np.average(right, weights=_even(y))), 3),
            "gold_kept_at_0.3": round(float(np.mean(p[y] >= 0.3)), 3),
            "gold_at_or_above_0.7": round(float(np.mean(p[y] >= 0.7)), 3),
            "non_gold_below_0.3": round(float(np.mean(p[~y] < 0.3)), 3),
            "reliability": reliability(y, p)}


def intervals(y: np.ndarray, p: np.ndarray, q: np.ndarray, draws: int = BOOTSTRAP, seed: int = 0) -> dict[str, Any]:
    """How sure one domain's AUROC and ECE are: 95 % intervals over ``draws`` resamples of its questions (all
    of a question's items together), and the ECE a perfectly calibrated grader would still show on this many
    items (``ece_floor``: labels drawn from the scores themselves, mapped from even odds to the domain's own
    mix of gold and non-gold, averaged over the same number of draws) and how often such a grader shows an
    ECE at least the measured one (``ece_floor_at_least_measured``: a p-value for "it is calibrated")."""
    rng = np.random.default_rng(seed)
    keys, index = np.unique(q, return_inverse=True)
    members = [np.flatnonzero(index == k) for k in range(len(keys))]
    aurocs, eces = [], []
    for _ in range(draws):
        rows = np.concatenate([members[k] for k in rng.integers(0, len(keys), len(keys))])
        if 0 < y[rows].sum() < len(rows):
            aurocs.append(auroc(y[rows], p[rows]))
            eces.append(ece(y[rows], p[rows]))
    prior = y.mean()
    raw = p * prior / (p * prior + (1 - p) * (1 - prior))  # an even-odds score on the domain's own mix
    floor = [ece(drawn, p) for drawn in (rng.random((draws, len(p))) < raw) if 0 < drawn.sum() < len(p)]
    return {"questions": len(keys), "draws": draws, "auroc_95": [round(float(v), 3) for v in np.percentile(aurocs, [2.5, 97.5])],
            "ece_95": [round(float(v), 3) for v in np.percentile(eces, [2.5, 97.5])],
            "ece_floor": round(float(np.mean(floor)), 3),
            "ece_floor_at_least_measured": round(float(np.mean(np.asarray(floor) >= ece(y, p))), 3)}


def measure(x: np.ndarray, y: np.ndarray, q: np.ndarray, d: np.ndarray,
            domain_weights: dict[str, float] | None = None, sure: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """Out-of-fold reports on the fitted domains, held-out reports on the others, and the final model; with
    ``sure``, each report also says how sure its AUROC and ECE are (`intervals`)."""
    fitted = np.isin(d, FITTED)
    p = np.zeros(len(y))
    p[fitted] = out_of_fold(x[fitted], y[fitted], q[fitted], d[fitted], domain_weights)
    model = fit(x[fitted], y[fitted], d[fitted], domain_weights)
    p[~fitted] = predict(model, x[~fitted])
    reports = {dom: {"how": "out of fold" if dom in FITTED else "held out", **report(y[d == dom], p[d == dom])}
               for dom in (*FITTED, *HELD_OUT) if np.any(d == dom)}
    reports["pooled fitted"] = {"how": "out of fold", **report(y[fitted], p[fitted])}
    if sure:
        for dom, r in reports.items():
            sel = fitted if dom == "pooled fitted" else d == dom
            r["intervals"] = intervals(y[sel], p[sel], q[sel])
    return reports, model


COLUMNS = [*GRADER_FEATURES, SCORER_FEATURE, BRIDGE_FEATURE]
"""The columns `extract` gives, in order; a fitted model names the leading ones it uses."""
VARIANTS = {
    "offline features + scorer + bridge (ships)": slice(None),
    "offline features + scorer (before the bridge)": slice(0, len(GRADER_FEATURES) + 1),
    "offline features only": slice(0, len(GRADER_FEATURES)),
}
"""The forms fitted and reported side by side (the scorer alone is reported from its own column)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-write", action="store_true", help="report only; leave the calibration JSON alone")
    parser.add_argument("--scorer", help="fit with a candidate answer scorer's folder instead of the one that ships "
                                         "(report only: the calibration must match the scorer that ships)")
    parser.add_argument("--multihop", type=Path, default=MULTIHOP,
                        help="folder holding hotpotqa_train.json and musique_train.json (default: %(default)s)")
    parser.add_argument("--no-multihop", action="store_true", help="leave the multihop domain out")
    args = parser.parse_args(argv)
    if args.scorer:
        args.no_write = True
    from crag_lab.learned import AnswerScorer
    from crag_lab.learned.scorer import fingerprint

    CACHE.mkdir(parents=True, exist_ok=True)
    cache = VectorCache(store=CACHE / "vectors.sqlite", model_name="sentence-transformers/all-MiniLM-L6-v2")
    scorer = AnswerScorer.load(args.scorer)
    groups = domains(cache, AnswerScorer.load().card.trained,  # the held-out sources stay the shipped scorer's
                     None if args.no_multihop else args.multihop)
    x, y, q, d = extract(groups, cache, CachedScorer(scorer, CACHE / f"scorer-{fingerprint(args.scorer)}.sqlite"))
    if not args.scorer:
        np.savez_compressed(CACHE / "features.npz", x=x, y=y, q=q, d=d)  # for studies of other model forms
    results = {name: measure(x[:, cols], y, q, d, sure=name == SHIPS) for name, cols in VARIANTS.items()}
    scorer_col = COLUMNS.index(SCORER_FEATURE)
    results["scorer alone"] = measure(x[:, scorer_col:scorer_col + 1], y, q, d)  # its model is never written
    no_kb = d != "kb"
    results["shipped features, without the kb domain"] = measure(x[no_kb], y[no_kb], q[no_kb], d[no_kb])
    results["shipped features, domains weighted equally"] = measure(x, y, q, d, {})
    reports, model = results[SHIPS]
    lines = report_markdown(results, model)
    print("\n".join(lines))
    if not args.no_write:
        data = {
            "description": "Offline relevance grader: logistic regression on crag_lab.offline.reading features and the "
                           "answer scorer's best-unit logit and the bridge (grader.bridge_scores), "
                           "label 'the item overlaps a labelled answer location', "
                           "fitted at even odds (gold and non-gold items weighted equally within each domain; domain "
                           f"weights {DOMAIN_WEIGHTS}, others 1) on the training domains {', '.join(FITTED)}; "
                           "measured out of fold there and held out "
                           f"on {', '.join(HELD_OUT)}. Written by bench/fit_grader.py.",
            "fitted": dt.date.today().isoformat(),
            "model": model,
            "domain_weights": DOMAIN_WEIGHTS,
            "cross_validation": {"folds": FOLDS, "grouped_by": "question", **reports},
        }
        OUT.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        REPORT.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"wrote {OUT.relative_to(ROOT)} and {REPORT.relative_to(ROOT)}")
    return 0


def report_markdown(results: dict[str, tuple[dict[str, Any], dict[str, Any]]], model: dict[str, Any]) -> list[str]:
    """docs/dev/grader_fit.md: every variant's per-domain table, the shipped model's reliability and coefficients."""
    lines = ["# The offline grader's fit, per domain (generated by `bench/fit_grader.py`)", "",
             "Fitted domains are measured out of fold (5-fold, grouped by question); held-out domains by the model "
             "fitted on all fitted domains. Accuracy is at a 0.5 cut, raw (on each domain's own mix of gold and "
             "non-gold items, the way the CRAG paper reports its evaluator: 84.3 %) and at even odds. "
             "How the domains are drawn: `bench/_grader_domains.py`; what a grade means: "
             "[grader_calibration.md](grader_calibration.md). The `multihop` domain is 100 HotpotQA and 100 MuSiQue "
             "**train** questions with their paragraphs (github.com/OSU-NLP-Group/HippoRAG, branch `legacy`, commit "
             "b144c46: `data/hotpotqa_train.json`, `data/musique_train.json`; CC BY-SA 4.0 and CC BY 4.0).", "",
             "| grader | domain | how | items | gold | AUROC | ECE (even odds) | accuracy | accuracy (even odds) | "
             "gold kept at 0.3 | gold ≥ 0.7 | non-gold < 0.3 |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, (reports, _) in results.items():
        for dom, r in reports.items():
            lines.append(f"| {name} | {dom} | {r['how']} | {r['items']:,} | {r['gold']:,} | {r['auroc']:.3f} | "
                         f"{r['ece_even_odds']:.3f} | {r['accuracy']:.1%} | {r['accuracy_even_odds']:.1%} | "
                         f"{r['gold_kept_at_0.3']:.0%} | {r['gold_at_or_above_0.7']:.0%} | {r['non_gold_below_0.3']:.0%} |")
    reports = results[SHIPS][0]
    lines += ["", "## How sure these numbers are", "",
              f"For the shipped grader: 95 % intervals over {BOOTSTRAP:,} resamples of each domain's questions (a "
              "question's items drawn together), and the ECE a perfectly calibrated grader would still show on as many "
              "items (labels drawn from its own scores; `intervals`), with how often it shows at least the measured "
              "ECE. ECE is a binned estimate: with few gold items part of it is sampling noise, and resampling "
              "repeats items, which inflates it further, so its interval leans high.", "",
              "| domain | questions | gold | AUROC | AUROC, 95 % | ECE | ECE, 95 % | ECE of a calibrated grader, same size "
              "| a calibrated grader shows at least the measured ECE |",
              "|---|---|---|---|---|---|---|---|---|"]
    for dom, r in reports.items():
        iv = r["intervals"]
        lines.append(f"| {dom} | {iv['questions']:,} | {r['gold']:,} | {r['auroc']:.3f} | {iv['auroc_95'][0]:.3f}–"
                     f"{iv['auroc_95'][1]:.3f} | {r['ece_even_odds']:.3f} | {iv['ece_95'][0]:.3f}–{iv['ece_95'][1]:.3f} | "
                     f"{iv['ece_floor']:.3f} | {iv['ece_floor_at_least_measured']:.1%} |")
    lines += ["", "## Reliability of the shipped grader", "",
              "How often items in each score band were gold, raw and re-weighted to even odds (the scale grades are "
              "fitted to: a calibrated grader has the even-odds rate close to the mean score).", "",
              "| domain | band | items | mean score | gold (raw) | gold (even odds) |", "|---|---|---|---|---|---|"]
    for dom, r in reports.items():
        for row in r["reliability"]:
            if row["items"]:
                lines.append(f"| {dom} | {row['band']} | {row['items']:,} | {row['mean_score']:.2f} | "
                             f"{row['gold_rate']:.1%} | {row['gold_rate_even_odds']:.1%} |")
    lines += ["", "## Coefficients (standardised features)", "", "| feature | coefficient |", "|---|---|"]
    lines += [f"| `{f}` | {c:+.3f} |" for f, c in zip(model["features"], model["coef"], strict=True)]
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
