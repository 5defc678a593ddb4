"""Model and tool failures: retries with doubling backoff, timeouts, and each node's documented degradation.

A failing model call is retried ``CragConfig.model_retries`` times (timeouts included), sleeping
``retry_backoff_s`` then twice that, and so on. When every attempt fails the node degrades — analyze ⇒
complex, plan ⇒ the text-extraction fallback, grade ⇒ 0.5 for every item, synthesize ⇒ a clear error
answer that still ends with the one stats block — and the audit log says so (``model_retry`` /
``model_failed``). Failed attempts never count tokens. Faults are injected with `ScriptedLLM`
exception entries and a model whose calls block past ``model_timeout_s``.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from crag_lab import CragConfig, build_graph
from crag_lab.citations import STATS_HEADER
from crag_lab.graph import initial_state
from crag_lab.models import ModelReply, Task, call_model
from crag_lab.nodes.synthesize import MODEL_FAILED_ANSWER
from crag_lab.testing import ScriptedLLM, StaticTool
from crag_lab.tools import ToolError

COMPLEX = '{"query_type": "fact", "complexity": "complex", "suggested_tools": ["vector_search"]}'
CHITCHAT = '{"query_type": "greeting", "complexity": "chitchat", "suggested_tools": []}'
VECTOR_PLAN = '[{"tool": "vector_search", "args": {"query": "gateway port", "top_k": 5}}]'
GOOD = {"analyze": COMPLEX, "plan": VECTOR_PLAN, "grade": "[0.9, 0.8, 0.9, 0.7]", "synthesize": "It is 8403 [1]."}
ITEMS = [{"text": f"Chunk {i}: the gateway listens on port 84{i}3.", "path": f"services/doc{i}.md",
          "line": 10 * i + 1, "line_end": 10 * i + 4, "score": 0.5} for i in range(4)]
FULL_PIPELINE = ["analyze_and_route", "plan", "tool_exec", "grade_evidence", "synthesize"]
# No sleeping between retries in graph tests; the backoff schedule itself is tested on call_model.
FAST = CragConfig(retry_backoff_s=0.0, model_timeout_s=5.0)


class Boom(RuntimeError):
    """The injected model fault."""


def run(
    model: Any, config: CragConfig = FAST, tools: Sequence[Any] | None = None, query: str = "Which port?"
) -> dict[str, Any]:
    graph = build_graph(model, list(tools) if tools is not None else [StaticTool("vector_search", ITEMS)], config)
    return graph.invoke(initial_state(query), {"recursion_limit": config.recursion_limit})


def events(state: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    return [e for e in state["audit"] if e["event"] == name]


def usage_of(state: Mapping[str, Any], task: str) -> list[dict[str, Any]]:
    return [u for u in state["usage"] if u["task"] == task]


def body(answer: str) -> str:
    return answer.split("\n\n---\n")[0]


def stats_line(answer: str) -> str:
    [line] = [ln for ln in answer.splitlines() if ln.startswith("- API calls:")]
    return line


def total_tokens(state: Mapping[str, Any]) -> int:
    return sum(u["prompt_tokens"] + u["completion_tokens"] for u in state["usage"])


class FlakyModel:
    """Fails (raises) the first ``failures`` calls, then answers "[0.5]"; counts its calls."""

    name = "flaky"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def complete(self, task: Task, prompt: str, inputs: Mapping[str, Any]) -> ModelReply:
        self.calls += 1
        if self.calls <= self.failures:
            raise Boom(f"attempt {self.calls} failed")
        return ModelReply("[0.5]", 7, 3)


class BlockingModel:
    """Delegates to ``inner`` except that the first ``slow[task]`` calls of a task block far past any
    timeout used here (until ``release`` is set, at the latest after 10 s) and then answer uselessly."""

    name = "blocking"

    def __init__(self, inner: Any, slow: Mapping[str, int], release: threading.Event) -> None:
        self.inner = inner
        self.slow = dict(slow)
        self.release = release
        self.seen: dict[str, int] = {}
        self._lock = threading.Lock()

    def complete(self, task: Task, prompt: str, inputs: Mapping[str, Any]) -> ModelReply:
        with self._lock:
            n = self.seen.get(task, 0)
            self.seen[task] = n + 1
        if n < self.slow.get(task, 0):
            self.release.wait(10.0)
            return ModelReply("too late", 10_000, 10_000)  # discarded: the call already timed out
        return self.inner.complete(task, prompt, inputs)  # type: ignore[no-any-return]


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at teardown, so blocked model threads end with the test instead of lingering."""
    event = threading.Event()
    yield event
    event.set()


# --- call_model: retries, backoff, timeouts ---------------------------------------------------------


def test_a_transient_failure_is_retried_after_the_first_backoff() -> None:
    model, sleeps = FlakyModel(failures=2), []
    outcome = call_model(model, "grade", "p", {}, retries=3, timeout_s=5.0, backoff_s=0.25, sleep=sleeps.append)
    assert outcome.reply == ModelReply("[0.5]", 7, 3)
    assert outcome.attempts == 3 and model.calls == 3
    assert sleeps == [0.25, 0.5]  # doubling
    assert outcome.errors == ("Boom: attempt 1 failed", "Boom: attempt 2 failed")


@pytest.mark.parametrize("retries", [0, 1, 2, 5])
def test_a_persistent_failure_is_tried_retries_plus_one_times_and_never_raises(retries: int) -> None:
    model, sleeps = FlakyModel(failures=100), []
    outcome = call_model(model, "plan", "p", {}, retries=retries, timeout_s=5.0, backoff_s=0.5, sleep=sleeps.append)
    assert outcome.reply is None
    assert outcome.attempts == model.calls == retries + 1
    assert len(outcome.errors) == retries + 1
    assert sleeps == [0.5 * 2**i for i in range(retries)]


def test_each_attempt_times_out_at_model_timeout_s(release: threading.Event) -> None:
    model = BlockingModel(ScriptedLLM({}), {"analyze": 100}, release)
    start = time.perf_counter()
    outcome = call_model(model, "analyze", "p", {}, retries=2, timeout_s=0.05, backoff_s=0.0)
    elapsed = time.perf_counter() - start
    assert outcome.reply is None and outcome.attempts == 3
    assert outcome.errors == ("timeout after 0.05s",) * 3
    assert elapsed < 5.0  # three 0.05 s timeouts, not three 10 s calls (a generous upper bound)


class ThreadNoting:
    """Answers every task; notes the thread each call ran on. ``in_process`` as given."""

    name = "thread-noting"

    def __init__(self, in_process: bool, failures: int = 0) -> None:
        self.in_process = in_process
        self.failures = failures
        self.threads: list[threading.Thread] = []

    def complete(self, task: Task, prompt: str, inputs: Mapping[str, Any]) -> ModelReply:
        self.threads.append(threading.current_thread())
        if len(self.threads) <= self.failures:
            raise Boom(f"attempt {len(self.threads)} failed")
        return ModelReply("[0.5]", 1, 1)


def test_an_in_process_model_runs_on_the_callers_thread_and_a_server_model_on_a_watchdog_thread() -> None:
    inline, served = ThreadNoting(in_process=True), ThreadNoting(in_process=False)
    for model in (inline, served):
        assert call_model(model, "grade", "p", {}, retries=0, timeout_s=5.0, backoff_s=0.0).reply is not None
    assert inline.threads == [threading.current_thread()]
    assert served.threads[0] is not threading.current_thread() and served.threads[0].daemon


def test_an_in_process_model_is_retried_like_any_other() -> None:
    model, sleeps = ThreadNoting(in_process=True, failures=2), []
    outcome = call_model(model, "plan", "p", {}, retries=3, timeout_s=5.0, backoff_s=0.25, sleep=sleeps.append)
    assert outcome.reply == ModelReply("[0.5]", 1, 1) and outcome.attempts == 3
    assert outcome.errors == ("Boom: attempt 1 failed", "Boom: attempt 2 failed") and sleeps == [0.25, 0.5]


def test_the_offline_model_behind_a_cache_and_in_a_line_up_runs_inline_for_its_own_tasks_only(tmp_path: Path) -> None:
    from crag_lab.cache import ResponseCache, with_cache
    from crag_lab.models import TaskModels, runs_inline
    from crag_lab.offline import OfflineModel

    offline, served = OfflineModel(), ThreadNoting(in_process=False)
    line_up = with_cache(TaskModels({"synthesize": served}, offline), ResponseCache(tmp_path / "cache.sqlite"))
    assert runs_inline(with_cache(offline, ResponseCache(tmp_path / "alone.sqlite")), "grade")
    assert runs_inline(line_up, "analyze") and not runs_inline(line_up, "synthesize")
    call_model(line_up, "synthesize", "p", {}, retries=0, timeout_s=5.0, backoff_s=0.0)
    assert served.threads[0] is not threading.current_thread()  # the server's task keeps its timeout


@pytest.mark.parametrize(
    "reply", ["a bare string", None, ModelReply(None, 1, 1), ModelReply(b"bytes", 1, 1)],  # type: ignore[arg-type]
    ids=["str", "none", "none-text", "bytes-text"],
)
def test_a_malformed_reply_counts_as_a_failed_attempt(reply: Any) -> None:
    class Malformed:
        name = "malformed"

        def complete(self, task: Task, prompt: str, inputs: Mapping[str, Any]) -> Any:
            return reply

    outcome = call_model(Malformed(), "synthesize", "p", {}, retries=1, timeout_s=5.0, backoff_s=0.0)
    assert outcome.reply is None and outcome.attempts == 2
    assert all(e.startswith("TypeError") for e in outcome.errors)


# --- each node degrades as documented when every attempt fails ------------------------------------------


def test_analyze_failure_degrades_to_the_full_pipeline() -> None:
    llm = ScriptedLLM(GOOD | {"analyze": Boom("analyze down")})
    state = run(llm)
    assert state["path"] == FULL_PIPELINE
    assert state["routing_plan"]["complexity"] == "complex" and state["routing_plan"]["classified"] is False
    assert len(llm.calls_for("analyze")) == 3  # model_retries=2 ⇒ 3 attempts
    [failed] = events(state, "model_failed")
    assert failed["node"] == "analyze_and_route" and failed["level"] == "warning"
    assert failed["attempts"] == 3 and failed["errors"] == ["Boom: analyze down"] * 3
    assert events(state, "classification_unavailable")
    [record] = usage_of(state, "analyze")
    assert record["ok"] is False and record["attempts"] == 3
    assert record["prompt_tokens"] == record["completion_tokens"] == 0  # no tokens for a failed call
    assert "It is 8403 [1]." in state["answer"]
    assert stats_line(state["answer"]) == "- API calls: 4 (6 attempts)"


def test_plan_failure_degrades_to_text_extraction_from_suggested_tools() -> None:
    llm = ScriptedLLM(GOOD | {"plan": Boom("plan down")})
    tools = [StaticTool("vector_search", ITEMS), StaticTool("keyword_search", ITEMS), StaticTool("jira_fetch", ITEMS)]
    state = run(llm, tools=tools)
    [fallback] = events(state, "plan_parse_failed")
    assert fallback["fallback"] == "text_extraction" and fallback["extracted"] == ["vector_search"]
    assert [h["tool"] for h in state["tool_history"]] == ["vector_search"]  # only what analyze suggested
    assert events(state, "model_failed")[0]["node"] == "plan"
    assert usage_of(state, "plan")[0]["ok"] is False
    assert "It is 8403 [1]." in state["answer"]
    assert stats_line(state["answer"]) == "- API calls: 4 (6 attempts)"


@pytest.mark.parametrize("grading", ["batch", "per_item"])
def test_grade_failure_degrades_to_half_for_every_item(grading: str) -> None:
    llm = ScriptedLLM(GOOD | {"grade": Boom("grader down")})
    state = run(llm, FAST.model_copy(update={"grading": grading, "max_iterations": 1}))
    assert state["evidence_scores"] == [0.5] * 4
    assert state["rounds"][0]["parse_ok"] is False
    warnings = events(state, "grader_parse_failed")
    assert warnings and all(w["level"] == "warning" and w["fallback"] == 0.5 and w["output"] is None for w in warnings)
    failed_calls = 1 if grading == "batch" else 4
    assert len(events(state, "model_failed")) == failed_calls
    assert len(llm.calls_for("grade")) == 3 * failed_calls
    assert all(u["ok"] is False and u["prompt_tokens"] == 0 for u in usage_of(state, "grade"))
    assert state["rounds"][0]["grader_tokens"] == 0
    assert state["path"][-1] == "synthesize"


def test_grade_failure_of_one_item_under_per_item_grading_keeps_the_other_scores() -> None:
    llm = ScriptedLLM(GOOD | {"grade": ["0.9", Boom("x"), Boom("x"), Boom("x"), "0.2", "0.8"]})
    state = run(llm, FAST.model_copy(update={"grading": "per_item", "max_iterations": 1}))
    assert state["evidence_scores"] == [0.9, 0.5, 0.2, 0.8]
    [warning] = events(state, "grader_parse_failed")
    assert warning["item"] == "services/doc1.md:L11-L14"


def test_synthesize_failure_gives_a_clear_error_answer_with_sources_and_one_stats_block() -> None:
    llm = ScriptedLLM(GOOD | {"synthesize": Boom("synthesizer down")})
    state = run(llm)
    answer = state["answer"]
    assert answer.startswith(MODEL_FAILED_ANSWER.format(errors="see the audit log"))
    assert "Sources:\n[1] services/doc0.md:L1-L4" in answer  # the evidence found is listed
    assert answer.count(STATS_HEADER) == 1 and answer.split("\n---\n")[-1].startswith(STATS_HEADER)
    assert stats_line(answer) == "- API calls: 4 (6 attempts)"
    assert events(state, "synthesize_failed")[0]["level"] == "error"
    assert usage_of(state, "synthesize")[0]["completion_tokens"] == 0


def test_chitchat_synthesize_failure_still_answers_with_the_stats_block() -> None:
    state = run(ScriptedLLM({"analyze": CHITCHAT, "synthesize": Boom("down")}), query="hi!")
    assert state["path"] == ["analyze_and_route", "synthesize"]
    assert body(state["answer"]) == "Sorry, the model is unavailable right now."
    assert stats_line(state["answer"]) == "- API calls: 2 (4 attempts)"


def test_every_model_call_failing_still_ends_with_an_answer() -> None:
    llm = ScriptedLLM({task: Boom(f"{task} down") for task in GOOD})
    state = run(llm, FAST.model_copy(update={"max_iterations": 1}))  # 0.5 everywhere is a REFINE: cap it
    assert state["path"][-1] == "synthesize"
    assert state["answer"].startswith("The model failed to produce an answer")
    assert stats_line(state["answer"]) == "- API calls: 4 (12 attempts)"
    assert re.search(r"- Total tokens: 0 \(prompt 0, completion 0\)", state["answer"])
    assert [e["node"] for e in events(state, "model_failed")] == ["analyze_and_route", "plan", "grade_evidence",
                                                                   "synthesize"]


# --- a transient failure followed by success gives the normal answer ----------------------------------------


@pytest.mark.parametrize("task", ["analyze", "plan", "grade", "synthesize"])
def test_a_transient_failure_gives_the_normal_answer_and_counts_no_extra_tokens(task: str) -> None:
    baseline = run(ScriptedLLM(GOOD))
    llm = ScriptedLLM(GOOD | {task: [Boom("blip"), GOOD[task]]})
    state = run(llm)
    assert body(state["answer"]) == body(baseline["answer"])
    assert state["path"] == baseline["path"] and state["evidence_scores"] == baseline["evidence_scores"]
    assert total_tokens(state) == total_tokens(baseline)  # the failed attempt cost nothing
    [retry] = events(state, "model_retry")
    assert retry["task"] == task and retry["attempts"] == 2 and retry["errors"] == ["Boom: blip"]
    assert events(state, "model_failed") == []
    [record] = usage_of(state, task)
    assert record["ok"] is True and record["attempts"] == 2
    assert stats_line(state["answer"]) == "- API calls: 4 (5 attempts)"
    assert stats_line(baseline["answer"]) == "- API calls: 4"


@pytest.mark.parametrize("task", ["analyze", "grade", "synthesize"])
def test_a_timed_out_attempt_is_retried_and_then_answers_normally(task: str, release: threading.Event) -> None:
    # One second, not 0.05 s: only the blocked call may time out, and on a busy machine a normal call can take 0.05 s.
    config = FAST.model_copy(update={"model_timeout_s": 1.0})
    baseline = run(ScriptedLLM(GOOD), config)
    model = BlockingModel(ScriptedLLM(GOOD), {task: 1}, release)
    start = time.perf_counter()
    state = run(model, config)
    assert time.perf_counter() - start < 8.0  # not stuck behind the 10 s call (generous upper bound)
    assert body(state["answer"]) == body(baseline["answer"])
    assert total_tokens(state) == total_tokens(baseline)  # the late reply's 20 000 tokens are not counted
    [retry] = events(state, "model_retry")
    assert retry["task"] == task and retry["errors"] == ["timeout after 1s"] and retry["attempts"] == 2


def test_a_model_that_always_times_out_degrades_every_node(release: threading.Event) -> None:
    config = FAST.model_copy(update={"model_timeout_s": 0.05, "model_retries": 1, "max_iterations": 1})
    model = BlockingModel(ScriptedLLM(GOOD), dict.fromkeys(GOOD, 100), release)
    start = time.perf_counter()
    state = run(model, config)
    assert time.perf_counter() - start < 8.0  # 8 timeouts of 0.05 s, never a 10 s wait
    assert state["path"] == FULL_PIPELINE
    assert state["evidence_scores"] == [0.5] * 4
    assert state["answer"].startswith("The model failed to produce an answer")
    assert stats_line(state["answer"]) == "- API calls: 4 (8 attempts)"
    assert total_tokens(state) == 0


def test_backoff_between_graph_retries_is_at_least_the_configured_delay() -> None:
    # A lower bound is safe to assert: sleep never returns early. 0.02 + 0.04 s of backoff.
    config = CragConfig(retry_backoff_s=0.02, model_timeout_s=5.0)
    start = time.perf_counter()
    state = run(ScriptedLLM(GOOD | {"analyze": [Boom("a"), Boom("b"), COMPLEX]}), config)
    assert time.perf_counter() - start >= 0.06
    assert events(state, "model_retry")[0]["attempts"] == 3


# --- tools that fail ----------------------------------------------------------------------------------------


class CrashingTool:
    def __init__(self, name: str, exc: Exception) -> None:
        self.name = name
        self.exc = exc

    def __call__(self, args: Mapping[str, Any]) -> str:
        raise self.exc


@pytest.mark.parametrize(("exc", "event"), [(RuntimeError("segfault-ish"), "tool_crashed"),
                                            (ToolError("bad args: top_k"), "tool_error")])
def test_a_failing_tool_is_audited_and_the_run_still_answers(exc: Exception, event: str) -> None:
    llm = ScriptedLLM(GOOD)
    state = run(llm, tools=[CrashingTool("vector_search", exc)])
    [logged] = events(state, event)
    assert logged["tool"] == "vector_search"
    assert state["tool_history"][0]["ok"] is False
    assert state["answer"].startswith("I couldn't find relevant information")
    assert state["answer"].count(STATS_HEADER) == 1


# --- Lab level: a knowledge base that cannot be built -----------------------------------------------------


@pytest.fixture
def offline_embeddings(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Lab.from_directory` with the instant hashed embedding (conftest) instead of loading MiniLM."""
    from conftest import HashEmbedding

    import crag_lab.embeddings

    monkeypatch.setattr(crag_lab.embeddings, "default_embed_model", lambda: HashEmbedding())


@pytest.mark.usefixtures("offline_embeddings")
@pytest.mark.parametrize("files", [{}, {"empty.md": ""}, {".hidden.md": "# secret"}, {"logo.png": b"\x89PNG\x00\x01"}],
                         ids=["no-files", "empty-file", "hidden-only", "binary-only"])
def test_lab_from_an_empty_folder_raises_an_error_naming_the_folder_and_the_fix(
    tmp_path: Path, files: dict[str, str | bytes]
) -> None:
    from crag_lab import Lab
    from crag_lab.kb import EmptyKnowledgeBaseError

    root = tmp_path / "kb"
    root.mkdir()
    for name, content in files.items():
        (root / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(EmptyKnowledgeBaseError) as info:
        Lab.from_directory(root, remote=False)
    message = str(info.value)
    assert str(root) in message and ".md" in message  # which folder, and what to add


@pytest.mark.usefixtures("offline_embeddings")
def test_lab_from_a_missing_folder_names_it(tmp_path: Path) -> None:
    from crag_lab import Lab

    with pytest.raises(Exception) as info:  # the kb layer owns the exact type
        Lab.from_directory(tmp_path / "nope", remote=False)
    assert str(tmp_path / "nope") in str(info.value)
