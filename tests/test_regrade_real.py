"""Regrading a recording with a real model: llama.cpp's server serving Gemma 3 270M (`conftest.llama_server`).

A few questions of the bundled KB recording are regraded by the real model through the ``llm=``
line-up (a `LlamaIndexModel` over `openai_compatible`, built as `tests/test_real_model.py` builds
its models), with a response cache, then replayed; and `compare_graders` measures a sampled Gemma's
spread over two regrades. Like the other real-model tests they hold on a busy machine: few calls
(grading is one batch call per graded round: five calls for the regrade, four for the comparison),
a 64-token cap on a grade reply, and per-call timeouts of 120 s that a slow but working server is
given longer on (`SpeedMeter`); two questions are graded at once, as the server has two slots. On two
cores shared with other work the module took 87 s (load 2–4; 198 s at load 4–6 with the questions graded
one at a time, Gemma writing 1–2 tokens/s). Gemma 3 270M grades poorly: these tests check that
regrading works against a real server, not that its grades are good; even at temperature 0 its grades
may differ between runs (a035 left the recording in one run here and not in the next), so replay is
checked against a reference spelled out here rather than against fixed outcomes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from crag_lab import Experiment
from crag_lab.cache import ResponseCache
from crag_lab.decisions import decide, route_after_grade
from crag_lab.kb import KnowledgeBase
from crag_lab.models import LlamaIndexModel, ModelReply, SpeedMeter, Task
from crag_lab.replay import compare_graders
from crag_lab.servers import GEMMA_ID, LlamaServer, openai_compatible

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
RECORDING = ROOT / "notebooks" / "recordings" / "kb_knowledge_base.jsonl"
SLICE = ("a028", "a048", "a035")
"""Two questions answered after one graded round, and one of three graded rounds whose kept items carry
their grade into the next (5, 2 and 2 new items): five batch calls, every item's gold label known."""
SAMPLED = ("a028", "a048")
"""The comparison's slice: one graded round each, so two calls a repeat."""
CAPS = {"grade": 64}
"""A grade reply's token cap: a JSON array of at most nine of the schema's eleven levels fits."""
SPEED = SpeedMeter()
"""The server's speed, measured once and shared by this module's models."""


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    """The knowledge base the recording was made on: regrade reads the recorded items' texts from it."""
    return KnowledgeBase.load(ROOT / "data" / "kb")


def gemma(url: str, **sampling: Any) -> LlamaIndexModel:
    return LlamaIndexModel(openai_compatible(url, max_tokens=200, chat=False, **sampling), task_max_tokens=CAPS,
                           warm_up=True, speed=SPEED)


def recorded(ids: Sequence[str]) -> Experiment:
    """The recording's questions ``ids``, with the per-call budget of the other real-model tests (a call
    that outlasts 120 s is waited for as long as the measured speed says it needs; one retry)."""
    exp = Experiment.load(RECORDING)
    config = exp.config.with_changes(model_timeout_s=120, model_retries=1, retry_backoff_s=0.2)
    return Experiment(config, [exp.record(i) for i in ids], exp.meta)


class Counting:
    """Counts the calls that reach the wrapped model (a response cache in front answers the others)."""

    def __init__(self, model: LlamaIndexModel) -> None:
        self.model, self.name = model, model.name
        self.calls: list[str] = []

    def cache_identity(self) -> dict[str, Any]:
        return dict(self.model.cache_identity())

    def timeout_for(self, task: str, prompt: str) -> float | None:
        return self.model.timeout_for(task, prompt)

    def complete(self, task: Task, prompt: str, inputs: Mapping[str, Any]) -> ModelReply:
        self.calls.append(task)
        return self.model.complete(task, prompt, inputs)


def grades_of(exp: Experiment) -> list[list[float]]:
    return [[item["grader_score"] for item in rnd["items"]] for rec in exp.records for rnd in rec["rounds"]]


def decisions_of(exp: Experiment) -> list[Any]:
    """What the regrade must leave as recorded: the items, the recorded decisions, the labels."""
    return [(rec["id"], rec["labels"], [(rnd["action"], rnd["kept"], rnd["dropped"], [i["id"] for i in rnd["items"]])
                                        for rnd in rec["rounds"]]) for rec in exp.records]


def leaves_the_recording(record: Mapping[str, Any], exp: Experiment) -> bool:
    """Whether the new grades take the run where the recording never went: before the run would answer,
    a round routes elsewhere than recorded (another REFINE, a new search) or keeps other items. Spelled
    out here with the graph's own decision functions, as the reference for replay's ``needs_rerun``
    (no round of this slice is pre-filtered, so every round is decided by its grades)."""
    c = exp.config
    rounds = record["rounds"]
    for k, rnd in enumerate(rounds):
        assert rnd["rule"] is None
        d = decide([i["grader_score"] for i in rnd["items"]], floor=c.relevance_floor,
                   generate_threshold=c.generate_threshold, aggregator=c.aggregator)
        route = route_after_grade(d.action, int(rnd["iteration"]), c.max_iterations)
        if route == "synthesize":
            return False
        was = "synthesize" if k == len(rounds) - 1 else \
            route_after_grade(rnd["action"], int(rnd["iteration"]), int(rnd["thresholds"]["max_iterations"]))
        if route != was or [rnd["items"][i]["id"] for i in d.kept] != [i["id"] for i in rnd["items"]
                                                                        if i["id"] in rnd["kept"]]:
            return True
    return False


def test_a_real_model_regrades_a_recording_and_a_cache_makes_the_second_regrade_free(
        llama_server: LlamaServer, kb: KnowledgeBase, tmp_path: Path) -> None:
    exp = recorded(SLICE)
    rounds = sum(len(rec["rounds"]) for rec in exp.records)
    cache = ResponseCache(tmp_path / "grades.sqlite")
    model = Counting(gemma(llama_server.url))
    started = time.monotonic()
    first = exp.regrade(model, texts=kb, cache=cache, concurrency=2)  # the server's two slots
    print(f"regrade of {len(exp)} questions: {time.monotonic() - started:.1f} s, {first.meta['grader']}")
    assert model.calls == ["grade"] * rounds  # one batch call per graded round, nothing else
    grades = [g for rnd in grades_of(first) for g in rnd]
    assert len(grades) == sum(len(rnd["items"]) for rec in exp.records for rnd in rec["rounds"])
    assert all(isinstance(g, float) and 0.0 <= g <= 1.0 for g in grades), grades
    assert decisions_of(first) == decisions_of(exp)  # items, recorded decisions and labels as recorded
    info = first.meta["grader"]
    assert info["name"] == model.name and info["model"]["model"] == GEMMA_ID  # the provenance names the model
    assert info["model"]["class"] == "OpenAILike" and "api_base" not in info["model"]
    assert info["calls"] == rounds and info["cached_calls"] == 0 and info["tokens"] > 0
    assert info["parse_failures"] == 0  # schema-constrained: every batch parses
    assert info["replaced"] == {"name": "offline"}
    usage = [u for rec in first.records for u in rec["usage"] if u["node"] == "grade_evidence"]
    assert len(usage) == rounds and all(u["ok"] and u["prompt_tokens"] > 0 and not u.get("cached") for u in usage)

    # The same model and cache again: no call reaches the server, the grades are the same.
    again_model = Counting(gemma(llama_server.url))
    again = exp.regrade(again_model, texts=kb, cache=cache, concurrency=2)
    assert again_model.calls == []
    assert grades_of(again) == grades_of(first)
    assert again.meta["grader"]["calls"] == again.meta["grader"]["cached_calls"] == rounds
    assert cache.stats()["entries"] == rounds and cache.stats()["hits"] == rounds

    # Replay: the vectorised engine as the scalar reference, and needs_rerun exactly where the new
    # grades leave the recording.
    report = first.replay()
    assert report.queries == first.replay(engine="scalar").queries
    outcomes = {q.id: q.outcome for q in report.queries}
    print("replayed:", outcomes)
    for q, rec in zip(report.queries, first.records, strict=True):
        assert (q.outcome == "needs_rerun") == leaves_the_recording(rec, first), (q.id, q.actions, q.note)
        assert q.recorded_actions == [rnd["action"] for rnd in rec["rounds"]]
    saved = Experiment.load(first.save(tmp_path / "regraded.jsonl"))  # the provenance is saved with it
    assert saved.meta["grader"] == info and grades_of(saved) == grades_of(first)


def test_compare_graders_measures_a_sampled_real_judge_s_spread(llama_server: LlamaServer, kb: KnowledgeBase) -> None:
    exp = recorded(SAMPLED)
    judge = gemma(llama_server.url, temperature=0.7, seed=None)  # sampled, and no fixed seed: calls may differ
    started = time.monotonic()
    result = compare_graders(exp, {"offline": "offline", "gemma": judge}, texts=kb, repeats=2, concurrency=2)
    print(f"compare, two repeats: {time.monotonic() - started:.1f} s\n{result.table.to_string()}")
    table = result.table.set_index("grader")
    sd = float(table.loc["gemma", "grade_sd"])
    assert math.isfinite(sd) and sd >= 0.0
    spread = result.spread["gemma"]
    assert spread.shape == result.labels.shape and len(spread) > 0
    assert np.isfinite(spread).all() and (spread >= 0).all() and sd == pytest.approx(float(spread.mean()))
    assert float(table.loc["offline", "grade_sd"]) == 0.0  # a deterministic grader does not move
    assert int(table.loc["gemma", "calls"]) == 2  # the first repeat's: one batch call per graded round
    assert all(0.0 <= g <= 1.0 for g in result.grades["gemma"])
    model = result.experiments["gemma"].meta["grader"]["model"]
    assert model["model"] == GEMMA_ID and model["temperature"] == 0.7
    assert "seed" not in (model.get("additional_kwargs") or {})
