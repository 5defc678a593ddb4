"""Which grader should I use? Every candidate regrades the same recording; one table and one plot compare them.

`compare_graders` regrades a labelled recording with each grader (`crag_lab.replay.regrade`) and
measures, on the items whose gold label is known (`Experiment.graded_items`):

- ``auroc``: how well the grade ranks gold items above the others (0.5 is chance);
- ``ece``: expected calibration error over ten equal-width bins (0 is perfectly calibrated), and the
  reliability diagram of those bins (`reliability_plot`);
- ``agreement``: the share of items where "grade >= 0.5" agrees with the gold label, the way the CRAG
  paper reports its evaluator (84.3 % for its fine-tuned T5-large, 58–65 % for ChatGPT prompts);
- the frontier of the regraded recording: its best ``metric`` and that setting's calls per question,
  and the ``metric`` at the recorded setting (`crag_lab.replay.frontier`);
- what the regrade cost: model calls, tokens and seconds;
- with ``repeats > 1``, ``grade_sd``: the mean over items of the standard deviation of an item's grade
  over repeated regrades (a sampled LLM judge varies; a deterministic grader gives 0).

>>> result = compare_graders(exp, {"offline": "offline", "overlap": overlap}, texts="data/kb")  # doctest: +SKIP
>>> result.table  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from crag_lab.replay.regrade import GraderLike, ItemTexts

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.lines import Line2D

    from crag_lab.replay.experiment import Experiment

COLUMNS = ("grader", "auroc", "ece", "agreement", "best", "best_calls", "at_recorded", "calls", "tokens", "seconds")
BINS = 10


def reliability(scores: np.ndarray, labels: np.ndarray, bins: int = BINS) -> dict[str, Any]:
    """Per equal-width bin of the grade: items, mean grade, share gold; and the ECE (their weighted gap).

    >>> r = reliability(np.array([0.1, 0.15, 0.9, 0.95]), np.array([0, 0, 1, 1]), bins=2)
    >>> r["count"].tolist(), round(float(r["ece"]), 3)  # gaps 0.125 and 0.075, two items each
    ([2, 2], 0.1)
    """
    scores, labels = np.asarray(scores, dtype=np.float64), np.asarray(labels, dtype=np.float64)
    which = np.minimum((scores * bins).astype(np.int64), bins - 1)
    count = np.bincount(which, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(which, weights=scores, minlength=bins) / count
        share = np.bincount(which, weights=labels, minlength=bins) / count
    gap = np.where(count > 0, np.abs(mean - share), 0.0)
    ece = float((gap * count).sum() / max(count.sum(), 1))
    return {"count": count, "mean_grade": mean, "share_gold": share, "ece": ece}


def grade_quality(scores: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """AUROC, ECE and agreement at 0.5 of grades against gold labels (NaN AUROC with one class only)."""
    from sklearn.metrics import roc_auc_score

    scores, labels = np.asarray(scores, dtype=np.float64), np.asarray(labels, dtype=bool)
    auroc = float(roc_auc_score(labels, scores)) if 0 < labels.sum() < len(labels) else float("nan")
    return {"auroc": auroc, "ece": float(reliability(scores, labels)["ece"]),
            "agreement": float(((scores >= 0.5) == labels).mean()) if len(labels) else float("nan")}


def grade_spread(repeats: np.ndarray) -> np.ndarray:
    """Per item (column), the standard deviation of its grades over repeated regrades (rows); exactly 0
    where every repeat gave the same grade (numpy's mean of equal floats can round, leaving 1e-17).

    >>> grade_spread(np.array([[0.1, 0.2], [0.1, 0.4], [0.1, 0.6]])).round(3).tolist()
    [0.0, 0.163]
    """
    repeats = np.asarray(repeats, dtype=np.float64)
    return np.where(np.ptp(repeats, axis=0) == 0, 0.0, repeats.std(axis=0))


def labelled_grades(exp: Experiment) -> tuple[list[tuple[str, str]], np.ndarray, np.ndarray]:
    """(query id, item id), grade and gold label of every item whose label is known, first grading only."""
    rows = [r for r in exp.graded_items() if r["gold"] is not None]
    return ([(str(r["query_id"]), str(r["id"])) for r in rows], np.asarray([r["grader_score"] for r in rows]),
            np.asarray([bool(r["gold"]) for r in rows]))


@dataclass
class GraderComparison:
    """The comparison `compare_graders` made: ``table`` (one row per grader), the regraded experiments,
    each grader's labelled grades and reliability bins, and the per-item spread over repeats."""

    table: pd.DataFrame
    experiments: dict[str, Experiment]
    grades: dict[str, np.ndarray]
    labels: np.ndarray
    bins: dict[str, dict[str, Any]]
    spread: dict[str, np.ndarray] = field(default_factory=dict)

    def plot(self, ax: Axes) -> list[Line2D]:
        """The reliability diagram of every grader on one axes (`reliability_plot`)."""
        return reliability_plot(ax, self.bins)


def reliability_plot(ax: Axes, bins: Mapping[str, Mapping[str, Any]]) -> list[Line2D]:
    """Share of gold items against mean grade per bin, one line per grader, and the diagonal; returns the lines.

    >>> from matplotlib.figure import Figure
    >>> ax = Figure().subplots()
    >>> lines = reliability_plot(ax, {"a": reliability(np.array([0.1, 0.9]), np.array([0, 1]))})
    >>> [line.get_label() for line in lines]
    ['a (ECE 0.100)']
    """
    ax.plot([0, 1], [0, 1], ":", color="grey", linewidth=1)
    lines = []
    for name, b in bins.items():
        ok = np.asarray(b["count"]) > 0
        (line,) = ax.plot(np.asarray(b["mean_grade"])[ok], np.asarray(b["share_gold"])[ok], "-o", markersize=4,
                          label=f"{name} (ECE {float(b['ece']):.3f})")
        lines.append(line)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("mean grade in bin", fontsize=10)
    ax.set_ylabel("share of gold items", fontsize=10)
    ax.tick_params(labelsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9, loc="upper left", frameon=False)
    return lines


def compare_graders(experiment: Experiment, graders: Mapping[str, GraderLike], *, texts: ItemTexts = None,
                    metric: str = "gold_f1", repeats: int = 1, cache: Any = None, concurrency: int = 1,
                    **frontier_args: Any) -> GraderComparison:
    """Regrade ``experiment`` with each of ``graders`` (by name) and compare them; see the module docstring.

    ``repeats`` regrades each grader that many times (a sampled LLM grader varies between calls; give
    it no ``cache``, or every repeat reads the first answers); the table and frontier use the first.
    ``frontier_args`` go to `crag_lab.replay.frontier.frontier` (the grid, ``labels``).
    """
    import pandas as pd

    from crag_lab.replay.tune import best_setting

    if not graders:
        raise ValueError("give at least one grader to compare, e.g. {'offline': 'offline'}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    rows, experiments, grades, bins, spread = [], {}, {}, {}, {}
    keys: list[tuple[str, str]] | None = None
    labels = np.zeros(0, dtype=bool)
    for name, grader in graders.items():
        grader = _adapted_once(grader)
        runs = [experiment.regrade(grader, texts=texts, cache=cache, concurrency=concurrency, name=name)
                for _ in range(repeats)]
        exp = runs[0]
        experiments[name] = exp
        k, g, labels = labelled_grades(exp)
        if keys is not None and k != keys:
            raise AssertionError("regrades of one recording must label the same items")  # pragma: no cover
        keys = k
        grades[name] = g
        bins[name] = reliability(g, labels)
        quality = grade_quality(g, labels)
        if repeats > 1:
            spread[name] = grade_spread(np.vstack([labelled_grades(r)[1] for r in runs]))
        front = exp.frontier(metric=metric, **frontier_args)
        best = best_setting(front, np.arange(len(front.ids)), metric)
        table = front.table()
        at = _recorded_row(front, experiment)
        info = exp.meta["grader"]
        rows.append({"grader": name, **quality, "best": float(table[metric].iloc[best]),
                     "best_calls": float(table["calls_per_question"].iloc[best]),
                     "at_recorded": float(table[metric].iloc[at]) if at is not None else float("nan"),
                     "calls": int(info["calls"]), "tokens": int(info["tokens"]),
                     "seconds": float(sum(r.meta["grader"]["seconds"] for r in runs) / repeats),
                     **({"grade_sd": float(spread[name].mean())} if repeats > 1 else {})})
    return GraderComparison(pd.DataFrame(rows), experiments, grades, labels, bins, spread)


def _adapted_once(grader: GraderLike) -> GraderLike:
    """A LlamaIndex LLM adapted to a crag_lab model once, so that its repeats share one adapter: one warm-up
    call and one measured speed (`crag_lab.models.SpeedMeter`), not one of each per regrade."""
    from crag_lab.models import CragModel, as_model
    from crag_lab.replay.regrade import Grader

    if isinstance(grader, (str, Grader, CragModel)) or not hasattr(grader, "complete"):
        return grader
    from crag_lab.offline import OfflineModel

    return as_model(grader, offline_factory=OfflineModel)


def _recorded_row(front: Any, experiment: Experiment) -> int | None:
    """The frontier row of the recorded setting, if the grid holds it."""
    st, c = front.settings, experiment.config
    hit = np.flatnonzero(np.isclose(st.relevance_floor, c.relevance_floor)
                         & np.isclose(st.generate_threshold, c.generate_threshold)
                         & np.isclose(st.vector_score_threshold, c.vector_score_threshold)
                         & (st.auto_approve_max_items == c.auto_approve_max_items)
                         & (st.max_iterations == c.max_iterations) & (st.aggregator == c.aggregator))
    return int(hit[0]) if len(hit) else None


__all__ = ["COLUMNS", "GraderComparison", "compare_graders", "grade_quality", "grade_spread", "labelled_grades",
           "reliability", "reliability_plot"]
