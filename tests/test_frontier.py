"""The frontier (`crag_lab.replay.frontier`), honest tuning (`crag_lab.replay.tune`) and ``crag-lab tune``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _experiments import mixed_experiment

from crag_lab.cli import main
from crag_lab.config import CragConfig
from crag_lab.records import usage_tokens
from crag_lab.replay import Experiment
from crag_lab.replay._frontier import FIELDS, scalar_query
from crag_lab.replay.frontier import Frontier, grid
from crag_lab.replay.tune import best_setting, tune

GRID = {"relevance_floor": [0.0, 0.3, 0.6, 0.75], "generate_threshold": [0.3, 0.7, 0.75, 0.9],
        "vector_score_threshold": [0.5, 0.8, 0.9], "auto_approve_max_items": [0, 2],
        "max_iterations": [1, 3], "aggregator": ["mean", "max", "any_above"]}


@pytest.fixture(scope="module")
def exp() -> Experiment:
    return mixed_experiment()[0]


@pytest.fixture(scope="module")
def front(exp: Experiment) -> Frontier:
    return exp.frontier(**GRID)


def test_every_setting_equals_a_scalar_replay_at_that_setting(exp: Experiment, front: Frontier) -> None:
    from crag_lab.replay._frontier import item_flags

    flags = [item_flags(r, r["labels"]) for r in exp.records]
    table = front.table()
    assert len(front) > 300
    for s in range(len(front)):
        config = front.settings.config(exp.config, s)
        totals = exp.replay(config, engine="scalar").totals()
        row = table.iloc[s]
        assert row["calls_per_question"] * len(exp) == pytest.approx(sum(exp.calls_per_query()) + totals["calls_delta"])
        assert (row["items_kept"], row["items_dropped"], row["needs_rerun"]) == (
            totals["items_kept"], totals["items_dropped"], totals["needs_rerun"])
        for q, record in enumerate(exp.records):
            want = scalar_query(record, config, flags[q])
            assert {k: int(front.per_query[k][s, q]) for k in FIELDS} == want, (s, record["id"])


def test_gold_items_follow_the_labels(front: Frontier) -> None:
    table = front.table()
    assert (table["gold_kept"] + table["gold_dropped"] > 0).all()
    loose = table[(table["relevance_floor"] == 0.0) & (table["aggregator"] == "mean")]
    assert (loose["gold_recall"] == 1.0).all()  # a floor of 0 drops nothing


def test_needs_rerun_is_counted_never_guessed(exp: Experiment, front: Frontier) -> None:
    table = front.table()
    assert table["needs_rerun"].max() > 0
    s = int(table["needs_rerun"].to_numpy().argmax())
    report = exp.replay(front.settings.config(exp.config, s))
    assert table.iloc[s]["needs_rerun"] == len(report.needs_rerun)
    # A query that needs a re-run never carries its recorded answer over.
    assert not (front.per_query["known"] & front.per_query["needs_rerun"]).any()


def test_the_pareto_set_is_non_dominated(front: Frontier) -> None:
    table = front.table()
    cost, quality = table["calls_per_question"].to_numpy(), table["gold_f1"].to_numpy()
    pareto = front.pareto()
    assert len(pareto)
    for _, row in pareto.iterrows():
        c, q = row["calls_per_question"], row["gold_f1"]
        assert not ((cost <= c) & (quality >= q) & ((cost < c) | (quality > q))).any()
    best = np.nanmax(quality)
    assert pareto["gold_f1"].max() == best  # the best quality is on the frontier


def test_folds_never_score_a_question_they_were_fitted_on(front: Frontier) -> None:
    result = tune(front, folds=3, seed=1)
    everyone = np.arange(len(front.ids))
    assert sorted(set(result.fold_of.tolist())) == [0, 1, 2]
    for row in result.folds.itertuples():
        train, test = everyone[result.fold_of != row.fold], everyone[result.fold_of == row.fold]
        s = best_setting(front, train, "gold_f1")
        assert front.setting(s) == {k: getattr(row, k) for k in front.setting(s)}
        assert row.test_gold_f1 == pytest.approx(front.scores(test)["gold_f1"][s], nan_ok=True)
        assert set(train.tolist()).isdisjoint(test.tolist())
    assert tune(front, folds=3, seed=1).fold_of.tolist() == result.fold_of.tolist()  # seeded


def test_out_of_fold_quality_shows_overfitting() -> None:
    """Each setting keeps the gold item of one question only: in sample it looks useful, held out it is not."""
    n = 6
    lucky = np.eye(n, dtype=np.int64)
    per_query = {k: np.zeros((n, n), dtype=np.int64) for k in FIELDS}
    per_query.update(gold_kept=lucky, gold_dropped=1 - lucky, labelled_kept=lucky, labelled_dropped=1 - lucky)
    base = grid(CragConfig(), relevance_floor=[round(0.1 * i, 1) for i in range(n)], generate_threshold=[1.0],
                vector_score_threshold=[0.8])
    front = Frontier(base, [f"q{i}" for i in range(n)], per_query, np.zeros(n, np.int64), np.zeros(n, np.int64),
                     np.full(n, np.nan), np.full(n, np.nan), metric="gold_recall")
    result = tune(front, folds=3, metric="gold_recall")
    assert result.in_sample["gold_recall"] == pytest.approx(1 / n)
    assert result.out_of_fold["gold_recall"] == 0.0
    assert result.gap == pytest.approx(1 / n)


def test_the_budget_is_respected(front: Frontier) -> None:
    calls = front.table()["calls_per_question"]
    cheapest, budget = float(calls.min()), float(calls.quantile(0.5))
    assert budget < float(tune(front, folds=3, seed=1).in_sample["calls_per_question"])  # the budget binds
    result = tune(front, folds=3, seed=1, budget_calls=budget)
    assert result.in_sample["calls_per_question"] <= budget
    everyone = np.arange(len(front.ids))
    for row in result.folds.itertuples():
        train = everyone[result.fold_of != row.fold]
        s = best_setting(front, train, "gold_f1", budget)
        assert front.scores(train)["calls_per_question"][s] <= budget + 1e-9
    with pytest.raises(ValueError, match="calls per question"):
        tune(front, folds=3, seed=1, budget_calls=cheapest - 10)


def test_a_recording_without_labels_is_refused(exp: Experiment) -> None:
    bare = Experiment(exp.config, [{**r, "labels": {}} for r in exp.records])
    with pytest.raises(ValueError, match="no gold labels"):
        bare.frontier()
    labels = {r["id"]: r["labels"] for r in exp.records}
    with_labels = bare.frontier(labels=labels, **GRID)
    assert with_labels.table().equals(exp.frontier(**GRID).table())


def test_cli_prints_the_pareto_set_and_the_cross_validated_pick(exp: Experiment, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = exp.save(tmp_path / "kb.jsonl")
    assert main(["tune", str(path), "--folds", "3", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "Pareto set" in out and "calls_per_question" in out and "gold_f1" in out
    assert "in-sample" in out and "out-of-fold" in out


def test_cli_errors_in_one_line(exp: Experiment, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", str(tmp_path / "missing.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("crag-lab: ") and "missing.jsonl" in err and err.count("\n") == 1
    bare = Experiment(exp.config, [{**r, "labels": {}} for r in exp.records]).save(tmp_path / "bare.jsonl")
    assert main(["tune", str(bare)]) == 2
    assert "--dataset" in capsys.readouterr().err


def test_replayed_cost_equals_a_real_rerun_at_a_frontier_point(exp: Experiment, front: Frontier) -> None:
    """The graph re-run (scripted model, fresh) at a Pareto setting spends what the frontier says, query by query.

    (The same check with the offline model over a tiny knowledge base is left out: loading the
    bundled embedding model costs more than this whole file.)
    """
    from _experiments import CASES, scripted_lab

    table = front.table()
    recorded_calls = front.recorded_calls.sum() / len(front.ids)
    exact = front.pareto()
    exact = exact[(exact["needs_rerun"] == 0) & (exact["calls_per_question"] != recorded_calls)]
    assert len(exact), "the fixture should have a Pareto point that changes the cost without a re-run"
    s = int(exact.index[0])
    assert table.iloc[s]["needs_rerun"] == 0
    for q, (qid, question, analyze, grades, vscore, gold) in enumerate(CASES):
        lab, _ = scripted_lab(analyze, grades, vscore=vscore)
        config = front.settings.config(lab.config, s)
        rerun = lab.run([{"id": qid, "question": question, "gold": gold}], config=config, shadow_grading=False)
        record = rerun.records[0]
        assert len(record["usage"]) == front.recorded_calls[q] + front.per_query["calls"][s, q], qid
        # Tokens are exact where the synthesizer sees the recorded evidence; elsewhere replay counts the
        # recorded synthesize prompt (a query stopping at an earlier round has a shorter one).
        tokens = front.recorded_tokens[q] + front.per_query["tokens"][s, q]
        synthesize = [u for u in record["usage"] if u["task"] == "synthesize"]
        recorded_synthesize = [u for u in exp.records[q]["usage"] if u["task"] == "synthesize"]
        assert usage_tokens(record["usage"]) - usage_tokens(synthesize) == tokens - usage_tokens(recorded_synthesize)
        if front.per_query["known"][s, q]:
            assert usage_tokens(record["usage"]) == tokens, qid
