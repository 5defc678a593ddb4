"""Risk-controlled thresholds (crag_lab.replay.guarantee): p-values, family-wise control, and the coverage
of the guarantee on a synthetic recording whose true risks are known."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy.stats import binom

from crag_lab import CragConfig
from crag_lab.decisions import decide
from crag_lab.replay import Experiment
from crag_lab.replay.guarantee import (
    Guarantee,
    GuaranteeResult,
    calls_bound,
    family_wise,
    hb_p_value,
    hoeffding_p_value,
    parse_guarantees,
    question_losses,
    risk_controlled,
)

FLOORS = [round(x, 2) for x in np.arange(0.0, 0.701, 0.05)]


def synthetic(n: int, seed: int = 0, items: int = 6) -> Experiment:
    """``n`` one-round questions of ``items`` keyword items each; an item is gold with probability equal
    to its grade (a calibrated grader), so a floor's true share of gold dropped is known in the limit."""
    rng = np.random.default_rng(seed)
    config = CragConfig(max_iterations=1)
    records: list[Any] = []
    for q in range(n):
        grades = np.round(rng.beta(0.8, 1.2, items), 3).tolist()
        gold = rng.random(items) < np.asarray(grades)
        ids = [f"q{q}/d{i}.md:L1-L2" for i in range(items)]
        d = decide(grades, floor=0.3, generate_threshold=0.7)
        rnd = {"iteration": 1, "round_tools": ["keyword_search"], "rule": None, "parse_ok": True, "shadow": None,
               "items": [{"id": ids[i], "path": f"q{q}/d{i}.md", "line": 1, "tool": "keyword_search",
                          "vector_score": None, "grader_score": grades[i], "new": True} for i in range(items)],
               "grader_calls": 1, "grader_tokens": 100, "aggregate": d.aggregate, "action": d.action,
               "kept": [ids[i] for i in d.kept], "dropped": [ids[i] for i in d.dropped], "capped": True,
               "thresholds": {"relevance_floor": 0.3, "generate_threshold": 0.7, "vector_score_threshold": 0.8,
                              "auto_approve_max_items": 2, "max_iterations": 1, "aggregator": "mean"}}
        records.append({"id": f"q{q}", "query": f"question {q}", "complexity": "complex", "mode": "knowledge_base",
                        "labels": {"gold": [ids[i] for i in range(items) if gold[i]], "answerable": True,
                                   "answers": [], "complexity": "complex"},
                        "rounds": [rnd], "usage": [], "answer": "", "citations": []})
    return Experiment(config, records, {"model": "synthetic"})


# ---- p-values and family-wise control ----------------------------------------------------------

def test_hb_p_value_is_the_smaller_of_its_hoeffding_and_bentkus_parts() -> None:
    n, alpha = 50, 0.2
    for risk in (0.0, 0.04, 0.1, 0.16):
        a = min(risk, alpha)
        h1 = (a * math.log(a / alpha) if a > 0 else 0.0) + (1 - a) * math.log((1 - a) / (1 - alpha))
        expected = min(1.0, math.exp(-n * h1), math.e * binom.cdf(math.ceil(n * risk - 1e-9), n, alpha))
        assert float(hb_p_value(risk, n, alpha)) == pytest.approx(expected, rel=1e-9)
    assert float(hb_p_value(0.3, n, alpha)) == 1.0  # the risk above the bound: no evidence at all
    assert float(hb_p_value(0.0, 0, alpha)) == 1.0  # no question: no evidence
    assert float(hoeffding_p_value(0.1, 100, 0.2)) == pytest.approx(math.exp(-2 * 100 * 0.01))


def test_p_values_are_valid_at_the_boundary_of_the_null() -> None:
    """With the true risk exactly alpha, P(p <= delta) <= delta (Bernoulli losses, 4000 draws)."""
    rng = np.random.default_rng(1)
    n, alpha, draws = 80, 0.15, 4000
    means = rng.binomial(n, alpha, draws) / n
    for p in (hb_p_value(means, n, alpha), hoeffding_p_value(means, n, alpha)):
        for delta in (0.05, 0.1, 0.2):
            assert (p <= delta).mean() <= delta + 3 * math.sqrt(delta * (1 - delta) / draws)
    # ...and HB has power where Hoeffding has little: a true risk of 0.05 under the bound 0.15
    low = rng.binomial(n, 0.05, draws) / n
    assert (hb_p_value(low, n, alpha) <= 0.1).mean() > (hoeffding_p_value(low, n, alpha) <= 0.1).mean() + 0.1


def test_fixed_sequence_stops_at_the_first_failure_and_bonferroni_divides_delta() -> None:
    p = np.array([0.001, 0.03, 0.3, 0.001])
    assert family_wise(p, 0.1, "fixed_sequence", np.array([0, 1, 2, 3])).tolist() == [True, True, False, False]
    assert family_wise(p, 0.1, "fixed_sequence", np.array([3, 0, 2, 1])).tolist() == [True, False, False, True]
    assert family_wise(p, 0.1, "bonferroni", np.arange(4)).tolist() == [True, False, False, True]  # 0.1/4 = 0.025
    with pytest.raises(ValueError, match="unknown procedure"):
        family_wise(p, 0.1, "holm", np.arange(4))  # type: ignore[arg-type]


def test_guarantees_parse_and_bad_ones_name_the_problem() -> None:
    assert parse_guarantees("gold_dropped<=0.10, calls<=3.5") == [Guarantee("gold_dropped", 0.1),
                                                                  Guarantee("calls", 3.5)]
    with pytest.raises(ValueError, match="LOSS<=VALUE"):
        Guarantee.parse("gold_dropped < 0.1")
    with pytest.raises(ValueError, match="unknown loss 'recall'"):
        Guarantee.parse("recall<=0.1")
    with pytest.raises(ValueError, match=r"must lie in \(0, 1\)"):
        Guarantee.parse("false_abstention<=1.5")
    with pytest.raises(ValueError, match="bounded once"):
        parse_guarantees(["calls<=3", "calls<=4"])
    assert calls_bound(3) == 10


# ---- coverage on a recording whose truth is known ------------------------------------------------

def test_the_guarantee_holds_over_random_calibration_sets() -> None:
    """Over 300 calibration sets of 150 questions drawn (with replacement: independent questions) from a
    population of 3000 synthetic questions, tested along the floor from 0 up in steps of 0.01, the
    guaranteed pick's true (population) share of gold dropped exceeds alpha in at most delta of them,
    within Monte-Carlo slack (3 standard errors of a rate delta over 300 draws: 0.052). The naive pick
    (the best setting whose calibration risk is under alpha, no correction) violates far more often,
    so this check can fail."""
    population = synthetic(3000, seed=7)
    floors = [round(x, 2) for x in np.arange(0.0, 0.701, 0.01)]
    front = population.frontier(relevance_floor=floors, generate_threshold=[0.7], vector_score_threshold=[0.8])
    losses = question_losses(population, front, "gold_dropped")
    eligible = np.flatnonzero(losses.eligible)
    truth = losses.values[:, eligible].mean(axis=1)  # the population risk of every setting
    alpha, delta, trials, n = 0.1, 0.1, 300, 150
    assert truth.min() < alpha / 2 and truth.max() > 2 * alpha  # the bound cuts the grid: a real choice
    rng = np.random.default_rng(0)
    picks, naive = [], []
    for _ in range(trials):
        sample = rng.choice(eligible, n, replace=True)
        result = risk_controlled(population, "gold_dropped<=0.1", delta=delta, front=front, order=["relevance_floor"],
                                 losses={"gold_dropped": losses}, questions=sample)
        picks.append(result.index)
        empirical = losses.values[:, sample].mean(axis=1)
        f1 = front.scores(sample)["gold_f1"]
        naive.append(int(np.flatnonzero(empirical <= alpha)[np.argmax(f1[empirical <= alpha])]))
    chosen = [p for p in picks if p is not None]
    assert len(chosen) >= 0.9 * trials  # the guarantee is not bought by refusing to pick
    violation = sum(truth[p] > alpha for p in chosen) / trials
    assert violation <= delta + 3 * math.sqrt(delta * (1 - delta) / trials)
    assert sum(truth[p] > alpha for p in naive) / trials > 2 * delta
    assert np.mean([truth[p] for p in chosen]) > alpha / 3  # and not by picking only the safest setting


def test_tune_with_a_guarantee_reports_the_procedure_and_its_numbers() -> None:
    exp = synthetic(400, seed=3)
    grid = {"relevance_floor": FLOORS, "generate_threshold": [0.7], "vector_score_threshold": [0.8]}
    result = exp.tune(guarantee="gold_dropped<=0.25", delta=0.1, **grid)
    assert isinstance(result, GuaranteeResult)
    losses = question_losses(exp, result.frontier, "gold_dropped")
    n = int(losses.eligible.sum())
    assert result.n == {"gold_dropped": n} and 0 < n <= 400
    risk = losses.values[:, losses.eligible].mean(axis=1)
    np.testing.assert_allclose(result.risk["gold_dropped"], risk)
    np.testing.assert_allclose(result.p_value, hb_p_value(risk, n, 0.25))
    assert result.valid.any() and not result.valid.all()
    assert result.index is not None and result.valid[result.index]
    assert (risk[result.valid] < 0.25).all()
    # fixed sequence from the recorded floor outward: the guaranteed floors are one unbroken run around 0.3
    floors = sorted(result.frontier.settings.relevance_floor[result.valid].tolist())
    assert 0.3 in floors and floors == [f for f in FLOORS if floors[0] <= f <= floors[-1]]
    # the pick is the guaranteed setting with the most gold F1
    f1 = result.frontier.table()["gold_f1"].to_numpy()
    assert f1[result.index] == f1[result.valid].max()
    summary = result.summary()
    assert summary["procedure"] == "fixed_sequence" and summary["delta"] == 0.1
    assert summary["setting"]["relevance_floor"] == result.setting["relevance_floor"]  # type: ignore[index]
    assert len(result.table()) == int(result.valid.sum())
    # Bonferroni over the 15 settings tests each at 0.1/15: never more settings than p <= delta allows
    bonf = exp.tune(guarantee="gold_dropped<=0.25", delta=0.1, procedure="bonferroni", **grid)
    assert (bonf.valid == (bonf.p_value <= 0.1 / len(bonf.p_value))).all()


def test_a_question_that_leaves_the_recording_counts_as_the_worst_loss_or_is_left_out() -> None:
    exp = synthetic(60, seed=5)
    # one round recorded at max_iterations 1: a setting that allows more rounds leaves the recording
    front = exp.frontier(relevance_floor=[0.3], generate_threshold=[0.7], vector_score_threshold=[0.8],
                         max_iterations=[1, 3])
    rerun = front.per_query["needs_rerun"] > 0
    assert not rerun[0].any() and rerun[1].any()
    worst = question_losses(exp, front, "gold_dropped")
    assert (worst.values[1][rerun[1]] == 1.0).all() and worst.unknown[1][rerun[1]].all()
    with pytest.warns(UserWarning, match="left out"):
        left = risk_controlled(exp, "gold_dropped<=0.5", front=front, needs_rerun="exclude")
    kept = worst.eligible & ~rerun[1]
    assert left.risk["gold_dropped"][1] == pytest.approx(worst.values[1][kept].mean())


def test_calls_are_bounded_through_the_stated_cap() -> None:
    exp = synthetic(200, seed=2)
    for rec in exp.records:  # 4 calls each: analyze, plan, grade, synthesize
        rec["usage"] = [{"node": n, "task": t, "prompt_tokens": 10, "completion_tokens": 1, "latency_ms": 1.0,
                         "ok": True, "attempts": 1, "iteration": 0}
                        for n, t in (("analyze_and_route", "analyze"), ("plan", "plan"),
                                     ("grade_evidence", "grade"), ("synthesize", "synthesize"))]
    grid = {"relevance_floor": [0.3], "generate_threshold": [0.7], "vector_score_threshold": [0.8]}
    ok = risk_controlled(exp, "calls<=2.5", **grid)  # cap 3*1+1 = 4 calls: a loss of 4/4 every time
    assert ok.risk["calls"][0] == pytest.approx(4.0) and ok.setting is None
    loose = risk_controlled(exp, "calls<=6", calls_cap=8, **grid)  # 4/8 against 6/8
    assert loose.risk["calls"][0] == pytest.approx(4.0) and loose.setting is not None
    with pytest.raises(ValueError, match="no bound"):
        risk_controlled(exp, "calls<=9", calls_cap=8, **grid)


def test_the_cli_prints_the_guaranteed_pick(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from crag_lab.cli import main

    path = synthetic(300, seed=4).save(tmp_path / "syn.jsonl")
    assert main(["tune", str(path), "--guarantee", "gold_dropped<=0.25", "--delta", "0.1"]) == 0
    out = capsys.readouterr().out
    result = Experiment.load(path).tune(guarantee="gold_dropped<=0.25", delta=0.1)
    assert "Learn-then-Test" in out and "n = " in out
    assert f"relevance_floor={result.setting['relevance_floor']}" in out  # type: ignore[index]
    assert f"{int(result.valid.sum())} of {len(result.valid)} settings" in out


def test_the_frontier_panel_rings_the_guaranteed_settings() -> None:
    from crag_lab.dashboard_frontier import FrontierPanel

    exp = synthetic(300, seed=6)
    panel = FrontierPanel(exp, relevance_floor=FLOORS, generate_threshold=[0.7], vector_score_threshold=[0.8])
    assert panel.guarantee is None
    panel.guarantee_text.value, panel.delta_text.value = "gold_dropped<=0.25", 0.1
    panel.guarantee_button.click()
    g = panel.guarantee
    assert g is not None and g.valid.any() and g.delta == 0.1
    assert panel.guarantee_note.value.startswith(f"{int(g.valid.sum())} of 15 settings guaranteed")
    rings = [c for c in panel.ax.collections if c.get_label().startswith("gold_dropped<=0.25")]
    table = panel.front.table()
    assert rings and sorted(map(tuple, rings[0].get_offsets().tolist())) == sorted(
        zip(table["calls_per_question"][g.valid], table["gold_f1"][g.valid], strict=True))
    panel.set_metric("gold_recall")  # the ring survives a redraw
    assert any(c.get_label().startswith("gold_dropped<=0.25") for c in panel.ax.collections)
    panel.guarantee_text.value = "recall<=0.1"
    panel.guarantee_button.click()
    assert "unknown loss &#x27;recall&#x27;" in panel.guarantee_note.value


def test_the_first_rounds_gold_is_known_at_every_setting_even_where_the_run_leaves_the_recording() -> None:
    exp = synthetic(80, seed=8)
    front = exp.frontier(relevance_floor=[0.1, 0.3, 0.5], generate_threshold=[0.7], vector_score_threshold=[0.8],
                         max_iterations=[1, 3])
    first = question_losses(exp, front, "gold_dropped_first")
    whole = question_losses(exp, front, "gold_dropped")
    assert whole.unknown.any() and not first.unknown.any()
    for s in range(len(front)):
        floor = front.settings.relevance_floor[s]
        for q, rec in enumerate(exp.records):
            gold = set(rec["labels"]["gold"])
            items = rec["rounds"][0]["items"]
            graded = [i for i in items if i["id"] in gold]
            expected = sum(i["grader_score"] < floor for i in graded) / len(graded) if graded else 0.0
            assert first.values[s, q] == pytest.approx(expected)
            assert first.eligible[q] == bool(graded)
    result = risk_controlled(exp, "gold_dropped_first<=0.3", front=front)
    assert result.risk["gold_dropped_first"][0] == pytest.approx(first.values[0, first.eligible].mean())


def test_the_tightest_bound_is_guaranteed_and_a_tighter_one_is_not(tmp_path: Any,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from crag_lab.cli import main
    from crag_lab.replay.guarantee import tightest_bound

    exp = synthetic(120, seed=7)
    grid = {"relevance_floor": FLOORS, "generate_threshold": [0.7], "vector_score_threshold": [0.8]}
    tight = tightest_bound(exp, "gold_dropped<=0.01", delta=0.1, **grid)
    assert tight is not None and tight.loss == "gold_dropped" and 0.01 < tight.alpha < 1
    assert risk_controlled(exp, tight, delta=0.1, **grid).setting is not None
    assert risk_controlled(exp, Guarantee("gold_dropped", tight.alpha - 0.002), delta=0.1, **grid).setting is None
    # a smaller delta asks more of the same questions: the tightest bound can only loosen
    stricter = tightest_bound(exp, "gold_dropped<=0.01", delta=0.01, **grid)
    assert stricter is not None and stricter.alpha >= tight.alpha
    # the CLI says it where the asked-for bound cannot be guaranteed
    path = exp.save(tmp_path / "syn.jsonl")
    assert main(["tune", str(path), "--guarantee", "gold_dropped<=0.01"]) == 0
    assert "No setting of the grid can be guaranteed" in (out := capsys.readouterr().out)
    whole = tightest_bound(Experiment.load(path), "gold_dropped<=0.01", delta=0.1)
    assert whole is not None and f'--guarantee "gold_dropped<={whole.alpha:g}"' in out
