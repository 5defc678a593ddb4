"""The dashboard's frontier panel: the star follows the sliders, a Pareto point moves the sliders."""

from __future__ import annotations

import json
import re

import pytest
from _experiments import mixed_experiment

from crag_lab.dashboard import Dashboard
from crag_lab.dashboard_frontier import FrontierPanel
from crag_lab.replay import Experiment

GRID = {"relevance_floor": [0.0, 0.3, 0.5, 0.75], "generate_threshold": [0.3, 0.5, 0.7, 0.9],
        "vector_score_threshold": [0.6, 0.8, 0.9]}


@pytest.fixture(scope="module")
def exp() -> Experiment:
    return mixed_experiment()[0]


def shown_point(panel: FrontierPanel) -> dict[str, float]:
    match = re.search(r'data-point="([^"]*)"', panel.caption.value)
    assert match, panel.caption.value
    return dict(json.loads(match.group(1).replace("&quot;", '"')))


def one_setting(exp: Experiment, **values: float) -> dict[str, float]:
    config = exp.config.with_changes(**values)
    front = exp.frontier(**{k: [getattr(config, k)] for k in GRID})
    return {k: float(v[0]) for k, v in front.scores().items()}


def test_a_labelled_recording_opens_with_its_frontier(exp: Experiment) -> None:
    dash = Dashboard(None, exp)
    assert dash.frontier is not None
    assert dash.frontier.widget in dash.widget.children
    expected = one_setting(exp)
    assert shown_point(dash.frontier)["calls_per_question"] == pytest.approx(expected["calls_per_question"])
    pareto = exp.frontier().pareto()
    assert len(dash.frontier.points.options) == len(pareto)
    assert [p["calls_per_question"] for p in dash.frontier.pareto] == pytest.approx(
        pareto["calls_per_question"].tolist())


def test_moving_a_slider_moves_the_star_to_what_replay_measures(exp: Experiment) -> None:
    dash = Dashboard(None, exp)
    before = list(dash.frontier.plot.current.get_xydata()[0]) if dash.frontier else []
    dash.controls["generate_threshold"].value = 0.5  # what the browser does
    assert dash.frontier is not None
    expected = one_setting(exp, generate_threshold=0.5)
    x, y = dash.frontier.plot.current.get_xydata()[0]
    assert (x, y) == pytest.approx((expected["calls_per_question"], expected["gold_f1"]))
    assert [x, y] != pytest.approx(before)
    point = shown_point(dash.frontier)
    assert point["generate_threshold"] == 0.5
    assert point["gold_f1"] == pytest.approx(expected["gold_f1"], abs=1e-6)


def test_a_pareto_point_moves_the_sliders_there(exp: Experiment) -> None:
    dash = Dashboard(None, exp)
    panel = dash.frontier
    assert panel is not None
    assert panel.apply_button.disabled  # nothing chosen yet
    k = len(panel.points.options) - 1
    panel.points.value = k
    assert not panel.apply_button.disabled
    panel.apply_button.click()
    target = panel.pareto[k]
    values = dash.values()
    for name in ("relevance_floor", "generate_threshold", "vector_score_threshold", "auto_approve_max_items",
                 "max_iterations"):
        assert values[name] == pytest.approx(target[name]), name
    assert dash.displayed_counts() == exp.replay(dash.config).route_counts()
    # The star now sits on the chosen point, ringed.
    assert tuple(panel.plot.current.get_xydata()[0]) == pytest.approx((target["calls_per_question"], target["gold_f1"]))
    assert tuple(panel.plot.chosen.get_xydata()[0]) == pytest.approx((target["calls_per_question"], target["gold_f1"]))


def test_another_metric_redraws_the_pareto_set(exp: Experiment) -> None:
    panel = FrontierPanel(exp, **GRID)
    panel.set_metric("gold_recall")
    assert [p["gold_recall"] for p in panel.pareto] == pytest.approx(
        exp.frontier(**GRID).pareto("gold_recall")["gold_recall"].tolist())
    assert panel.plot.ax.get_ylabel().startswith("gold evidence kept")


def test_a_recording_without_labels_has_no_panel_and_asking_for_one_says_why(exp: Experiment) -> None:
    bare = Experiment(exp.config, [{**r, "labels": {}} for r in exp.records], exp.meta)
    assert Dashboard(None, bare).frontier is None
    with pytest.raises(ValueError, match="gold labels"):
        Dashboard(None, bare, frontier=True)
    assert Dashboard(None, exp, frontier=False).frontier is None


def test_bad_panel_arguments_name_the_choices(exp: Experiment) -> None:
    with pytest.raises(ValueError, match="sweeps only the dashboard's sliders"):
        FrontierPanel(exp, aggregator=["max"])
    panel = FrontierPanel(exp, **GRID)
    with pytest.raises(ValueError, match="choose one of"):
        panel.set_metric("answer_f1")


def test_labels_that_define_no_evidence_f1_open_with_a_metric_they_define(exp: Experiment) -> None:
    """Only ungraded questions (chitchat, simple): gold F1 is undefined everywhere; the dashboard still opens."""
    ungraded = Experiment(exp.config, [r for r in exp.records if not r.get("rounds")], exp.meta)
    dash = Dashboard(None, ungraded)
    assert dash.frontier is None or dash.frontier.metric != "gold_f1"
    with pytest.raises(ValueError, match=r"define no 'gold_f1'|no quality metric"):
        FrontierPanel(ungraded, metric="gold_f1")
