"""The threshold explorer: sliders over a recorded `Experiment`, replayed without any model call.

A thin skin (see STYLE.md): the widgets build a new `CragConfig` from the slider values, call
``exp.replay(config)`` (the same pure decision functions the graph uses), and move the artists of
`crag_lab.plots` in place. Only the "Re-run" button runs the real graph, for one query.

Figures are plain matplotlib ``Figure`` objects rendered to PNG into an ``ipywidgets.Image``: no
pyplot state, no frontend extension (ipympl), identical in JupyterLab, Voilà and under nbval.

>>> dash = lab.dashboard(exp)  # doctest: +SKIP
>>> dash.set(generate_threshold=0.8).route_counts()  # doctest: +SKIP
{'chitchat': 1, 'simple': 1, 'GENERATE': 1, 'REFINE': 3, 'RE_RETRIEVE': 1}
"""

from __future__ import annotations

import contextlib
import html
import io
import json
import re
import traceback
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import ipywidgets as widgets
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pydantic import ValidationError

from crag_lab import plots
from crag_lab._dashboard_parts import (
    BOOL_CONTROLS,
    CONTROLS,
    FLOAT_CONTROLS,
    INT_CONTROLS,
    _calls_change,
    _controls,
    _delta,
    _fmt_thresholds,
    _n,
    _query_label,
    _recorded_values,
    _rerun_html,
    _trace_html,
    _validation_message,
    surprises,
)
from crag_lab.config import CragConfig
from crag_lab.dashboard_frontier import FrontierPanel, NoQualityError, has_gold_labels
from crag_lab.result import AskResult

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph

    from crag_lab.replay import Experiment, ReplayReport

_COUNTS_RE = re.compile(r'class="crag-route-counts"[^>]*data-counts="([^"]*)"')


class Rerunner(Protocol):
    """What the dashboard needs of a `crag_lab.Lab`: the graph to draw, and one query run for real."""

    def graph(self) -> CompiledStateGraph: ...

    def rerun(self, query: str, config: CragConfig) -> AskResult: ...


class Dashboard:
    """Sliders for the thresholds, linked plots, totals, the flipped queries and a re-run button.

    ``lab`` (a `crag_lab.Lab`) runs the "Re-run" button and draws the graph; it may be None for a
    loaded experiment (the button is then disabled). Every slider change calls ``exp.replay(config)``
    once. ``frontier`` adds the cost–quality frontier panel (`crag_lab.dashboard_frontier`; default:
    when the recording carries gold labels), measured by ``metric``.
    """

    def __init__(self, lab: Rerunner | None, exp: Experiment, *, figsize: tuple[float, float] = (5.9, 10.0),
                 dpi: int = 100, frontier: bool | None = None, metric: str = "gold_f1") -> None:
        self.lab = lab
        self.exp = exp
        self.recorded: ReplayReport = exp.replay(exp.config)
        self.report: ReplayReport = self.recorded
        self.config: CragConfig = exp.config
        self.error: BaseException | None = None
        self.last_rerun: AskResult | None = None
        self._hold = False
        self._dpi = dpi

        self.controls = _controls(exp.config)
        for control in self.controls.values():
            control.observe(self._on_change, names="value")
        self.reset_button = widgets.Button(description="Reset to recorded")
        self.reset_button.on_click(lambda _: self.set(**_recorded_values(exp.config)))
        self.errors = widgets.Output()
        self.errors.add_class("crag-errors")
        self.summary = widgets.HTML()
        self.summary.add_class("crag-summary")

        # The five linked plots, drawn once; refresh() moves their artists.
        self.figure = Figure(figsize=figsize, dpi=dpi)
        FigureCanvasAgg(self.figure)
        # Fixed margins rather than a layout engine: the layout is computed once, every render is cheap.
        # Sized for a notebook's output area on a projector (about 590 px at 1024 px with the file browser
        # open): drawn at that width, the text is not scaled down.
        # The grader scores (what the floor and generate sliders cut) come first, full width.
        grid = self.figure.add_gridspec(4, 2, left=0.11, right=0.98, bottom=0.05, top=0.97, wspace=0.4,
                                        hspace=0.75, height_ratios=(1.25, 1, 1, 1))
        axes = [self.figure.add_subplot(grid[0, :]), self.figure.add_subplot(grid[2, 0]),
                self.figure.add_subplot(grid[1, :]), self.figure.add_subplot(grid[2, 1]),
                self.figure.add_subplot(grid[3, :])]
        cfg = exp.config
        self.score_plot = plots.grader_score_histogram(axes[0], exp, relevance_floor=cfg.relevance_floor,
                                                       generate_threshold=cfg.generate_threshold)
        self.vector_plot = plots.vector_score_histogram(axes[1], exp, threshold=cfg.vector_score_threshold)
        self.route_plot = plots.route_flow(axes[2], self.report, self.recorded)
        self.fast_path_plot = plots.fast_path_bars(axes[3], exp.fast_path_counts(), self.report)
        self.calls_plot = plots.calls_per_query(axes[4], exp.calls_per_query(), self.report)
        self.image = widgets.Image(format="png", layout=widgets.Layout(max_width=f"{round(figsize[0] * dpi)}px",
                                                                      width="calc(100% - 8px)", height="auto"))

        # The queries whose decision flips, one query's recorded trace, its path, and "Re-run".
        self.show_all = widgets.Checkbox(value=False, description="list every query", indent=False)
        self.show_all.observe(lambda _: self._refresh_queries(), names="value")
        self.queries = widgets.Select(options=[], rows=8, layout=widgets.Layout(width="calc(100% - 8px)"))
        self.queries.add_class("crag-flipped")
        self.queries.observe(lambda _: self._show_selected(), names="value")
        self.trace = widgets.HTML()
        self.trace.add_class("crag-trace")
        self.rerun_button = widgets.Button(description="Re-run", disabled=True,
                                           tooltip="run the real graph for this query at the slider thresholds")
        self.rerun_button.on_click(lambda _: self.rerun_selected())
        self.rerun_result = widgets.HTML()
        self.rerun_result.add_class("crag-rerun")
        self.graph_figure = Figure(figsize=(3.4, 5.0), dpi=dpi)
        FigureCanvasAgg(self.graph_figure)
        self.graph_plot = plots.graph_path(self.graph_figure.add_axes((0.0, 0.0, 1.0, 1.0)), self._structure())
        self.graph = widgets.Image(format="png", layout=widgets.Layout(max_width="300px"))
        self.graph.add_class("crag-graph")
        self.graph_path: list[str] = []  # the path the graph drawing highlights

        if frontier and not has_gold_labels(exp):
            raise ValueError("the frontier panel needs gold labels in the recording (record a labelled set with "
                             "crag-lab eval --save-runs or Lab.run over labelled questions), or pass frontier=False")
        self.frontier: FrontierPanel | None = None
        if frontier:
            self.frontier = FrontierPanel(exp, metric=metric, dpi=dpi)
        elif frontier is None and has_gold_labels(exp):  # automatic: with a metric the labels define, if any
            with contextlib.suppress(NoQualityError):
                self.frontier = FrontierPanel(exp, metric=metric, fallback=True, dpi=dpi)
        if self.frontier is not None:
            self.frontier.on_apply = lambda setting: self.set(**setting)

        self._widget: widgets.Widget | None = None
        self.refresh()

    # ---- public --------------------------------------------------------------------------------

    @property
    def widget(self) -> widgets.Widget:
        """The whole dashboard as one ipywidgets box."""
        if self._widget is None:
            column = widgets.Layout(flex="1 1 440px", min_width="0")
            floats = widgets.VBox([self.controls[n] for n in FLOAT_CONTROLS], layout=column)
            ints = widgets.VBox([*(self.controls[n] for n in INT_CONTROLS),
                                 widgets.HBox([self.controls["prefilter"], self.reset_button],
                                              layout=widgets.Layout(flex_flow="row wrap"))], layout=column)
            head = widgets.HTML(
                f"<b>Threshold explorer</b>: a slider re-decides the recorded grading rounds of {len(self.exp)} "
                "queries (no model calls).")
            # On a projector (1024 x 768) the sliders and the plots they move are on screen together: the
            # sliders (one column in a narrow output, two in a wide one), the plots right under them, then
            # the totals (a fold that closes).
            wrap = widgets.Layout(flex_flow="row wrap")
            picker = widgets.VBox([widgets.HTML("<b>Queries whose decisions change</b>"), self.show_all, self.queries],
                                  layout=widgets.Layout(width="100%", min_width="0"))
            detail = widgets.VBox([self.trace, self.rerun_button, self.rerun_result],
                                  layout=widgets.Layout(flex="1 1 320px", min_width="0", overflow="auto"))
            graph = widgets.VBox([widgets.HTML("<b>Path through the graph</b>"), self.graph],
                                 layout=widgets.Layout(flex="0 1 300px", min_width="0"))
            totals = widgets.Accordion(children=[self.summary], titles=["Totals against the recording"],
                                       selected_index=0)
            parts = [head, widgets.HBox([floats, ints], layout=wrap), self.errors, self.image, totals]
            if self.frontier is not None:
                parts.append(self.frontier.widget)
            self._widget = widgets.VBox([*parts, picker, widgets.HBox([detail, graph], layout=wrap)])
            self._widget.add_class("crag-dashboard")
        return self._widget

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)

    def values(self) -> dict[str, float | int | bool]:
        """The control values as config fields (floats rounded off the slider's binary noise)."""
        out: dict[str, float | int | bool] = {}
        for name, control in self.controls.items():
            value = control.value
            out[name] = round(value, 4) if name in FLOAT_CONTROLS else bool(value) if name in BOOL_CONTROLS else int(value)
        return out

    def set(self, **values: float | int | bool) -> ReplayReport | None:
        """Move sliders programmatically (one replay for all of them); returns the new report, or
        None when the combination is invalid (the error is shown in the dashboard).

        >>> dash.set(relevance_floor=0.5, generate_threshold=0.8)  # doctest: +SKIP
        """
        unknown = set(values) - set(CONTROLS)
        if unknown:
            raise ValueError(f"unknown control(s) {sorted(unknown)}; choose from {list(CONTROLS)}")
        self._hold = True
        try:
            for name, value in values.items():
                self.controls[name].value = value
        finally:
            self._hold = False
        return self.refresh()

    def refresh(self) -> ReplayReport | None:
        """Build a config from the sliders, replay, and update every view; errors go to ``errors``."""
        try:
            config = self.exp.config.with_changes(**self.values())
        except ValidationError as exc:
            self._show_error(exc, _validation_message(exc))
            return None
        try:
            report = self.exp.replay(config)
            self.config, self.report, self.error = config, report, None
            self.errors.outputs = ()
            self._update_plots()
            if self.frontier is not None:
                self.frontier.update(config)
            self.summary.value = self._summary_html()
            self._refresh_queries()
        except Exception as exc:  # a bug should be visible in the dashboard, not lost in a kernel log
            self._show_error(exc, "".join(traceback.format_exception(exc)))
            return None
        return report

    def displayed_counts(self) -> dict[str, int]:
        """The route counts the summary currently shows (what the browser test reads)."""
        match = _COUNTS_RE.search(self.summary.value)
        if match is None:
            raise ValueError("the summary shows no route counts")
        return dict(json.loads(html.unescape(match.group(1))))

    def error_text(self) -> str:
        """Plain text of what the error area shows ('' when empty)."""
        parts = []
        for out in self.errors.outputs:
            parts.append(out.get("text") or out.get("data", {}).get("text/plain", ""))
        return "".join(parts)

    def select(self, query_id: str) -> None:
        """Show one query's recorded trace (as clicking it in the list would)."""
        ids = [v for _, v in self.queries.options]
        if query_id not in ids:
            self.show_all.value = True
        self.queries.value = query_id

    def rerun_selected(self) -> AskResult | None:
        """Run the real graph for the selected query at the slider thresholds and show the answer."""
        query_id = self.queries.value
        if query_id is None or self.lab is None:
            return None
        record = self.exp.record(query_id)
        self.rerun_button.disabled = True
        self.rerun_result.value = "<i>running…</i>"
        try:
            result = self.lab.rerun(record["query"], self.config)
        except Exception as exc:
            self._show_error(exc, "".join(traceback.format_exception(exc)))
            self.rerun_result.value = ""
            return None
        finally:
            self.rerun_button.disabled = False
        self.last_rerun = result
        self.rerun_result.value = _rerun_html(result, self.config)
        self._draw_graph(result.path, f"{query_id}: re-run path")
        return result

    # ---- internals -----------------------------------------------------------------------------

    def _on_change(self, _change: Mapping[str, Any]) -> None:
        if not self._hold:
            self.refresh()

    def _show_error(self, exc: BaseException, text: str) -> None:
        self.error = exc
        self.errors.outputs = ({"output_type": "stream", "name": "stderr", "text": text},)
        note = "<p style='color:#b91c1c'><b>Not replayed:</b> the sliders form an invalid configuration " \
               "(see the message above). The plots still show the last valid setting.</p>"
        if "Not replayed" not in self.summary.value:
            self.summary.value = note + self.summary.value

    def _update_plots(self) -> None:
        cfg, report = self.config, self.report
        self.score_plot.update(relevance_floor=cfg.relevance_floor, generate_threshold=cfg.generate_threshold,
                               draw=False)
        self.vector_plot.update(threshold=cfg.vector_score_threshold, draw=False)
        self.route_plot.update(report, draw=False)
        self.fast_path_plot.update(report, draw=False)
        self.calls_plot.update(report, draw=False)
        buf = io.BytesIO()
        self.figure.savefig(buf, format="png", dpi=self._dpi)  # renders once; the Agg canvas has no idle loop
        self.image.value = buf.getvalue()

    def _summary_html(self) -> str:
        report, recorded = self.report, self.recorded
        t, t0 = report.totals(), recorded.totals()
        counts, counts0 = report.route_counts(), recorded.route_counts()
        lower = any(q.calls_delta_is_lower_bound for q in report.queries)
        cells = "".join(
            f"<td style='padding:2px 8px'>{html.escape(r)}<br><b>{counts[r]}</b>"
            f"{_delta(counts[r] - counts0[r], worse_when_up=True if r == 'RE_RETRIEVE' else None)}</td>"
            for r in counts)
        visited = sum(len(q.actions) for q in report.queries)
        visited0 = sum(len(q.actions) for q in recorded.queries)
        outcome = ", ".join(f"{k} {v}" for k, v in report.outcome_counts().items())
        data = html.escape(json.dumps(counts, sort_keys=False), quote=True)
        config = html.escape(json.dumps(self.values()), quote=True)
        visible = " · ".join(f"{k} {v}" for k, v in counts.items())
        rows = [
            ("queries changed", f"{t['queries_changed']} (their actions or outcome differ from the recording)"),
            ("rounds whose action changed", f"{t['decisions_flipped']} of the {visited} grading rounds replayed"),
            ("pre-filter", f"skips {t['fast_path_gained']} more rounds, {t['fast_path_lost']} fewer"),
            ("passages kept / dropped", f"{t['items_kept']} / {t['items_dropped']} in the {_n(visited, 'round')} "
                                        f"replayed (recorded: {t0['items_kept']} / {t0['items_dropped']} in "
                                        f"{visited0})"),
            ("model calls", _calls_change(t["calls_delta"], lower, t["needs_rerun"])),
            ("final outcomes", html.escape(outcome)),
        ]
        table = "".join(f"<tr><td style='padding:1px 8px'>{k}</td><td style='padding:1px 8px'>{v}</td></tr>"
                        for k, v in rows)
        return (
            f"<div><b>First grading action</b> at <code>{html.escape(_fmt_thresholds(self.config))}</code>: "
            f"<span class=\"crag-route-counts\" data-counts=\"{data}\" data-config=\"{config}\">"
            f"{html.escape(visible)}</span>"
            f"<table style='border-collapse:collapse;margin:4px 0'><tr>{cells}</tr></table>"
            f"<table style='border-collapse:collapse'>{table}</table>"
            + "".join(f"<p style='margin:4px 0'>{html.escape(n)}</p>" for n in surprises(
                t, counts, counts0, self.config, self.exp.config))
            + f"<p style='margin:4px 0'><i>{html.escape(report.limits())}</i></p></div>"
        )

    def _refresh_queries(self) -> None:
        by_id = {q.id: q for q in self.report.queries}
        shown = self.report.queries if self.show_all.value else self.report.flipped
        options = [(_query_label(q), q.id) for q in shown]
        previous = self.queries.value
        self.queries.options = options
        if previous in by_id and previous in [v for _, v in options]:
            self.queries.value = previous
        self._show_selected()

    def _show_selected(self) -> None:
        query_id = self.queries.value
        if query_id is None:
            self.trace.value = ("<i>Select a query to see its recorded trace.</i>" if self.queries.options
                                else "<i>No decision flips at these thresholds.</i>")
            self.rerun_button.disabled = True
            self.rerun_result.value = ""
            self._draw_graph([], "")
            return
        record = self.exp.record(query_id)
        replayed = next(q for q in self.report.queries if q.id == query_id)
        self.trace.value = _trace_html(record, replayed)
        self.rerun_button.disabled = self.lab is None
        self.rerun_result.value = ""
        self._draw_graph(record.get("path", []), f"{query_id}: recorded path")

    def _structure(self) -> Any:
        """The graph to draw: the lab's, or one built only to be drawn (its model is never called)."""
        if self.lab is not None:
            return self.lab.graph()
        from crag_lab.graph import build_graph

        return build_graph(_DrawingOnly(), [], self.exp.config)

    def _draw_graph(self, path: list[str], title: str) -> None:
        self.graph_path = list(path)
        self.graph_plot.update(path, title=title, draw=False)
        buf = io.BytesIO()
        self.graph_figure.savefig(buf, format="png", dpi=self._dpi)
        self.graph.value = buf.getvalue()


class _DrawingOnly:
    """Stands in for a model in a graph that is only drawn."""

    name = "none"

    def complete(self, task: str, prompt: str, inputs: Mapping[str, Any]) -> Any:
        raise RuntimeError("this graph is built only to be drawn; give the Dashboard a Lab to run queries")


__all__ = ["CONTROLS", "Dashboard", "Rerunner", "surprises"]
