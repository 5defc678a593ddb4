"""Plain matplotlib plots of an experiment and its replays; each takes an ``ax`` and returns its artists.

Every plot function draws once and returns a small dataclass holding the artists it made; its
``update(...)`` moves those same artists (``set_xdata``, ``set_height``, ``set_text``) and calls
``draw_idle``, so a dashboard can follow a slider without clearing the axes. No widgets in here.

>>> from matplotlib.figure import Figure
>>> ax = Figure().subplots()
>>> hist = vector_score_histogram(ax, [0.55, 0.81, 0.9], threshold=0.8)
>>> hist.update(threshold=0.85)
>>> hist.line.get_xdata()[0], hist.text.get_text()
(0.85, '1 of 3 ≥ 0.85')
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crag_lab.drawing import VISITED_EDGE, VISITED_FILL, GraphPath, graph_layers, graph_path

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.container import BarContainer
    from matplotlib.lines import Line2D
    from matplotlib.text import Text

    from crag_lab.eval.metrics import CalibrationBin
    from crag_lab.replay import Experiment, ReplayReport

ROUTES = ("chitchat", "simple", "GENERATE", "REFINE", "RE_RETRIEVE")
SEGMENTS = ("answered", "capped", "needs_rerun")
FAST_PATH_KEYS = ("read_file", "few_context", "high_vector_score")
"""The pre-filter's rules: each skips the grader for one grading round."""
NOT_GRADED = ("chitchat", "simple")
"""Routes that never reach the grader (whole queries, not rounds: kept off the fast-path axis)."""
COLORS = {
    "gold": "#d97706", "other": "#94a3b8", "unlabelled": "#64748b", "floor": "#dc2626", "generate": "#16a34a",
    "vector": "#2563eb", "recorded": "#cbd5e1", "replayed": "#2563eb",
    # How a query ends: answered is good (green), capped a warning (amber), needs_rerun unknown (grey).
    "answered": "#16a34a", "capped": "#f59e0b", "needs_rerun": "#64748b",
    "visited": VISITED_FILL, "visited_edge": VISITED_EDGE,
}


def _redraw(ax: Axes, draw: bool) -> None:
    """Ask the canvas for a redraw; ``draw=False`` when the caller renders several updates at once."""
    if draw:
        ax.figure.canvas.draw_idle()


def _set_heights(container: BarContainer, heights: Sequence[float], bottoms: Sequence[float] | None = None) -> None:
    """Move existing bars; grow the y axis if a bar would leave it."""
    tops = []
    for k, (patch, h) in enumerate(zip(container.patches, heights, strict=True)):
        patch.set_height(h)
        if bottoms is not None:
            patch.set_y(bottoms[k])
        tops.append(patch.get_y() + h)
    ax = container.patches[0].axes if container.patches else None
    if ax is not None and tops and max(tops) > ax.get_ylim()[1]:
        ax.set_ylim(0, max(tops) * 1.15)


# ---- 1. grader scores ----------------------------------------------------------------------------


def _graded_rows(data: Experiment | Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    rows = data.graded_items() if hasattr(data, "graded_items") else data
    return list(rows)


def _band_counts(scores: Sequence[float], floor: float, generate: float) -> tuple[int, int, int]:
    below = sum(1 for s in scores if s < floor)
    above = sum(1 for s in scores if s >= generate)
    return below, len(scores) - below - above, above


@dataclass
class ScoreHistogram:
    """Artists of `grader_score_histogram`; ``update`` moves the threshold lines and the band counts."""

    ax: Axes
    bars: dict[str, BarContainer]
    floor_line: Line2D
    generate_line: Line2D
    text: Text
    scores: list[float] = field(repr=False)

    def update(self, *, relevance_floor: float, generate_threshold: float, draw: bool = True) -> None:
        self.floor_line.set_xdata([relevance_floor, relevance_floor])
        self.generate_line.set_xdata([generate_threshold, generate_threshold])
        self.text.set_text(_band_text(self.scores, relevance_floor, generate_threshold))
        _redraw(self.ax, draw)


def _band_text(scores: Sequence[float], floor: float, generate: float) -> str:
    below, middle, above = _band_counts(scores, floor, generate)
    return f"{below} below the floor (< {floor:g})\n{middle} between\n{above} ≥ {generate:g}"


def grader_score_histogram(
    ax: Axes,
    data: Experiment | Iterable[Mapping[str, Any]],
    *,
    relevance_floor: float = 0.3,
    generate_threshold: float = 0.7,
    bins: int = 20,
) -> ScoreHistogram:
    """Histogram of grader scores, stacked gold / not gold when labels exist, with both thresholds.

    ``data`` is an `Experiment` or rows shaped like ``Experiment.graded_items()`` (``grader_score``
    and ``gold`` True / False / None). Items left of the floor line are dropped; a round whose
    surviving mean reaches the generate line answers.
    """
    rows = _graded_rows(data)
    scores = [float(r["grader_score"]) for r in rows]
    edges = [i / bins for i in range(bins + 1)]
    groups: dict[str, list[float]]
    if any(r.get("gold") is not None for r in rows):
        groups = {
            "gold": [float(r["grader_score"]) for r in rows if r.get("gold") is True],
            "other": [float(r["grader_score"]) for r in rows if r.get("gold") is False],
        }
        unlabelled = [float(r["grader_score"]) for r in rows if r.get("gold") is None]
        if unlabelled:
            groups["unlabelled"] = unlabelled
    else:
        groups = {"unlabelled": scores}
    bars: dict[str, BarContainer] = {}
    bottom = [0] * bins
    for name, values in groups.items():
        heights = _hist(values, edges)
        bars[name] = ax.bar(edges[:-1], heights, width=1 / bins, bottom=bottom, align="edge",
                            color=COLORS[name], edgecolor="white", linewidth=0.5,
                            label=f"{'not gold' if name == 'other' else name} ({len(values)})")
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    floor_line = ax.axvline(relevance_floor, color=COLORS["floor"], linestyle="--", label="relevance_floor")
    generate_line = ax.axvline(generate_threshold, color=COLORS["generate"], linestyle="--", label="generate_threshold")
    text = ax.text(0.01, 0.98, _band_text(scores, relevance_floor, generate_threshold), transform=ax.transAxes,
                   va="top", ha="left", fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_xlabel("grader score")
    ax.set_ylabel("items")
    ax.set_title("Grader scores (each passage's first grade)")
    ax.legend(fontsize=8, loc="upper right")
    ax.margins(y=0.6)
    return ScoreHistogram(ax, bars, floor_line, generate_line, text, scores)


def _hist(values: Sequence[float], edges: Sequence[float]) -> list[int]:
    """Counts per bin; the last bin includes its right edge (as numpy.histogram does)."""
    bins = len(edges) - 1
    counts = [0] * bins
    lo, hi = edges[0], edges[-1]
    width = (hi - lo) / bins
    for v in values:
        if v < lo or v > hi:
            continue
        counts[min(int((v - lo) / width), bins - 1)] += 1
    return counts


# ---- 2. vector scores ----------------------------------------------------------------------------


@dataclass
class VectorHistogram:
    """Artists of `vector_score_histogram`; ``update`` moves the pre-filter line."""

    ax: Axes
    bars: BarContainer
    line: Line2D
    text: Text
    scores: list[float] = field(repr=False)

    def update(self, *, threshold: float, draw: bool = True) -> None:
        self.line.set_xdata([threshold, threshold])
        self.text.set_text(_vector_text(self.scores, threshold))
        _redraw(self.ax, draw)


def _vector_text(scores: Sequence[float], threshold: float) -> str:
    return f"{sum(1 for s in scores if s >= threshold)} of {len(scores)} ≥ {threshold:g}"


def vector_score_histogram(
    ax: Axes, data: Experiment | Iterable[float], *, threshold: float = 0.8, bins: int = 20
) -> VectorHistogram:
    """Histogram of retrieval cosines with the ``vector_score_threshold`` pre-filter line.

    A round whose items all came from vector_search at or above the line skips the grader.
    """
    scores = [float(s) for s in (data.vector_scores() if hasattr(data, "vector_scores") else data)]
    lo = min([0.0, *scores])
    edges = [lo + (1 - lo) * i / bins for i in range(bins + 1)]
    bars = ax.bar(edges[:-1], _hist(scores, edges), width=(1 - lo) / bins, align="edge",
                  color=COLORS["vector"], alpha=0.6, edgecolor="white", linewidth=0.5)
    line = ax.axvline(threshold, color=COLORS["vector"], linestyle="--", label="vector_score_threshold")
    text = ax.text(0.01, 0.98, _vector_text(scores, threshold), transform=ax.transAxes, va="top", fontsize=8)
    ax.set_xlim(lo, 1)
    ax.set_xlabel("vector_search cosine")
    ax.set_ylabel("items")
    ax.set_title("Retrieval cosines")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, 0.9))
    ax.margins(y=0.3)
    return VectorHistogram(ax, bars, line, text, scores)


# ---- 3. route flow -------------------------------------------------------------------------------


def route_flow_counts(report: ReplayReport) -> dict[str, dict[str, int]]:
    """Queries by route (chitchat, simple, first grading action) split by how they end.

    Each route's segments sum to ``report.route_counts()[route]``. "answered" means a final GENERATE
    (or a chitchat / simple answer), "capped" that the iteration cap forced synthesis, "needs_rerun"
    that the replay left the recorded rounds (see `Experiment.replay`).
    """
    flow = {r: dict.fromkeys(SEGMENTS, 0) for r in ROUTES}
    for q in report.queries:
        route = q.first_action if q.first_action is not None else (q.complexity or "other")
        if route not in flow:
            continue
        segment = q.outcome if q.outcome in ("capped", "needs_rerun") else "answered"
        flow[route][segment] += 1
    return flow


@dataclass
class RouteBars:
    """Artists of `route_flow`; ``update`` restacks the segments for another replay."""

    ax: Axes
    segments: dict[str, BarContainer]
    recorded: BarContainer
    labels: list[Text]

    def update(self, report: ReplayReport, draw: bool = True) -> None:
        flow = route_flow_counts(report)
        bottom = [0] * len(ROUTES)
        for seg in SEGMENTS:
            heights = [flow[r][seg] for r in ROUTES]
            _set_heights(self.segments[seg], heights, bottom)
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        for label, total, x in zip(self.labels, bottom, range(len(ROUTES)), strict=True):
            label.set_text(str(total))
            label.set_position((x, total))
        _redraw(self.ax, draw)


def route_flow(ax: Axes, report: ReplayReport, recorded: ReplayReport | None = None) -> RouteBars:
    """Stacked bars: queries per route, coloured by outcome; a grey outline shows ``recorded``.

    ``recorded`` is the replay at the recorded config (``exp.replay(exp.config)``); it stays fixed
    while ``update`` follows the thresholds.
    """
    x = list(range(len(ROUTES)))
    base = recorded.route_counts() if recorded is not None else report.route_counts()
    recorded_bars = ax.bar(x, [base[r] for r in ROUTES], width=0.8, fill=False, edgecolor="#475569",
                           linestyle=":", linewidth=1.2, label="recorded")
    segments: dict[str, BarContainer] = {}
    for seg in SEGMENTS:
        segments[seg] = ax.bar(x, [0] * len(ROUTES), width=0.6, color=COLORS[seg], label=seg.replace("_", " "))
    labels = [ax.text(i, 0, "", ha="center", va="bottom", fontsize=8) for i in x]
    bars = RouteBars(ax, segments, recorded_bars, labels)
    ax.set_xticks(x, [r.replace("_", "_\n") if r == "RE_RETRIEVE" else r for r in ROUTES], fontsize=8)
    ax.set_ylabel("queries")
    ax.set_title("First grading action, and how queries end")
    ax.set_ylim(0, max([1, *base.values(), *report.route_counts().values()]) * 1.3)
    ax.legend(fontsize=8, loc="upper right")
    bars.update(report, draw=False)
    return bars


# ---- 4. fast path --------------------------------------------------------------------------------


def fast_path_replayed(recorded: Mapping[str, int], report: ReplayReport) -> dict[str, int]:
    """Grading rounds each pre-filter rule skips after a replay: recorded plus gained, minus lost.

    ``recorded`` is ``Experiment.fast_path_counts()``; its chitchat / simple entries count queries
    (skipped by route, not by a rule) and are left out here.
    """
    gained = Counter(rule for q in report.queries for rule in q.fast_path_gained)
    lost = Counter(rule for q in report.queries for rule in q.fast_path_lost)
    keys = dict.fromkeys(k for k in [*FAST_PATH_KEYS, *recorded, *gained] if k not in NOT_GRADED)
    return {k: recorded.get(k, 0) + gained.get(k, 0) - lost.get(k, 0) for k in keys}


@dataclass
class FastPathBars:
    """Artists of `fast_path_bars`; ``update`` sets the replayed heights."""

    ax: Axes
    keys: list[str]
    recorded: BarContainer
    replayed: BarContainer
    recorded_counts: dict[str, int]

    def update(self, report: ReplayReport, draw: bool = True) -> None:
        counts = fast_path_replayed(self.recorded_counts, report)
        _set_heights(self.replayed, [counts.get(k, 0) for k in self.keys])
        _redraw(self.ax, draw)


def fast_path_bars(ax: Axes, recorded: Mapping[str, int], report: ReplayReport | None = None) -> FastPathBars:
    """Grouped bars per pre-filter rule: grading rounds it skipped, recorded and at the replayed thresholds.

    ``recorded`` is ``Experiment.fast_path_counts()``; without ``report`` both bars are equal. Its
    chitchat / simple counts are queries, not rounds: they are named in a note, not drawn as bars.
    """
    keys = list(dict.fromkeys(k for k in [*FAST_PATH_KEYS, *recorded] if k not in NOT_GRADED))
    x = list(range(len(keys)))
    rec = ax.bar([i - 0.2 for i in x], [recorded.get(k, 0) for k in keys], width=0.4, color=COLORS["recorded"],
                 label="recorded")
    rep = ax.bar([i + 0.2 for i in x], [recorded.get(k, 0) for k in keys], width=0.4, color=COLORS["replayed"],
                 label="replayed")
    bars = FastPathBars(ax, keys, rec, rep, dict(recorded))
    ax.set_xticks(x, [k.replace("_score", "").replace("_", "\n") for k in keys], fontsize=8)
    ax.set_ylabel("grading rounds")
    ax.set_title("Rounds the pre-filter skips")
    routed = [f"{recorded[k]} {k}" for k in NOT_GRADED if recorded.get(k)]
    if routed:
        ax.set_xlabel("not graded by route:\n" + ", ".join(routed) + " queries", fontsize=8)
    ax.set_ylim(0, max([1, *(recorded.get(k, 0) for k in keys)]) * 1.6)  # update() grows it if a bar would leave
    ax.legend(fontsize=8, loc="upper right")
    if report is not None:
        bars.update(report, draw=False)
    return bars


# ---- 5. model calls per query --------------------------------------------------------------------


def replayed_calls(recorded: Sequence[int], report: ReplayReport) -> list[int]:
    """Model calls per query at the replayed thresholds: recorded + ``calls_delta`` (a lower bound for
    queries that need a re-run)."""
    return [c + q.calls_delta for c, q in zip(recorded, report.queries, strict=True)]


def _call_bins(calls: Sequence[int], top: int) -> list[int]:
    counts = [0] * (top + 1)
    for c in calls:
        counts[min(max(c, 0), top)] += 1
    return counts


@dataclass
class CallsBars:
    """Artists of `calls_per_query`; ``update`` sets the replayed heights."""

    ax: Axes
    recorded: BarContainer
    replayed: BarContainer
    recorded_calls: list[int]
    top: int
    text: Text

    def update(self, report: ReplayReport, draw: bool = True) -> None:
        calls = replayed_calls(self.recorded_calls, report)
        _set_heights(self.replayed, _call_bins(calls, self.top))
        self.text.set_text(_calls_text(self.recorded_calls, calls))
        _redraw(self.ax, draw)


def _calls_text(recorded: Sequence[int], replayed: Sequence[int]) -> str:
    return f"total {sum(recorded)} → {sum(replayed)} ({sum(replayed) - sum(recorded):+d})"


def calls_per_query(
    ax: Axes, recorded: Sequence[int], report: ReplayReport | None = None, *, headroom: int = 4
) -> CallsBars:
    """Histogram of model calls per query, recorded (grey) and replayed (blue).

    ``recorded`` is ``Experiment.calls_per_query()``. The last bin collects everything at or above
    ``max(recorded) + headroom``.
    """
    top = max([0, *recorded]) + headroom
    x = list(range(top + 1))
    rec_counts = _call_bins(recorded, top)
    rec = ax.bar([i - 0.2 for i in x], rec_counts, width=0.4, color=COLORS["recorded"], label="recorded")
    rep = ax.bar([i + 0.2 for i in x], rec_counts, width=0.4, color=COLORS["replayed"], label="replayed")
    text = ax.text(0.01, 0.98, _calls_text(recorded, recorded), transform=ax.transAxes, va="top", fontsize=8)
    bars = CallsBars(ax, rec, rep, list(recorded), top, text)
    ax.set_xticks(x, [*map(str, x[:-1]), f"≥{top}"], fontsize=8)
    ax.set_xlabel("model calls")
    ax.set_ylabel("queries")
    ax.set_title("Model calls per query")
    ax.set_ylim(0, max([1, *rec_counts]) * 1.3)
    ax.legend(fontsize=8, loc="upper right")
    if report is not None:
        bars.update(report, draw=False)
    return bars


# ---- calibration ---------------------------------------------------------------------------------


@dataclass
class CalibrationPlot:
    """Artists of `calibration_plot`, and the bins they show (``crag_lab.eval.calibration_bins``)."""

    ax: Axes
    diagonal: Line2D
    curve: Line2D
    bars: BarContainer
    bins: list[CalibrationBin]
    ece: float | None


def calibration_plot(
    ax: Axes, predicted: Sequence[float], observed: Sequence[bool], *, bins: int = 10, label: str = "grader",
) -> CalibrationPlot:
    """Reliability diagram: mean predicted score per bin against the observed fraction of gold items.

    Points on the diagonal mean a score of 0.7 really is right 70 % of the time, which is what the
    generate threshold assumes. Faint bars show the share of items in each bin. The binning and the
    ECE are those of `crag_lab.eval.metrics`, so the plot and the evaluation report agree.
    """
    from crag_lab.eval.metrics import calibration_bins, expected_calibration_error

    table = calibration_bins(predicted, observed, bins)
    ece = expected_calibration_error(predicted, observed, bins)
    total = max(1, sum(b.count for b in table))
    bars = ax.bar([b.lo for b in table], [b.count / total for b in table], width=1 / bins, align="edge",
                  color=COLORS["recorded"], alpha=0.6, label="share of items")
    diagonal = ax.plot([0, 1], [0, 1], linestyle="--", color="#475569", linewidth=1, label="perfect")[0]
    xs = [b.mean_score for b in table if b.mean_score is not None and b.gold_rate is not None]
    ys = [b.gold_rate for b in table if b.mean_score is not None and b.gold_rate is not None]
    ece_text = "n/a" if ece is None else f"{ece:.2f}"
    curve = ax.plot(xs, ys, marker="o", color=COLORS["gold"],
                    label=f"{label} (ECE {ece_text})")[0]
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("predicted grader score")
    ax.set_ylabel("observed fraction gold")
    ax.set_title("Grader calibration")
    ax.legend(fontsize=8, loc="upper left")
    return CalibrationPlot(ax, diagonal, curve, bars, table, ece)


__all__ = [
    "CalibrationPlot",
    "CallsBars",
    "FastPathBars",
    "GraphPath",
    "RouteBars",
    "ScoreHistogram",
    "VectorHistogram",
    "calibration_plot",
    "calls_per_query",
    "fast_path_bars",
    "fast_path_replayed",
    "grader_score_histogram",
    "graph_layers",
    "graph_path",
    "replayed_calls",
    "route_flow",
    "route_flow_counts",
    "vector_score_histogram",
]
