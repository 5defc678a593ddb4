"""Runs sharded over a Ray actor pool (crag_lab/ray_executor.py): the records of a local run, in order.

One local Ray (2 CPUs, no dashboard; conftest's ``ray_cluster``, shared with tests/test_ray_index.py) and
one pool of two workers serve every test of the module: starting Ray and loading a lab in each worker
take most of the time these tests cost. This process runs one torch thread (conftest's ``one_thread``), so the
two workers run the driver's thread count and a record-for-record comparison holds on any CPU.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ray  # noqa: F401  (in the dev extra: a missing Ray fails these tests, it does not skip them)
from conftest import write_tree

from crag_lab import Lab
from crag_lab.eval import evaluate, load_dataset
from crag_lab.parsing import strip_stats_blocks
from crag_lab.ray_executor import RayExecutor, resolve_executor

KB = {
    "gateway.md": "# API gateway\n\nThe api-gateway accepts public TLS traffic on port 8443.\n\n"
                  "## Limits\n\nOne API key may make 600 requests per minute.\n",
    "ledger.md": "# Ledger service\n\nThe ledger service is owned by the Payments team.\n\n"
                 "Internal reads go to port 8081.\n",
    "oncall.md": "# On-call\n\nThe Payments team is led by Dana Okafor.\n\nPages escalate after 15 minutes.\n",
}
QUESTIONS = [
    {"id": "t1", "question": "On which port does the api-gateway accept public TLS traffic?", "complexity": "simple",
     "answerable": True, "answer": "8443", "gold": ["gateway.md:L3"]},
    {"id": "t2", "question": "hi there!", "complexity": "chitchat", "answerable": True, "answer": "", "gold": []},
    {"id": "t3", "question": "How many requests per minute may one API key make?", "complexity": "simple",
     "answerable": True, "answer": "600", "gold": ["gateway.md:L7"]},
    {"id": "t4", "question": "Who leads the team that owns the ledger service?", "complexity": "complex",
     "answerable": True, "answer": "Dana Okafor", "gold": ["ledger.md:L3", "oncall.md:L3"]},
    {"id": "t5", "question": "After how many minutes do pages escalate?", "complexity": "simple",
     "answerable": True, "answer": "15", "gold": ["oncall.md:L5"]},
    {"id": "t6", "question": "Which port serves internal ledger reads?", "complexity": "simple",
     "answerable": True, "answer": "8081", "gold": ["ledger.md:L5"]},
    {"id": "t7", "question": "What is the salary band of a staff engineer?", "complexity": "simple",
     "answerable": False, "answer": "", "gold": []},
    {"id": "t8", "question": "thanks, that helps", "complexity": "chitchat", "answerable": True, "answer": "",
     "gold": []},
]
IDS = [q["id"] for q in QUESTIONS]


def comparable(record: dict[str, Any]) -> dict[str, Any]:
    """A record without what the wall clock decides (latencies, and the stats block that prints them)."""
    out = dict(record)
    out["answer"] = strip_stats_blocks(str(out["answer"]))
    out["usage"] = [{k: v for k, v in u.items() if k != "latency_ms"} for u in out["usage"]]
    out.pop("latency_ms")
    out.pop("node_ms")
    return out


@pytest.fixture(scope="module")
def kb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_tree(tmp_path_factory.mktemp("ray") / "kb", KB)
    (root.parent / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def lab(kb_dir: Path, one_thread: None) -> Lab:
    """The offline lab, whose workers can be told to die once: on the question id named in ``<kb>/../crash``."""
    lab = Lab.from_directory(kb_dir, remote=False)
    lab.recipe = crash_once_recipe(lab.recipe, kb_dir.parent / "crash")
    return lab


def crash_once_recipe(recipe: Any, trigger: Path) -> Callable[[], Lab]:
    """``recipe``, but the lab it builds kills its own process (as an OOM kill or a lost node would) the
    first time it is asked the question whose id ``trigger`` holds; claiming the file makes it once only.
    Defined in a function, so Ray ships the class by value (the test module is not importable there)."""

    class CrashOnce:
        def __init__(self) -> None:
            self.recipe, self.trigger = recipe, str(trigger)

        def __eq__(self, other: object) -> bool:
            return type(other).__name__ == "CrashOnce" and getattr(other, "trigger", None) == self.trigger

        def __hash__(self) -> int:
            return hash(self.trigger)

        def __call__(self) -> Lab:
            built = self.recipe()
            record, trigger = built.record, self.trigger

            def crashing(row: Any, **kwargs: Any) -> Any:
                try:
                    claimed = Path(trigger).read_text(encoding="utf-8") == row["id"]
                    if claimed:
                        os.replace(trigger, trigger + ".fired")  # atomic: exactly one process claims it
                except FileNotFoundError:  # no trigger, or the worker asked its question claimed it since
                    claimed = False
                if claimed:
                    os._exit(1)
                return record(row, **kwargs)

            built.record = crashing  # type: ignore[method-assign]
            return built

    return CrashOnce()


@pytest.fixture(scope="module")
def executor(ray_cluster: None, one_thread: None) -> Iterator[RayExecutor]:
    with RayExecutor(workers=2, shard_size=1) as pool:
        yield pool


@pytest.fixture(scope="module")
def local_records(lab: Lab) -> list[dict[str, Any]]:
    return [comparable(r) for r in lab.run(QUESTIONS).records]


def answered(executor: RayExecutor) -> list[list[str]]:
    return [s["answered"] for s in executor.status()]


def test_a_ray_evaluation_equals_the_local_one_record_for_record(lab: Lab, kb_dir: Path,
                                                                 executor: RayExecutor) -> None:
    dataset = load_dataset(kb_dir.parent / "questions.jsonl", kb=kb_dir)
    modes = ["knowledge_base", "naive_rag"]
    on_ray = evaluate(lab, dataset, modes, executor=executor)
    local = evaluate(lab, dataset, modes)
    for mode in modes:
        assert [r["id"] for r in on_ray.experiments[mode].records] == IDS  # dataset order, whoever answered
        assert ([comparable(r) for r in on_ray.experiments[mode].records]
                == [comparable(r) for r in local.experiments[mode].records])
    drop = ["latency_ms_per_query", "model_latency_ms_per_query"]
    assert on_ray.summary().drop(columns=drop).equals(local.summary().drop(columns=drop))
    shares = answered(executor)
    assert all(shares) and sorted(i for share in shares for i in share) == sorted(IDS * 2)  # both workers, no repeats


def test_workers_run_the_thread_count_chosen_for_them(executor: RayExecutor, lab: Lab) -> None:
    from crag_lab._ray import threads_if_this_machine

    executor.pool(lab.recipe)
    # The driver's where two workers on that many threads fit this machine's cores (then their records are the
    # driver's to the last digit), else Ray's one thread a CPU (tests/test_ray_index.py checks the rule itself).
    assert [s["threads"] for s in executor.status()] == [threads_if_this_machine(2) or 1] * 2


def test_an_interrupted_ray_run_resumes_and_never_asks_a_finished_question_twice(
        lab: Lab, tmp_path: Path, executor: RayExecutor, local_records: list[dict[str, Any]]) -> None:
    journal = tmp_path / "run.journal.jsonl"
    lab.run(QUESTIONS[:3], journal=journal, executor=executor)  # the run stopped after three questions
    lines = journal.read_text(encoding="utf-8").splitlines()
    assert sorted(json.loads(line)["id"] for line in lines[1:]) == IDS[:3]  # in the order they finished
    before = answered(executor)
    exp = lab.run(QUESTIONS, journal=journal, executor=executor)
    asked = sorted(i for old, new in zip(before, answered(executor), strict=True) for i in new[len(old):])
    assert asked == IDS[3:]
    assert [comparable(r) for r in exp.records] == local_records


def test_a_killed_worker_is_restarted_and_its_shard_asked_again(
        lab: Lab, kb_dir: Path, tmp_path: Path, executor: RayExecutor, local_records: list[dict[str, Any]]) -> None:
    pids = [s["pid"] for s in executor.status()]
    trigger = kb_dir.parent / "crash"
    trigger.write_text("t4", encoding="utf-8")
    exp = lab.run(QUESTIONS[2:6], executor=executor, journal=tmp_path / "run.journal.jsonl")
    assert Path(str(trigger) + ".fired").exists() and not trigger.exists()  # a worker did die on t4
    assert [comparable(r) for r in exp.records] == local_records[2:6]
    after = executor.status()
    restarted = [s for s, pid in zip(after, pids, strict=True) if s["pid"] != pid]
    assert len(restarted) == 1 and "t4" in restarted[0]["answered"]  # the new process answered the lost shard


def test_a_threshold_sweep_on_the_actor_pool_equals_the_local_one(lab: Lab, executor: RayExecutor) -> None:
    from _experiments import mixed_experiment

    from crag_lab.replay._frontier import FIELDS

    exp = mixed_experiment()[0]
    axes = {"relevance_floor": [0.0, 0.3, 0.6], "generate_threshold": [0.3, 0.7], "aggregator": ["mean", "max"]}
    local = exp.frontier(**axes)
    assert len(executor.pool(lab.recipe)) == 2
    on_ray = exp.frontier(executor=executor, **axes)  # the pool holds both CPUs: the sweep must run on it
    assert all(np.array_equal(on_ray.per_query[k], local.per_query[k]) for k in FIELDS)
    assert on_ray.table().equals(local.table())


def test_a_lab_with_a_llamaindex_llm_runs_on_the_pool(kb_dir: Path, executor: RayExecutor) -> None:
    """The recipe reaches the workers pickled, the LLM adapter with it: its locks and its speed meter's must not
    stop that (they did: a Ray run with any real model failed before its first question)."""
    from llama_index.core.llms import MockLLM

    from crag_lab.models import LlamaIndexModel

    model = LlamaIndexModel(MockLLM(max_tokens=6))
    lab = Lab.from_directory(kb_dir, remote=False, llm=model)
    local = [comparable(r) for r in lab.run(QUESTIONS[:3]).records]
    assert model.speed.calls > 0  # it has measured the model: the state that travels is not a fresh one
    assert [comparable(r) for r in lab.run(QUESTIONS[:3], executor=executor).records] == local


def test_a_lab_not_built_from_a_folder_is_refused_before_anything_starts(lab: Lab) -> None:
    bare = Lab(lab.tools)
    with pytest.raises(ValueError, match=r"Lab\.from_directory"):
        bare.run(QUESTIONS[:1], executor=RayExecutor(workers=1))


def test_executor_names_are_checked() -> None:
    assert resolve_executor("auto").address == "auto"
    assert resolve_executor("10.0.0.5:6379").address == "10.0.0.5:6379"
    with pytest.raises(ValueError, match="a Ray address"):
        resolve_executor("http://nowhere")
    pool = RayExecutor(workers=1)
    assert resolve_executor(pool) is pool


@pytest.mark.parametrize(("flags", "address", "workers"), [
    ([], None, None), (["--ray"], "ray", None), (["--ray", "ray://head:10001", "--workers", "4"], "ray://head:10001", 4),
])
def test_crag_lab_eval_ray_hands_a_ray_executor_to_evaluate(
        flags: list[str], address: str | None, workers: int | None, kb_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import crag_lab.eval.runner
    import crag_lab.lab
    from crag_lab.cli import main

    seen: dict[str, Any] = {}

    class Stop(Exception):
        pass

    def fake_evaluate(lab: Any, dataset: Any, modes: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        raise Stop  # stop here: what matters is what evaluate was given

    monkeypatch.setattr(crag_lab.lab.Lab, "from_directory", classmethod(lambda cls, *a, **k: None))
    monkeypatch.setattr(crag_lab.eval.runner, "evaluate", fake_evaluate)
    with pytest.raises(Stop):
        main(["eval", "--dataset", str(kb_dir.parent / "questions.jsonl"), "--kb", str(kb_dir), "--no-progress", *flags])
    executor = seen["executor"]
    if address is None:
        assert executor is None
    else:
        assert isinstance(executor, RayExecutor) and executor.workers == workers
        assert executor.address == (None if address == "ray" else address)
