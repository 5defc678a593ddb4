"""Plots return their artists, and `update` moves those same artists to a replay's values."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _experiments import mixed_experiment
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from crag_lab import plots
from crag_lab.drawing import graph_parts
from crag_lab.replay import Experiment


@pytest.fixture(scope="module")
def exp() -> Experiment:
    return mixed_experiment()[0]


def new_ax() -> Axes:
    fig = Figure()
    FigureCanvasAgg(fig)
    return fig.subplots()


def heights(container: object) -> list[float]:
    return [p.get_height() for p in container.patches]  # type: ignore[attr-defined]


def test_grader_histogram_splits_gold_and_moves_its_threshold_lines(exp: Experiment) -> None:
    ax = new_ax()
    rows = exp.graded_items()
    hist = plots.grader_score_histogram(ax, exp, relevance_floor=0.3, generate_threshold=0.7)
    assert set(hist.bars) == {"gold", "other", "unlabelled"}
    assert sum(heights(hist.bars["gold"])) == sum(1 for r in rows if r["gold"] is True)
    assert sum(sum(heights(b)) for b in hist.bars.values()) == len(rows)
    assert list(hist.floor_line.get_xdata()) == [0.3, 0.3]
    n_artists = len(ax.patches) + len(ax.lines) + len(ax.texts)

    hist.update(relevance_floor=0.5, generate_threshold=0.85)
    assert list(hist.floor_line.get_xdata()) == [0.5, 0.5]
    assert list(hist.generate_line.get_xdata()) == [0.85, 0.85]
    below = sum(1 for r in rows if r["grader_score"] < 0.5)
    assert hist.text.get_text().startswith(f"{below} below the floor (< 0.5)")
    assert len(ax.patches) + len(ax.lines) + len(ax.texts) == n_artists  # moved, not redrawn


def test_grader_histogram_without_labels_has_one_group() -> None:
    hist = plots.grader_score_histogram(new_ax(), [{"grader_score": 0.2, "gold": None},
                                                   {"grader_score": 1.0, "gold": None}], bins=10)
    assert list(hist.bars) == ["unlabelled"]
    assert heights(hist.bars["unlabelled"])[0] == 0 and heights(hist.bars["unlabelled"])[-1] == 1  # 1.0 counted


def test_vector_histogram_moves_the_prefilter_line(exp: Experiment) -> None:
    hist = plots.vector_score_histogram(new_ax(), exp, threshold=0.8)
    scores = exp.vector_scores()
    assert sum(heights(hist.bars)) == len(scores)
    hist.update(threshold=0.9)
    assert list(hist.line.get_xdata()) == [0.9, 0.9]
    assert hist.text.get_text() == f"{sum(s >= 0.9 for s in scores)} of {len(scores)} ≥ 0.9"


def test_route_flow_bars_follow_the_replay(exp: Experiment) -> None:
    recorded = exp.replay(exp.config)
    bars = plots.route_flow(new_ax(), recorded, recorded)

    def totals() -> dict[str, float]:
        return {r: sum(heights(bars.segments[s])[i] for s in plots.SEGMENTS) for i, r in enumerate(plots.ROUTES)}

    assert totals() == recorded.route_counts()
    stricter = exp.replay(generate_threshold=0.8)
    assert stricter.route_counts() != recorded.route_counts()
    bars.update(stricter)
    assert totals() == stricter.route_counts()
    flow = plots.route_flow_counts(stricter)
    assert heights(bars.segments["needs_rerun"]) == [flow[r]["needs_rerun"] for r in plots.ROUTES]
    assert sum(heights(bars.segments["needs_rerun"])) == len(stricter.needs_rerun)
    assert heights(bars.recorded) == [recorded.route_counts()[r] for r in plots.ROUTES]  # the outline stays
    assert [t.get_text() for t in bars.labels] == [str(stricter.route_counts()[r]) for r in plots.ROUTES]


def test_fast_path_bars_add_gains_and_subtract_losses(exp: Experiment) -> None:
    recorded = exp.fast_path_counts()
    bars = plots.fast_path_bars(new_ax(), recorded, exp.replay(exp.config))
    assert heights(bars.replayed) == heights(bars.recorded)
    report = exp.replay(auto_approve_max_items=4)  # every 4-item round is now "few_context"
    bars.update(report)
    got = dict(zip(bars.keys, heights(bars.replayed), strict=True))
    gained = sum(len(q.fast_path_gained) for q in report.queries)
    assert got["few_context"] == gained == 5
    assert got["high_vector_score"] == recorded["high_vector_score"] - 1
    assert heights(bars.recorded) == [recorded.get(k, 0) for k in bars.keys]
    assert max(heights(bars.replayed)) <= bars.ax.get_ylim()[1]  # the axis grew to fit
    # Queries that skip grading by route are not rounds: they are named, not drawn on the rounds axis.
    assert not {"chitchat", "simple"} & set(bars.keys)


def test_calls_per_query_uses_recorded_plus_delta(exp: Experiment) -> None:
    recorded = exp.calls_per_query()
    bars = plots.calls_per_query(new_ax(), recorded)
    assert heights(bars.replayed) == heights(bars.recorded)
    report = exp.replay(generate_threshold=0.6)
    bars.update(report)
    replayed = plots.replayed_calls(recorded, report)
    assert replayed == [c + q.calls_delta for c, q in zip(recorded, report.queries, strict=True)]
    assert sum(replayed) < sum(recorded)
    assert sum(heights(bars.replayed)) == len(recorded)
    assert all(heights(bars.replayed)[n] == replayed.count(n) for n in range(bars.top))
    assert bars.text.get_text() == f"total {sum(recorded)} → {sum(replayed)} ({sum(replayed) - sum(recorded):+d})"


def test_calibration_plot_draws_the_evaluation_bins() -> None:
    predicted, gold = [0.05, 0.1, 0.55, 0.62, 0.95, 1.0], [False, False, True, False, True, True]
    cal = plots.calibration_plot(new_ax(), predicted, gold, bins=4)
    assert [b.count for b in cal.bins] == [2, 0, 2, 2]
    assert list(cal.curve.get_ydata()) == [0.0, 0.5, 1.0]  # empty bins are skipped
    assert list(cal.curve.get_xdata()) == pytest.approx([0.075, 0.585, 0.975])
    assert cal.ece == pytest.approx((2 * 0.075 + 2 * abs(0.5 - 0.585) + 2 * abs(1 - 0.975)) / 6)
    assert [p.get_height() for p in cal.bars.patches] == pytest.approx([2 / 6, 0, 2 / 6, 2 / 6])
    assert list(cal.diagonal.get_xdata()) == [0, 1]
    assert f"ECE {cal.ece:.2f}" in cal.curve.get_label()


def test_update_asks_the_canvas_to_redraw(exp: Experiment) -> None:
    ax = new_ax()
    calls: list[int] = []
    ax.figure.canvas.draw_idle = lambda *a, **k: calls.append(1)  # type: ignore[method-assign]
    hist = plots.vector_score_histogram(ax, exp)
    hist.update(threshold=0.5)
    hist.update(threshold=0.6, draw=False)
    assert calls == [1]


def test_plots_never_import_ipywidgets() -> None:
    code = "import sys, crag_lab.plots; sys.exit(1 if 'ipywidgets' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_graph_path_highlights_the_nodes_and_edges_a_run_took() -> None:
    from crag_lab.graph import build_graph
    from crag_lab.testing import ScriptedLLM

    graph = build_graph(ScriptedLLM({}), [])
    ranks, back = plots.graph_layers(*graph_parts(graph))
    assert ranks["__start__"] == 0 and ranks["__end__"] == max(ranks.values())
    assert back == {("grade_evidence", "plan"), ("grade_evidence", "analyze_and_route")}  # REFINE, RE_RETRIEVE
    drawn = plots.graph_path(new_ax(), graph, ["analyze_and_route", "synthesize"])
    taken = drawn.edges[("analyze_and_route", "synthesize")].arrow_patch
    skipped = drawn.edges[("analyze_and_route", "plan")].arrow_patch
    bold, thin = taken.get_linewidth(), skipped.get_linewidth()
    assert bold > thin
    assert drawn.nodes["plan"].get_bbox_patch().get_facecolor() != drawn.nodes["synthesize"].get_bbox_patch().get_facecolor()
    drawn.update(["analyze_and_route", "plan", "tool_exec", "grade_evidence", "plan", "tool_exec",
                  "grade_evidence", "synthesize"], title="refined", draw=False)
    assert drawn.nodes["plan"].get_text() == "plan  ×2"
    assert drawn.edges[("grade_evidence", "plan")].arrow_patch.get_linewidth() == bold
    assert drawn.edges[("analyze_and_route", "synthesize")].arrow_patch.get_linewidth() == thin
    assert drawn.title.get_text() == "refined"


def test_mermaid_path_marks_visit_counts_and_only_the_edges_taken() -> None:
    import re

    from crag_lab.drawing import mermaid
    from crag_lab.graph import build_graph
    from crag_lab.testing import ScriptedLLM

    graph = build_graph(ScriptedLLM({}), [])
    refined = ["analyze_and_route", "plan", "tool_exec", "grade_evidence", "plan", "tool_exec", "grade_evidence",
               "synthesize"]
    text = mermaid(graph, refined)
    assert "plan(plan ×2)" in text and "synthesize(synthesize)" in text
    edges = re.findall(r"^\s*(\w+) (?:-->|-\.->) (\w+);$", text, flags=re.MULTILINE)
    styled = re.search(r"linkStyle ([\d,]+) stroke", text)
    assert styled is not None
    taken = {edges[int(i)] for i in styled.group(1).split(",")}
    assert ("grade_evidence", "plan") in taken  # the REFINE loop
    assert ("grade_evidence", "analyze_and_route") not in taken  # RE_RETRIEVE never happened
    assert ("__start__", "analyze_and_route") in taken and ("synthesize", "__end__") in taken
    assert "linkStyle" not in mermaid(graph) and "visited" not in mermaid(graph)
