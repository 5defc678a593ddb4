"""The dashboard's frontier panel: where the sliders stand among every threshold setting, and a way there.

`FrontierPanel` computes the cost–quality frontier of a labelled recording once
(`crag_lab.replay.frontier`), draws it (`crag_lab.plots_frontier`), and on every slider change
measures the one current setting the same way (a one-setting frontier, no model call) and moves its
star. Picking a Pareto point in the list and pressing the button calls ``on_apply`` with that
setting; the `Dashboard` wires it to its sliders. A thin skin: no decision is made here.

>>> panel = FrontierPanel(exp)  # doctest: +SKIP
>>> panel.update(exp.config)["gold_f1"]  # doctest: +SKIP
"""

from __future__ import annotations

import html
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from crag_lab.config import CragConfig
from crag_lab.plots_frontier import METRIC_LABELS, frontier_plot, guaranteed_region
from crag_lab.records import QueryRecord
from crag_lab.replay.frontier import METRICS, Frontier, frontier, pareto_indices

if TYPE_CHECKING:
    from crag_lab.replay import Experiment
    from crag_lab.replay.guarantee import GuaranteeResult

AXES = ("relevance_floor", "generate_threshold", "vector_score_threshold", "auto_approve_max_items", "max_iterations")
"""The grid axes the panel may sweep: the dashboard's own controls (so every point can be set on the sliders)."""


@dataclass
class _Recording:
    """An experiment's records under another config (the pre-filter switch is not a grid axis)."""

    config: CragConfig
    records: list[QueryRecord]


def has_gold_labels(exp: Experiment) -> bool:
    """Whether any record carries gold locations (a frontier needs them)."""
    return any((r.get("labels") or {}).get("gold") for r in exp.records)


class NoQualityError(ValueError):
    """The recording's labels define no quality metric at all (no labelled item graded, no known answer)."""


class FrontierPanel:
    """The frontier plot, the current setting's point, the Pareto points as a list and "Move the sliders here".

    ``fallback``: when the labels do not define ``metric``, use the first quality metric they do.
    ``grid`` overrides the default grid (`crag_lab.replay.frontier.grid`) for the axes in `AXES`.
    """

    def __init__(self, exp: Experiment, *, metric: str = "gold_f1", fallback: bool = False, dpi: int = 80,
                 **grid: Any) -> None:
        if bad := set(grid) - set(AXES):
            raise ValueError(f"the frontier panel sweeps only the dashboard's sliders {list(AXES)}; got {sorted(bad)}")
        self.exp = exp
        self.front: Frontier = exp.frontier(**grid)
        table = self.front.table()
        defined = [m for m in METRICS if table[m].notna().any()]
        if not defined:
            raise NoQualityError("no quality metric is defined on this recording's labels (no labelled item was graded "
                             "and no recorded answer is known); record more labelled questions")
        if metric not in defined and fallback:  # the first metric the labels define
            metric = defined[0]
        if metric not in defined:
            raise ValueError(f"the labels of this recording define no {metric!r}; choose one of {defined}")
        self.metric = metric
        self.config = exp.config
        self.on_apply: Callable[[dict[str, Any]], Any] | None = None
        self.guarantee: GuaranteeResult | None = None
        """The risk-controlled tune whose guaranteed settings the plot rings (`show_guarantee`), or None."""
        self._dpi = dpi
        self.recorded_point = self.point(exp.config)
        self.current_point = self.recorded_point

        self.metric_picker = widgets.Dropdown(options=[(METRIC_LABELS[m], m) for m in defined], value=metric,
                                              description="quality", layout=widgets.Layout(width="330px"))
        self.metric_picker.observe(lambda change: self.set_metric(change["new"]), names="value")
        self.points = widgets.Select(options=[], rows=8, layout=widgets.Layout(width="calc(100% - 8px)"))
        self.points.add_class("crag-frontier-points")
        self.points.observe(lambda _: self._ring(), names="value")
        self.apply_button = widgets.Button(description="Move the sliders to this point", disabled=True,
                                           layout=widgets.Layout(width="240px"))
        self.apply_button.add_class("crag-frontier-apply")
        self.apply_button.on_click(lambda _: self.apply())
        self.caption = widgets.HTML()
        self.caption.add_class("crag-frontier-point")
        self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="520px", width="calc(100% - 8px)"))
        self.image.add_class("crag-frontier-plot")
        self.guarantee_text = widgets.Text(placeholder="gold_dropped<=0.10", description="guarantee",
                                           layout=widgets.Layout(width="260px"))
        self.delta_text = widgets.BoundedFloatText(value=0.1, min=0.001, max=0.999, step=0.01, description="δ",
                                                   layout=widgets.Layout(width="150px"))
        self.guarantee_button = widgets.Button(description="Ring the guaranteed settings",
                                               layout=widgets.Layout(width="240px"))
        self.guarantee_button.add_class("crag-frontier-guarantee")
        self.guarantee_note = widgets.HTML()
        self.guarantee_note.add_class("crag-frontier-guarantee-note")
        self.guarantee_button.on_click(lambda _: self._guarantee_clicked())
        self.figure = Figure(figsize=(6.4, 4.3), dpi=dpi)
        FigureCanvasAgg(self.figure)
        self.ax = self.figure.add_axes((0.11, 0.24, 0.86, 0.73))
        self._widget: widgets.Widget | None = None
        self.set_metric(metric)

    # ---- public --------------------------------------------------------------------------------

    @property
    def pareto(self) -> list[dict[str, Any]]:
        """The Pareto points (cost ascending) as settings with their ``calls_per_question`` and metric."""
        table = self.front.table()
        return [{**self.front.setting(int(s)), "calls_per_question": float(table.iloc[s]["calls_per_question"]),
                 self.metric: float(table.iloc[s][self.metric])} for s in self._pareto]

    def point(self, config: CragConfig) -> dict[str, float]:
        """The frontier's columns for one setting (the config's thresholds and pre-filter), replayed."""
        axes: dict[str, Any] = {name: [getattr(config, name)] for name in AXES}
        one = frontier(_Recording(config, self.exp.records), metric=self.metric, aggregator=[config.aggregator], **axes)
        return {k: float(v[0]) for k, v in one.scores().items()}

    def update(self, config: CragConfig) -> dict[str, float]:
        """Measure the sliders' setting and move its star; returns its point."""
        self.config = config
        self.current_point = self.point(config)
        self._render()
        return self.current_point

    def set_metric(self, metric: str) -> None:
        """Redraw the frontier for another quality metric (one of `METRICS` the labels define)."""
        table = self.front.table()
        if metric not in {v for _, v in self.metric_picker.options}:
            raise ValueError(f"the labels of this recording define no {metric!r}; choose one of "
                             f"{[v for _, v in self.metric_picker.options]}")
        self.metric = metric
        if self.metric_picker.value != metric:
            self.metric_picker.value = metric  # observed: calls back here once, with the same metric
            return
        calls, quality = table["calls_per_question"].to_numpy(), table[metric].to_numpy()
        self._pareto = pareto_indices(calls, quality).tolist()
        self.ax.clear()
        rec = (self.recorded_point["calls_per_question"], self.recorded_point[metric])
        self.plot = frontier_plot(self.ax, calls, quality, pareto=self._pareto, metric=metric, recorded=rec)
        if self.guarantee is not None:
            g = self.guarantee
            guaranteed_region(self.ax, calls, quality, g.valid.tolist(), label=f"{g.guarantee}, δ={g.delta:g}")
            self.ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, frameon=False)
        self.points.options = [(_point_label(k, p, metric), k) for k, p in enumerate(self.pareto)]
        self.points.value = None
        self.apply_button.disabled = True
        self._render()

    def show_guarantee(self, guarantee: str, delta: float = 0.1, **kwargs: Any) -> GuaranteeResult:
        """Ring the settings guaranteed to keep ``guarantee`` (``"gold_dropped<=0.10"``) with probability
        ``1 - delta`` on this frontier (`crag_lab.replay.guarantee.risk_controlled`; ``kwargs`` go there)."""
        from crag_lab.replay.guarantee import risk_controlled

        self.guarantee = risk_controlled(self.exp, guarantee, delta=delta, metric=self.metric, front=self.front,
                                         **kwargs)
        self.set_metric(self.metric)
        return self.guarantee

    def apply(self, position: int | None = None) -> dict[str, Any] | None:
        """Move the sliders (``on_apply``) to Pareto point ``position`` (0-based; default: the selected one)."""
        position = self.points.value if position is None else position
        if position is None:
            return None
        setting = {k: v for k, v in self.pareto[position].items() if k in AXES}
        if self.on_apply is not None:
            self.on_apply(setting)
        return setting

    @property
    def widget(self) -> widgets.Widget:
        if self._widget is None:
            note = widgets.HTML(
                "<b>Cost–quality frontier</b> of this recording: every threshold setting of the grid, replayed "
                f"({len(self.front)} settings, no model calls). Pick a numbered point and move the sliders there.")
            side = widgets.VBox([self.metric_picker, self.caption, self.points, self.apply_button,
                                 widgets.HBox([self.guarantee_text, self.delta_text],
                                              layout=widgets.Layout(flex_flow="row wrap")), self.guarantee_button,
                                 self.guarantee_note],
                                layout=widgets.Layout(width="420px", max_width="calc(100% - 8px)"))
            self._widget = widgets.VBox([note, widgets.HBox([self.image, side],
                                                             layout=widgets.Layout(flex_flow="row wrap"))])
            self._widget.add_class("crag-frontier")
        return self._widget

    # ---- internals -----------------------------------------------------------------------------

    def _guarantee_clicked(self) -> None:
        """The button: ring the settings the typed guarantee holds for; a bad guarantee is said beside it."""
        try:
            g = self.show_guarantee(self.guarantee_text.value or "gold_dropped<=0.10", self.delta_text.value)
        except ValueError as exc:
            self.guarantee_note.value = f"<span style='color:#b00'>{html.escape(str(exc))}</span>"
            return
        pick = "none can be guaranteed" if g.setting is None else (
            f"pick: floor {g.setting['relevance_floor']:.2f}, generate {g.setting['generate_threshold']:.2f}, "
            f"vector {g.setting['vector_score_threshold']:.2f}")
        self.guarantee_note.value = html.escape(
            f"{int(g.valid.sum())} of {len(g.valid)} settings guaranteed (rings; Learn-then-Test, {g.procedure}, "
            f"n = {min(g.n.values())}); {pick}")

    def _ring(self) -> None:
        self.apply_button.disabled = self.points.value is None
        self._render()

    def _render(self) -> None:
        p, m = self.current_point, self.metric
        self.plot.update(p["calls_per_question"], p[m], chosen=self.points.value, draw=False)
        buf = io.BytesIO()
        self.figure.savefig(buf, format="png", dpi=self._dpi)
        self.image.value = buf.getvalue()
        self.caption.value = _caption_html(p, self.recorded_point, m, self.config)


def _point_label(k: int, point: dict[str, Any], metric: str) -> str:
    return (f"{k + 1}. {point['calls_per_question']:.2f} calls · {point[metric]:.3f} · floor "
            f"{point['relevance_floor']:.2f}, generate {point['generate_threshold']:.2f}, "
            f"vector {point['vector_score_threshold']:.2f}")


def _caption_html(point: dict[str, float], recorded: dict[str, float], metric: str, config: CragConfig) -> str:
    """The current point in words; its numbers also as data attributes (what the browser test reads)."""
    data = {"calls_per_question": round(point["calls_per_question"], 6), metric: round(point[metric], 6),
            "relevance_floor": config.relevance_floor, "generate_threshold": config.generate_threshold,
            "vector_score_threshold": config.vector_score_threshold}
    rerun = int(point["needs_rerun"])
    note = (f" {rerun} question(s) leave the recording here, so the cost is a lower bound and their quality "
            "is not counted." if rerun else "")
    return (f"<div class='crag-frontier-now' data-point=\"{html.escape(json.dumps(data), quote=True)}\">"
            f"<b>Sliders now</b> (red star): {point['calls_per_question']:.2f} calls per question, "
            f"{html.escape(METRIC_LABELS[metric])} <b>{point[metric]:.3f}</b>; recorded setting (black ring): "
            f"{recorded['calls_per_question']:.2f} calls, {recorded[metric]:.3f}.{html.escape(note)}</div>")


__all__ = ["AXES", "FrontierPanel", "NoQualityError", "has_gold_labels"]
