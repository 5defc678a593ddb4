"""The cost–quality frontier as a plain matplotlib plot: every setting, the Pareto set, and markers.

`frontier_plot` draws once and returns its artists; ``update`` moves the current-setting marker (and
the ring around a chosen Pareto point) without clearing the axes, like the plots of `crag_lab.plots`.
No widgets in here.

>>> from matplotlib.figure import Figure
>>> ax = Figure().subplots()
>>> fp = frontier_plot(ax, [1.0, 2.0, 3.0], [0.2, 0.5, 0.4], pareto=[0, 1], metric="gold_f1", recorded=(2.0, 0.5))
>>> fp.update(3.0, 0.4)
>>> fp.current.get_xdata()[0], fp.current.get_ydata()[0]
(3.0, 0.4)
>>> fp.labels[1].get_text()
'2'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from crag_lab.plots import COLORS, _redraw

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.text import Text

METRIC_LABELS = {
    "gold_f1": "gold evidence F1", "gold_recall": "gold evidence kept (recall)",
    "gold_precision": "gold share of kept evidence", "answer_containment": "answer containment (known answers)",
    "citation_precision": "citation precision (known answers)",
}


@dataclass
class FrontierPlot:
    """The artists of `frontier_plot`; ``update`` moves the current setting and the chosen point."""

    ax: Axes
    pareto_x: list[float]
    pareto_y: list[float]
    current: Line2D
    chosen: Line2D
    text: Text
    labels: Sequence[Text] = field(default_factory=list)

    def update(self, calls: float, quality: float, *, chosen: int | None = None, draw: bool = True) -> None:
        """Move the current-setting star to (calls, quality); ring Pareto point ``chosen`` (0-based) or none."""
        self.current.set_data([calls], [quality])
        if chosen is None:
            self.chosen.set_data([], [])
        else:
            self.chosen.set_data([self.pareto_x[chosen]], [self.pareto_y[chosen]])
        self.text.set_text(f"now: {calls:.2f} calls, {quality:.3f}")
        _redraw(self.ax, draw)


def frontier_plot(ax: Axes, calls: Sequence[float], quality: Sequence[float], *, pareto: Sequence[int], metric: str,
                  recorded: tuple[float, float] | None = None) -> FrontierPlot:
    """Every setting (grey), the Pareto set (numbered, 1-based), the recorded setting and the current one.

    ``calls`` and ``quality`` are per setting (NaN quality is left out); ``pareto`` indexes them,
    cost ascending (`crag_lab.replay.frontier.pareto_indices`).
    """
    points = [(x, y) for x, y in zip(calls, quality, strict=True) if y == y]
    if points:
        ax.scatter([p[0] for p in points], [p[1] for p in points], s=8, color=COLORS["other"], alpha=0.45,
                   linewidths=0, label=f"{len(points)} settings")
    px = [float(calls[i]) for i in pareto]
    py = [float(quality[i]) for i in pareto]
    ax.plot(px, py, "-o", color=COLORS["generate"], markersize=5, drawstyle="steps-post", label="Pareto set")
    labels = [ax.annotate(str(k + 1), (x, y), textcoords="offset points", xytext=(4, -11), fontsize=9,
                          color=COLORS["generate"]) for k, (x, y) in enumerate(zip(px, py, strict=True))]
    if recorded is not None:
        ax.plot([recorded[0]], [recorded[1]], "o", markersize=11, markerfacecolor="none", markeredgecolor="black",
                markeredgewidth=1.5, label="recorded setting")
    (chosen,) = ax.plot([], [], "s", markersize=13, markerfacecolor="none", markeredgecolor=COLORS["vector"],
                        markeredgewidth=2, label="chosen point")
    (current,) = ax.plot([], [], "*", markersize=16, color=COLORS["floor"], label="sliders now")
    text = ax.text(0.99, 0.97, "", transform=ax.transAxes, ha="right", va="top", fontsize=10)
    ax.set_xlabel("model calls per question", fontsize=10)
    ax.set_ylabel(METRIC_LABELS.get(metric, metric), fontsize=10)
    ax.tick_params(labelsize=9)
    ax.grid(alpha=0.3)
    # Below the axes, so no point ever hides behind it.
    ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, frameon=False)
    plot = FrontierPlot(ax, px, py, current, chosen, text, labels)
    if recorded is not None:
        plot.update(*recorded, draw=False)
    return plot


def guaranteed_region(ax: Axes, calls: Sequence[float], quality: Sequence[float], valid: Sequence[bool], *,
                      label: str = "guaranteed") -> PathCollection:
    """Ring the settings a risk-controlled tune guarantees (`crag_lab.replay.guarantee`); returns the artist.

    >>> from matplotlib.figure import Figure
    >>> ax = Figure().subplots()
    >>> guaranteed_region(ax, [1.0, 2.0, 3.0], [0.2, 0.5, 0.4], [True, False, True]).get_offsets().tolist()
    [[1.0, 0.2], [3.0, 0.4]]
    """
    points = [(x, y) for x, y, ok in zip(calls, quality, valid, strict=True) if ok and y == y]
    region = ax.scatter([p[0] for p in points], [p[1] for p in points], s=46, facecolors="none",
                        edgecolors=COLORS["generate"], linewidths=1.4, label=f"{label} ({len(points)})", zorder=3)
    return region


__all__ = ["METRIC_LABELS", "FrontierPlot", "frontier_plot", "guaranteed_region"]
