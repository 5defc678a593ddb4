"""Would another form of the offline grader calibrate better? Eight tried beside the one that ships.

The shipped grader (``bench/fit_grader.py``) is a logistic regression on nine features, fitted at even
odds on four training domains. Its out-of-fold ECE misses 0.05 on ``squad`` and ``multihop``, and its
held-out ECE on the KB test split and HotpotQA dev is just above it (docs/dev/grader_fit.md). This
study fits, with the same data, weights and protocol (5-fold GroupKFold by question on the fitted
domains; held-out domains measured with the model fitted on all of them):

- ``ships``: the nine features;
- ``+ scorer spline``: a piecewise-linear term in the answer scorer's logit (hinges at the fitted
  domains' quartiles of it): the scorer's probability may not map linearly to log-odds;
- ``+ scorer interactions``: the scorer's logit times each other feature;
- ``+ span margin``: the span reader's best margin over "no answer" in the item, read as the
  synthesizer reads it (`synthesizer.reader_passage`), clipped at -30, and its positive part: a second
  learned reader, trained on other data than the scorer;
- ``scorer reads 8 units``: the scorer's best over an item's 8 best-supported units instead of its
  `grader.SCORER_UNITS` (4): a gold unit the offline reading ranks fifth is never read today;
- ``+ scorer's second-best unit`` and ``+ scorer's mean over units``: more of the scorer's reading of the
  item than its best unit (over the same 8 units): an item whose several units answer may be surer;
- ``+ route``: the learned router's probability that the question is complex rather than simple
  (`router.learned_route`, what the graph routes by; the grader could read it from the question alone):
  a multi-hop question's items answer it in part, so the same features may mean less there;
- ``+ route interactions``: that probability, and it times each of the nine features: a grader per route,
  blended by how sure the router is.

A form would be worth shipping if it calibrated the fitted domains better out of fold at the same
AUROC; the held-out columns are shown, not used to choose. Nothing here ships.

    .venv/bin/python bench/study_grader_forms.py   # writes docs/dev/grader_forms.md (+ .json)

Needs what ``bench/fit_grader.py`` needs; the scorer's probabilities come from its cache and the span
margins are kept in ``.cache/grader/span-<reader fingerprint>.npz``. About ten minutes on two cores once `fit_grader.py` has
filled the caches (the wider forms ask the scorer about twice as many pairs on a first run).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
from _common import ROOT, log, publish

sys.path.insert(0, str(ROOT / "bench"))

import fit_grader as fg
from _grader_domains import CachedScorer
from _report_fmt import table

from crag_lab.offline import synthesizer
from crag_lab.offline.grader import SCORER_UNITS
from crag_lab.offline.reading import read, unit_key, unit_support
from crag_lab.offline.vectors import VectorCache

OUT = ROOT / "docs" / "dev" / "grader_forms.md"
MARGIN_FLOOR = -30.0
WIDE_UNITS = 8
"""Units per item the wider scorer forms read (the shipped grader reads `SCORER_UNITS`)."""
P_FLOOR = 1e-4
"""Probabilities are clipped to [P_FLOOR, 1 - P_FLOOR] before the logit, as `grader.scorer_logits` clips them."""


def span_margins(groups: Sequence[dict[str, Any]], cache: VectorCache) -> np.ndarray:
    """The span reader's margin for every item of every group, in `fit_grader.extract`'s order (cached)."""
    from crag_lab.learned import SpanReader
    from crag_lab.learned.spans import fingerprint

    keys = np.asarray([f"{g['domain']}/{g['query']}/{i}" for g in groups for i in range(len(g["items"]))])
    store = fg.CACHE / f"span-{fingerprint()}.npz"
    if store.is_file():
        kept = np.load(store)
        if np.array_equal(kept["keys"], keys):
            return np.asarray(kept["margins"])
    spans, margins = SpanReader.load(), []
    for k, group in enumerate(groups):
        reading = read(group["query"], group["items"], cache)
        margins += [s.margin for s in spans.read(group["query"], [synthesizer.reader_passage(i) for i in reading.items])]
        if k % 250 == 0:
            log(f"span margins: {k} of {len(groups)} groups")
    np.savez_compressed(store, keys=keys, margins=np.asarray(margins))
    return np.asarray(margins)


def unit_probabilities(groups: Sequence[dict[str, Any]], cache: VectorCache, scorer: Any,
                       units: int = WIDE_UNITS) -> np.ndarray:
    """The scorer's probability for each item's ``units`` best-supported units, best-supported first, in
    `fit_grader.extract`'s item order; NaN where an item has fewer units (as `grader.scorer_logits` reads them)."""
    rows = []
    for group in groups:
        reading = read(group["query"], group["items"], cache)
        for item in reading.items:
            ranked = sorted(item.units, key=unit_support, reverse=True)[:units]
            probs = scorer.predict([(reading.query, unit_key(item.title, u.unit)) for u in ranked]) if ranked else []
            rows.append(np.concatenate([np.asarray(probs, dtype=np.float64), np.full(units - len(ranked), np.nan)]))
    return np.vstack(rows)


def complex_odds(groups: Sequence[dict[str, Any]], cache: VectorCache) -> np.ndarray:
    """For every item of every group, in `fit_grader.extract`'s order: the learned router's probability that
    the item's question is complex rather than simple (`router.learned_route`; what the graph routes by)."""
    from crag_lab.offline.router import learned_route

    out = []
    for group in groups:
        probs = learned_route(group["query"], cache).probabilities
        out += [probs["complex"] / max(probs["complex"] + probs["simple"], 1e-9)] * len(group["items"])
    return np.asarray(out, dtype=np.float64)


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, P_FLOOR, 1 - P_FLOOR)
    return np.asarray(np.log(p / (1 - p)))


def forms(x: np.ndarray, margins: np.ndarray, probs: np.ndarray, fitted: np.ndarray,
          complexity: np.ndarray) -> dict[str, np.ndarray]:
    """The feature matrices of every form, shipped first."""
    sc = fg.COLUMNS.index(fg.SCORER_FEATURE)
    logit = x[:, sc:sc + 1]
    knots = np.percentile(logit[fitted, 0], [25, 50, 75])
    span = np.maximum(margins, MARGIN_FLOOR)[:, None]
    ranked = -np.sort(-np.nan_to_num(probs, nan=0.0), axis=1)  # each item's probabilities, highest first
    wide = x.copy()
    wide[:, sc] = _logit(ranked[:, 0])
    mean = np.nanmean(np.where(np.isnan(probs).all(axis=1, keepdims=True), 0.0, probs), axis=1)
    return {"ships": x,
            "+ scorer spline": np.hstack([x, *(np.maximum(0.0, logit - k) for k in knots)]),
            "+ scorer interactions": np.hstack([x, logit * np.delete(x, sc, axis=1)]),
            "+ span margin": np.hstack([x, span, np.maximum(span, 0.0)]),
            f"scorer reads {WIDE_UNITS} units (ships {SCORER_UNITS})": wide,
            "… + scorer's second-best unit": np.hstack([wide, _logit(ranked[:, 1:2])]),
            "… + scorer's mean over units": np.hstack([wide, mean[:, None]]),
            "+ route": np.hstack([x, complexity[:, None]]),
            "+ route interactions": np.hstack([x, complexity[:, None], complexity[:, None] * x])}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-write", action="store_true", help="print the report; write nothing")
    args = parser.parse_args(argv)
    from crag_lab.learned import AnswerScorer
    from crag_lab.learned.scorer import fingerprint

    cache = VectorCache(store=fg.CACHE / "vectors.sqlite", model_name="sentence-transformers/all-MiniLM-L6-v2")
    scorer = AnswerScorer.load()
    groups = fg.domains(cache, scorer.card.trained)
    cached = CachedScorer(scorer, fg.CACHE / f"scorer-{fingerprint(None)}.sqlite")
    x, y, q, d = fg.extract(groups, cache, cached)
    fitted = np.isin(d, fg.FITTED)
    probs = unit_probabilities(groups, cache, cached)
    results = {}
    for name, matrix in forms(x, span_margins(groups, cache), probs, fitted, complex_odds(groups, cache)).items():
        log(f"fitting {name}")
        reports, _ = fg.measure(matrix, y, q, d)
        results[name] = {dom: {"how": r["how"], "auroc": r["auroc"], "ece": r["ece_even_odds"]} for dom, r in reports.items()}
    domains = list(results["ships"])
    text = "\n".join(["# Other forms of the offline grader", "",
                      "Written by `bench/study_grader_forms.py` (see its docstring): the shipped grader's data, weights "
                      "and protocol (`bench/fit_grader.py`), other feature sets. Cells: AUROC / ECE at even odds; fitted "
                      "domains out of fold, held-out ones by the model fitted on all fitted domains.", ""])
    text += "\n" + table(["form", *(f"{dom} ({results['ships'][dom]['how']})" for dom in domains)],
                         [[name, *(f"{row[dom]['auroc']:.3f} / {row[dom]['ece']:.3f}" for dom in domains)]
                          for name, row in results.items()])
    publish(OUT, text, results, write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
