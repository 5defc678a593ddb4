"""The response cache (crag_lab/cache.py): a re-run makes no model call and gives identical records."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
from _experiments import COMPLEX, PLAN, items

from crag_lab import CragConfig, Lab
from crag_lab.cache import CachedModel, ResponseCache, cache_identity, cache_key
from crag_lab.citations import STATS_HEADER
from crag_lab.models import LlamaIndexModel
from crag_lab.parsing import strip_stats_blocks
from crag_lab.testing import ScriptedLLM, StaticTool

QUESTIONS = ["Which port does the gateway use?", "Who leads payments?", "How are certificates rotated?"]


def fresh_llm() -> ScriptedLLM:
    return ScriptedLLM({"analyze": COMPLEX, "plan": PLAN, "grade": "[0.9, 0.8, 0.2, 0.1]", "synthesize": "It is 8443 [1]."})


def lab_with(llm: ScriptedLLM, cache: ResponseCache | str | Path | None) -> Lab:
    return Lab([StaticTool("vector_search", items(4))], llm=llm, config=CragConfig(model_retries=0), cache=cache)


def without_latency(record: dict) -> dict:
    out = dict(record)
    out["answer"] = strip_stats_blocks(str(out["answer"]))
    out["usage"] = [{k: v for k, v in u.items() if k not in ("latency_ms", "cached")} for u in out["usage"]]
    out.pop("latency_ms", None)
    out.pop("node_ms", None)
    return out


def test_a_rerun_from_the_cache_makes_zero_calls_and_identical_records(tmp_path: Path) -> None:
    path = tmp_path / "responses.sqlite"
    first_llm = fresh_llm()
    first = lab_with(first_llm, path).run(QUESTIONS)
    assert len(first_llm.calls) > 0
    assert not any(u.get("cached") for r in first.records for u in r["usage"])

    second_llm = fresh_llm()  # a new process: a new model object, the same cache file
    second = lab_with(second_llm, path).run(QUESTIONS)
    assert second_llm.calls == []
    assert all(u.get("cached") for r in second.records for u in r["usage"])
    assert [without_latency(r) for r in second.records] == [without_latency(r) for r in first.records]
    # The usage block counts the hits apart from real calls.
    block = str(second.records[0]["answer"])
    assert STATS_HEADER in block and "answered from the response cache, no model call" in block


def test_a_failed_call_is_not_cached(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "c.sqlite")
    flaky = CachedModel(ScriptedLLM({"plan": [TimeoutError("slow"), "[]"]}), cache)
    with pytest.raises(TimeoutError):
        flaky.complete("plan", "p", {})
    assert len(cache) == 0
    assert flaky.complete("plan", "p", {}).text == "[]"
    assert flaky.complete("plan", "p", {}).cached
    assert cache.stats() == {"entries": 1, "hits": 1, "misses": 2}


def test_the_key_covers_model_task_prompt_and_generation_parameters() -> None:
    from llama_index.core.llms import MockLLM

    base = cache_identity(LlamaIndexModel(MockLLM(max_tokens=8)))
    other = cache_identity(LlamaIndexModel(MockLLM(max_tokens=9)))
    assert base != other
    assert cache_identity(LlamaIndexModel(MockLLM(max_tokens=8), structured="never"))["schemas"] is False
    keys = {cache_key(base, "plan", "p"), cache_key(base, "grade", "p"), cache_key(base, "plan", "p2"),
            cache_key(other, "plan", "p")}
    assert len(keys) == 4


def test_the_cache_is_safe_across_threads(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "c.sqlite")
    model = CachedModel(ScriptedLLM({"plan": "[]"}), cache)
    threads = [threading.Thread(target=lambda n=n: [model.complete("plan", f"p{n}-{i}", {}) for i in range(20)])
               for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) == 80
    with sqlite3.connect(tmp_path / "c.sqlite") as db:  # a plain SQLite file others can read
        assert db.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == 80


def test_a_cache_in_a_missing_folder_names_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ResponseCache(tmp_path / "nope" / "c.sqlite")
