"""The dashboard replays on every slider change (no model calls), shows errors, and re-runs one query."""

from __future__ import annotations

import pytest
from _experiments import COMPLEX, mixed_experiment, scripted_lab

from crag_lab.dashboard import CONTROLS, Dashboard
from crag_lab.replay import Experiment
from crag_lab.testing import ScriptedLLM


@pytest.fixture
def recorded() -> tuple[Experiment, list[ScriptedLLM]]:
    return mixed_experiment()


@pytest.fixture
def dash(recorded: tuple[Experiment, list[ScriptedLLM]]) -> Dashboard:
    lab, _ = scripted_lab(COMPLEX, "[0.9, 0.9, 0.9, 0.9]")
    return lab.dashboard(recorded[0])


def test_opens_at_the_recorded_thresholds(dash: Dashboard) -> None:
    exp = dash.exp
    assert dash.values() == exp.config.thresholds() | {"prefilter": True}
    assert dash.displayed_counts() == exp.replay(exp.config).route_counts()
    assert dash.queries.options == ()  # nothing flips at the recorded thresholds
    assert bytes(dash.image.value).startswith(b"\x89PNG")
    assert all(dash.controls[name].continuous_update is False for name in CONTROLS if name != "prefilter")
    assert "crag-dashboard" in dash.widget._dom_classes


@pytest.mark.parametrize("change", [{"generate_threshold": 0.8}, {"generate_threshold": 0.6},
                                    {"relevance_floor": 0.5}, {"vector_score_threshold": 0.9},
                                    {"auto_approve_max_items": 4}, {"max_iterations": 1}, {"prefilter": False}])
def test_a_slider_change_shows_what_replay_gives_without_calling_a_model(
    recorded: tuple[Experiment, list[ScriptedLLM]], change: dict[str, float | bool]
) -> None:
    exp, llms = recorded
    dash = Dashboard(None, exp)
    calls_before = [len(llm.calls) for llm in llms]
    [(name, value)] = change.items()
    dash.controls[name].value = value  # what the browser does
    expected = exp.replay(**change)
    assert dash.config.model_dump() == expected.config.model_dump()
    assert dash.displayed_counts() == expected.route_counts()
    assert [v for _, v in dash.queries.options] == [q.id for q in expected.flipped]
    totals = expected.totals()
    visited = sum(len(q.actions) for q in expected.queries)
    assert f"{totals['decisions_flipped']} of the {visited} grading rounds replayed" in dash.summary.value
    assert f"{totals['items_dropped']} in the {visited} round" in dash.summary.value  # dropped: per replayed round
    assert expected.limits().split(":")[0] in dash.summary.value
    assert [len(llm.calls) for llm in llms] == calls_before


def test_plots_move_with_the_sliders(dash: Dashboard) -> None:
    png = dash.image.value
    report = dash.set(relevance_floor=0.5, generate_threshold=0.8, vector_score_threshold=0.9)
    assert report is not None
    assert list(dash.score_plot.floor_line.get_xdata()) == [0.5, 0.5]
    assert list(dash.score_plot.generate_line.get_xdata()) == [0.8, 0.8]
    assert list(dash.vector_plot.line.get_xdata()) == [0.9, 0.9]
    stacked = [sum(dash.route_plot.segments[s].patches[i].get_height() for s in dash.route_plot.segments)
               for i in range(5)]
    assert stacked == list(report.route_counts().values())
    assert dash.image.value != png


def test_invalid_combination_is_shown_not_swallowed(dash: Dashboard) -> None:
    before = dash.displayed_counts()
    assert dash.set(relevance_floor=0.9) is None  # above generate_threshold 0.7
    assert "relevance_floor" in dash.error_text() and "generate_threshold" in dash.error_text()
    assert dash.error is not None
    assert "Not replayed" in dash.summary.value
    assert dash.displayed_counts() == before  # the last valid replay stays on screen
    assert dash.set(generate_threshold=0.95) is not None
    assert dash.error_text() == "" and dash.error is None
    assert dash.displayed_counts() == dash.exp.replay(relevance_floor=0.9, generate_threshold=0.95).route_counts()


def test_unknown_control_names_the_choices(dash: Dashboard) -> None:
    with pytest.raises(ValueError, match="relevance_floor"):
        dash.set(relevance=0.5)


def test_selecting_a_flipped_query_shows_its_trace_and_path(dash: Dashboard) -> None:
    dash.set(generate_threshold=0.8)
    dash.queries.value = "r1"
    trace = dash.trace.value
    assert "needs refining" in trace and "0.60" in trace and "needs_rerun" in trace
    assert dash.graph_path == dash.exp.record("r1")["path"]
    nodes = dash.graph_plot.nodes
    assert nodes["plan"].get_text() == "plan  ×2"  # REFINE went back to plan once
    visited = nodes["plan"].get_bbox_patch().get_facecolor()
    assert nodes["synthesize"].get_bbox_patch().get_facecolor() == visited
    assert dash.graph_plot.title.get_text() == "r1: recorded path"
    assert bytes(dash.graph.value).startswith(b"\x89PNG")
    assert dash.rerun_button.disabled is False


def test_rerun_button_runs_the_real_graph(dash: Dashboard) -> None:
    dash.set(generate_threshold=0.8)
    dash.select("g2")
    llm = dash.lab.model  # type: ignore[union-attr]
    assert isinstance(llm, ScriptedLLM) and llm.calls == []
    dash.rerun_button.click()
    assert dash.last_rerun is not None
    assert [c["task"] for c in llm.calls] == ["analyze", "plan", "grade", "synthesize"]
    assert dash.last_rerun.route == "GENERATE"  # the lab's grader says 0.9 ≥ 0.8
    assert "grade_evidence" in dash.rerun_result.value and "An answer" in dash.rerun_result.value
    assert "LLM Usage Stats" not in dash.rerun_result.value  # the answer, not its stats block
    assert "generate 0.8" in dash.rerun_result.value
    assert dash.graph_path == dash.last_rerun.path and dash.graph_plot.title.get_text() == "g2: re-run path"


def test_select_lists_every_query_on_request(dash: Dashboard) -> None:
    dash.select("c1")  # not flipped: the list widens to every query
    assert dash.show_all.value is True
    assert len(dash.queries.options) == len(dash.exp)
    assert "no grading rounds" in dash.trace.value


def test_without_a_lab_rerun_is_disabled(recorded: tuple[Experiment, list[ScriptedLLM]]) -> None:
    dash = Dashboard(None, recorded[0])
    dash.set(generate_threshold=0.8)
    dash.select("g1")
    assert dash.rerun_button.disabled is True
    assert dash.rerun_selected() is None
    assert dash.graph_path == dash.exp.record("g1")["path"]  # still drawn, from a graph built to be drawn


def test_reset_returns_to_the_recorded_config(dash: Dashboard) -> None:
    dash.set(generate_threshold=0.6, prefilter=False)
    assert dash.config.prefilter is False and "pre-filter off" in dash.summary.value
    dash.reset_button.click()
    assert dash.config.model_dump() == dash.exp.config.model_dump()
    assert dash.displayed_counts() == dash.recorded.route_counts()


def test_an_experiment_without_grading_rounds_still_displays(recorded: tuple[Experiment, list[ScriptedLLM]]) -> None:
    exp = recorded[0]
    chitchat_only = Experiment(exp.config, exp.records[:1])
    dash = Dashboard(None, chitchat_only)
    assert dash.set(generate_threshold=0.5) is not None
    assert dash.displayed_counts() == {"chitchat": 1, "simple": 0, "GENERATE": 0, "REFINE": 0, "RE_RETRIEVE": 0}


def test_counter_intuitive_numbers_get_one_sentence_each() -> None:
    from crag_lab.config import CragConfig
    from crag_lab.dashboard import surprises

    base = CragConfig()
    higher = base.with_changes(relevance_floor=0.6, generate_threshold=0.8)
    notes = surprises({"calls_delta": 2, "tokens_delta": -500}, {"GENERATE": 9}, {"GENERATE": 5}, higher, base)
    assert len(notes) == 2
    assert notes[0].startswith("Calls up while tokens go down") and "GENERATE rises" in notes[1]
    # Nothing surprising: no sentence.
    assert surprises({"calls_delta": -2, "tokens_delta": -500}, {"GENERATE": 4}, {"GENERATE": 5}, higher, base) == []
    assert surprises({"calls_delta": 1, "tokens_delta": 300}, {"GENERATE": 6}, {"GENERATE": 5}, base, base) == []


def test_the_trace_and_the_rerun_show_how_the_offline_model_read_the_evidence() -> None:
    from crag_lab import CragConfig, Lab
    from crag_lab.offline import OfflineModel
    from crag_lab.testing import StaticTool

    rows = [{"text": "# api-gateway\n\n| Field | Value |\n|---|---|\n| Public TLS port | 8443 |\n| Admin port | 9000 |",
             "path": "gateway.md", "line": 1, "line_end": 6, "score": 0.7, "title": "api-gateway"}]
    lab = Lab([StaticTool("vector_search", rows)], llm=OfflineModel(), config=CragConfig(model_retries=0))
    exp = lab.run([{"id": "p1", "question": "Which port does the api-gateway use for public TLS traffic?"}])
    dash = lab.dashboard(exp)
    dash.select("p1")
    read = exp.records[0]["read"]
    assert read["units"][0]["unit"] in dash.trace.value and "crag-scroll" in dash.trace.value
    assert "<b>Answered:</b> the rules' best unit is in item [1]" in dash.trace.value
    dash.rerun_button.click()
    assert dash.last_rerun is not None and "how it read the evidence" in dash.rerun_result.value
    assert read["units"][0]["unit"] in dash.rerun_result.value
    # A recording without the reading (a scripted model's) shows none.
    scripted, _ = mixed_experiment()
    plain = Dashboard(None, scripted)
    plain.select(scripted.records[0]["id"])
    assert "crag-scroll" not in plain.trace.value and "Answered:" not in plain.trace.value
