"""Recording and replay: replay at the recorded thresholds is exact; changed thresholds flip as the spec says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crag_lab import CragConfig, Lab
from crag_lab.replay import ENGINES, Engine, Experiment, replay_record
from crag_lab.testing import ScriptedLLM, StaticTool

COMPLEX = '{"complexity": "complex", "suggested_tools": ["vector_search"]}'
PLAN = '[{"tool": "vector_search", "args": {"query": "q"}}]'


def items(n: int, vscore: float = 0.5, prefix: str = "d") -> list[dict[str, Any]]:
    return [{"text": f"{prefix}{i} text", "path": f"{prefix}{i}.md", "line": i + 1, "line_end": i + 2, "score": vscore}
            for i in range(n)]


def one_round_lab(grades: list[str], vscore: float = 0.5, n: int = 4, config: CragConfig | None = None) -> Lab:
    """A lab whose first plan calls vector_search and later plans call keyword_search (new items each time)."""
    refine_plans = [f'[{{"tool": "keyword_search", "args": {{"query": "r{i}"}}}}]' for i in range(8)]
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": [PLAN, *refine_plans] * 3, "grade": grades, "synthesize": "A [1]."})
    keyword_batches = [items(n, 0.0, f"k{i}_") for i in range(24)]
    config = (config or CragConfig()).model_copy(update={"model_retries": 0})
    return Lab([StaticTool("vector_search", items(n, vscore)), StaticTool("keyword_search", keyword_batches)],
               llm=llm, config=config)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> Engine:
    """Every replay test runs with the default (vectorised) engine and the scalar reference."""
    engine: Engine = request.param
    return engine


def test_replay_at_recorded_thresholds_reproduces_every_decision(engine: Engine) -> None:
    lab = one_round_lab(["[0.9, 0.8, 0.7, 0.75]", "[0.5, 0.4, 0.1, 0.2]", "[0.9, 0.9, 0.9, 0.9]",
                         "[0.1, 0.1, 0.1, 0.1]", "[0.2, 0.25, 0.1, 0.05]", "[0.6, 0.6, 0.6, 0.6]"])
    exp = lab.run(["q1", "q2", "q3"], shadow_grading=False)
    report = exp.replay(exp.config, engine=engine)
    for rec, rep in zip(exp.records, report.queries, strict=True):
        assert rep.actions == [r["action"] for r in rec["rounds"]]
        assert rep.outcome == rep.recorded_outcome
        assert rep.flipped_rounds == [] and rep.calls_delta == 0 and rep.tokens_delta == 0
    assert report.totals()["queries_changed"] == 0


def test_replay_flips_refine_to_generate_when_the_generate_threshold_drops(engine: Engine) -> None:
    lab = one_round_lab(["[0.6, 0.6, 0.6, 0.6]", "[0.9, 0.9, 0.9, 0.9]"])
    exp = lab.run(["q1"], shadow_grading=False)
    rec = exp.records[0]
    assert [r["action"] for r in rec["rounds"]] == ["REFINE", "GENERATE"]
    at_06 = exp.replay(generate_threshold=0.6, engine=engine).queries[0]
    assert at_06.actions == ["GENERATE"] and at_06.flipped_rounds == [1]
    assert at_06.outcome == "GENERATE"
    assert at_06.calls_delta == -2  # the second round's plan and grade calls are saved
    assert at_06.tokens_delta < 0
    just_above = exp.replay(generate_threshold=0.61, engine=engine).queries[0]
    assert just_above.actions == ["REFINE", "GENERATE"]


def test_replay_says_when_it_cannot_know(engine: Engine) -> None:
    lab = one_round_lab(["[0.75, 0.75, 0.75, 0.75]"])
    exp = lab.run(["q1"], shadow_grading=False)
    report = exp.replay(generate_threshold=0.8, engine=engine)  # GENERATE becomes REFINE: a round never recorded
    [q] = report.queries
    assert q.actions == ["REFINE"] and q.outcome == "needs_rerun"
    # At least the next round's plan (its grading may be skipped by the pre-filter); the re-run spends that or more.
    assert q.calls_delta_is_lower_bound and q.calls_delta == 1
    rerun = one_round_lab(["[0.75, 0.75, 0.75, 0.75]"] * 3).run(["q1"], config=report.config, shadow_grading=False)
    assert len(rerun.records[0]["usage"]) >= len(exp.records[0]["usage"]) + q.calls_delta
    assert "lab.rerun" in report.limits()


@pytest.mark.parametrize(("floor", "dropped"), [(0.3, 1), (0.29, 0), (0.41, 2)])
def test_replay_floor_changes_which_items_are_dropped(floor: float, dropped: int, engine: Engine) -> None:
    lab = one_round_lab(["[0.9, 0.9, 0.4, 0.29]"])
    exp = lab.run(["q1"], shadow_grading=False)
    q = exp.replay(relevance_floor=floor, engine=engine).queries[0]
    assert q.items_dropped == dropped


def test_shadow_grades_let_replay_undo_a_fast_path(engine: Engine) -> None:
    lab = one_round_lab(["[0.2, 0.1, 0.9, 0.1]"], vscore=0.85)  # all cosines >= 0.8: high_vector_score fires
    exp = lab.run(["q1"], shadow_grading=True)
    rnd = exp.records[0]["rounds"][0]
    assert rnd["rule"] == "high_vector_score" and rnd["shadow"]["scores"] == [0.2, 0.1, 0.9, 0.1]
    assert [u["node"] for u in exp.records[0]["usage"]] == ["analyze_and_route", "plan", "synthesize"]  # shadow call not counted
    q = exp.replay(vector_score_threshold=0.9, engine=engine).queries[0]
    assert q.fast_path_lost == ["high_vector_score"]
    assert q.actions == ["GENERATE"]  # only 0.9 survives the floor: its mean is 0.9
    assert q.items_dropped == 3
    assert q.calls_delta == 1  # the grader call the rule used to save
    assert q.tokens_delta > 0
    q2 = exp.replay(vector_score_threshold=0.9, relevance_floor=0.05, engine=engine).queries[0]
    assert q2.actions == ["REFINE"] and q2.outcome == "needs_rerun"  # mean 0.325: a round never recorded


def test_replay_without_shadow_grades_needs_a_rerun(engine: Engine) -> None:
    lab = one_round_lab(["[0.2, 0.1, 0.9, 0.1]"], vscore=0.85)
    exp = lab.run(["q1"], shadow_grading=False)
    q = exp.replay(vector_score_threshold=0.9, engine=engine).queries[0]
    assert q.outcome == "needs_rerun" and "shadow" in q.note


def test_lower_max_iterations_stops_early(engine: Engine) -> None:
    lab = one_round_lab(["[0.5, 0.5, 0.5, 0.5]", "[0.5, 0.5, 0.5, 0.5]", "[0.5, 0.5, 0.5, 0.5]"],
                        config=CragConfig(max_iterations=3))
    exp = lab.run(["q1"], shadow_grading=False)
    assert len(exp.records[0]["rounds"]) >= 2
    q = exp.replay(max_iterations=1, engine=engine).queries[0]
    assert q.outcome == "capped" and q.actions == ["REFINE"] and q.calls_delta < 0


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    lab = one_round_lab(["[0.9, 0.8, 0.7, 0.75]"])
    exp = lab.run([{"id": "x1", "question": "q1", "gold": ["d0.md:L1-L2"]}])
    path = exp.save(tmp_path / "exp.jsonl")
    loaded = Experiment.load(path)
    assert loaded.config == exp.config
    assert loaded.records[0]["id"] == "x1"
    assert loaded.records[0]["labels"]["gold_paths"] == ["d0.md"]
    assert replay_record(loaded.records[0], loaded.config).actions == ["GENERATE"]
    (tmp_path / "bad.jsonl").write_text('{"kind": "other"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="not a crag_lab experiment"):
        Experiment.load(tmp_path / "bad.jsonl")


def test_graded_items_carry_gold_labels() -> None:
    lab = one_round_lab(["[0.9, 0.8, 0.2, 0.1]"])
    exp = lab.run([{"id": "x1", "question": "q1", "gold": ["d0.md:L1-L2"]}])
    rows = exp.graded_items()
    assert [r["gold"] for r in rows] == [True, False, False, False]
    assert [r["grader_score"] for r in rows] == [0.9, 0.8, 0.2, 0.1]


def test_gold_means_overlapping_lines_of_a_labelled_location() -> None:
    """One meaning of gold (docs/glossary.md): the lines overlap; another part of the same file is not gold."""
    items = [{"id": "d0.md:L1-L4", "path": "d0.md", "line": 1, "tool": "grep", "grader_score": 0.9},
             {"id": "d0.md:L50-L60", "path": "d0.md", "line": 50, "tool": "grep", "grader_score": 0.8}]
    rnd = {"iteration": 1, "rule": None, "items": items, "kept": [], "dropped": [], "action": "GENERATE"}
    answerable = {"id": "x1", "query": "q", "rounds": [rnd],
                  "labels": {"gold": ["d0.md:L3-L3"], "gold_paths": ["d0.md"]}}
    unanswerable = {"id": "x2", "query": "q", "rounds": [rnd], "labels": {"answerable": False}}
    exp = Experiment(CragConfig(), [answerable, unanswerable], {})
    assert [r["gold"] for r in exp.graded_items()] == [True, False, False, False]
