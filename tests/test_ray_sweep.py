"""Threshold sweeps on Ray (``frontier(..., executor=...)``, ``crag-lab tune --ray``): a local sweep's numbers.

These run as Ray tasks (an executor without an actor pool) on conftest's local Ray, which this module
shares with tests/test_ray_index.py; tests/test_ray_executor.py sweeps on a pool of lab actors.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _experiments import mixed_experiment

from crag_lab.cli import main
from crag_lab.ray_executor import RayExecutor
from crag_lab.replay import Experiment
from crag_lab.replay._frontier import FIELDS, FrontierRounds, item_flags
from crag_lab.replay.frontier import Frontier, grid

GRID = {"relevance_floor": [0.0, 0.3, 0.6], "generate_threshold": [0.3, 0.7, 0.9], "vector_score_threshold": [0.5, 0.8],
        "auto_approve_max_items": [0, 2], "aggregator": ["mean", "max"]}


@pytest.fixture(scope="module")
def exp() -> Experiment:
    return mixed_experiment()[0]


@pytest.fixture(scope="module")
def tasks(ray_cluster: None) -> Iterator[RayExecutor]:
    with RayExecutor(workers=2) as executor:
        yield executor


def same_frontier(a: Frontier, b: Frontier) -> None:
    assert a.ids == b.ids and len(a) == len(b)
    for name in FIELDS:
        assert np.array_equal(a.per_query[name], b.per_query[name]), name
    assert a.table().equals(b.table())


def test_a_sweep_as_ray_tasks_equals_the_local_one_setting_for_setting(exp: Experiment, tasks: RayExecutor) -> None:
    local = exp.frontier(**GRID)
    assert len(local) > 50
    same_frontier(exp.frontier(executor=tasks, **GRID), local)
    assert not tasks.actors  # tasks, not actors: nothing left holding the cluster's CPUs


def test_a_sweep_in_one_block_per_setting_keeps_the_grid_order(exp: Experiment, tasks: RayExecutor) -> None:
    settings = grid(exp.config, **GRID)
    rounds = FrontierRounds(exp.config, exp.records, [item_flags(r, r["labels"]) for r in exp.records])
    local = rounds.replay(settings)
    swept = tasks.replay_settings(rounds, settings, blocks=len(settings))
    assert all(np.array_equal(swept[name], local[name]) for name in FIELDS)


def crash_once(rounds: FrontierRounds, trigger: Path) -> FrontierRounds:
    """``rounds``, whose first replay on a worker kills that worker's process (an OOM kill, a lost node);
    claiming ``trigger`` makes it once only. Defined in a function so Ray ships the class by value."""

    class CrashOnce(FrontierRounds):
        def replay(self, settings: Any, block: int = 256) -> dict[str, np.ndarray]:
            if os.path.exists(self.trigger):
                try:
                    os.replace(self.trigger, self.trigger + ".fired")  # atomic: exactly one process claims it
                except FileNotFoundError:  # another worker claimed it between the check and the rename
                    return super().replay(settings, block)
                os._exit(1)
            return super().replay(settings, block)

    crashing = CrashOnce.__new__(CrashOnce)
    crashing.__dict__.update(rounds.__dict__, trigger=str(trigger))
    return crashing


def test_a_sweep_task_whose_worker_dies_is_run_again(exp: Experiment, tasks: RayExecutor, tmp_path: Path) -> None:
    settings = grid(exp.config, **GRID)
    rounds = FrontierRounds(exp.config, exp.records, [item_flags(r, r["labels"]) for r in exp.records])
    trigger = tmp_path / "crash"
    trigger.write_text("once", encoding="utf-8")
    swept = tasks.replay_settings(crash_once(rounds, trigger), settings, blocks=3)
    assert Path(str(trigger) + ".fired").exists() and not trigger.exists()  # a worker did die
    local = rounds.replay(settings)
    assert all(np.array_equal(swept[name], local[name]) for name in FIELDS)


_RAY_LOG_LINE = re.compile(r"^(?:\x1b\[[0-9;]*m)?\((?:raylet|pid=|[\w.]+ pid=)")


def without_ray_logs(text: str) -> str:
    """``text`` without the lines Ray's log monitor forwards (``(raylet) …``, ``(pid=123) …``)."""
    return "".join(line for line in text.splitlines(keepends=True) if not _RAY_LOG_LINE.match(line))


def test_crag_lab_tune_ray_prints_what_the_local_tune_prints(exp: Experiment, tmp_path: Path, tasks: RayExecutor,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.jsonl"
    exp.save(path)
    assert main(["tune", str(path), "--folds", "3"]) == 0
    local = capsys.readouterr().out
    assert main(["tune", str(path), "--folds", "3", "--ray", "--workers", "2"]) == 0
    # Ray forwards its workers' and raylet's log lines to the driver's stdout whenever they arrive (a
    # worker killed by the previous test may be reported now): they are Ray's, not the tune's output.
    assert without_ray_logs(capsys.readouterr().out) == without_ray_logs(local)
    import ray

    assert ray.is_initialized()  # the CLI joined the running Ray and left it running


def test_workers_without_ray_and_a_bad_address_are_refused(exp: Experiment, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.jsonl"
    exp.save(path)
    assert main(["tune", str(path), "--workers", "2"]) != 0
    assert "--workers needs --ray" in capsys.readouterr().err
    assert main(["tune", str(path), "--ray", "http://nowhere"]) != 0
    assert "a Ray address" in capsys.readouterr().err
