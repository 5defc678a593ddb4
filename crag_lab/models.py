"""The one model interface the nodes use, and the adapter that puts any LlamaIndex LLM behind it.

The engine calls a model per *task* (``analyze``, ``plan``, ``grade``, ``synthesize``) with the
rendered prompt text and the structured inputs that produced it. A remote LLM reads the prompt; the
offline model and test doubles may read the inputs. Token counts are real counts: the provider's
usage numbers when it reports them, else the tokenizer's count of the rendered text.
"""

from __future__ import annotations

import concurrent.futures
import functools
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from crag_lab._speed import SpeedMeter

Task = Literal["analyze", "plan", "grade", "synthesize"]
TASKS: tuple[Task, ...] = ("analyze", "plan", "grade", "synthesize")

TASK_MAX_TOKENS: dict[str, int] = {"analyze": 256, "plan": 192, "grade": 128, "synthesize": 256}
"""Completion tokens each task may use: what its schema's longest reply needs (`crag_lab.schemas`:
three short lists for analyze, three tool calls for plan, one score per passage for grade) and a
short cited answer for synthesize. `as_model` and ``crag-lab eval --api-base`` apply them; a slow
server then spends its time on what a task needs, and `SpeedMeter` sizes each call's timeout by them."""


@dataclass(frozen=True)
class ModelReply:
    """Raw text a model produced for one call, with its token counts."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    cached: bool = False  # answered from a `crag_lab.cache.ResponseCache`, not by the model
    note: str | None = None  # the model's own account of this reply, when it gives one (why it abstained)
    weighed: tuple[dict[str, Any], ...] = ()  # the units the offline synthesizer weighed (`synthesizer.Answered`)


@runtime_checkable
class CragModel(Protocol):
    """Anything that completes a task prompt. See `LlamaIndexModel`, `OfflineModel`, `ScriptedLLM`."""

    name: str

    def complete(self, task: Task, prompt: str, inputs: Mapping[str, Any]) -> ModelReply: ...


@functools.lru_cache(maxsize=1)
def _tokenizer() -> Callable[[str], list[int]]:
    from llama_index.core.utils import get_tokenizer

    return get_tokenizer()  # type: ignore[no-any-return]


def count_tokens(text: str) -> int:
    """Tokens in ``text`` under cl100k_base (LlamaIndex's bundled tokenizer, offline).

    >>> count_tokens("hello world")
    2
    """
    return len(_tokenizer()(text)) if text else 0


def _usage_from_raw(raw: Any) -> tuple[int | None, int | None]:
    usage = raw.get("usage") if isinstance(raw, Mapping) else getattr(raw, "usage", None)
    if usage is None:
        return None, None
    get = usage.get if isinstance(usage, Mapping) else lambda k: getattr(usage, k, None)
    prompt = get("prompt_tokens") or get("input_tokens")
    completion = get("completion_tokens") or get("output_tokens")
    return (int(prompt) if prompt is not None else None, int(completion) if completion is not None else None)


Structured = Literal["auto", "always", "never"]
_GENERATION_FIELDS = ("model", "temperature", "max_tokens", "top_p", "seed", "additional_kwargs")


def supports_response_format(llm: Any) -> bool:
    """Whether ``llm`` sends OpenAI's ``response_format`` (LlamaIndex's OpenAI and OpenAILike classes)."""
    return any(c.__name__ in ("OpenAI", "OpenAILike") for c in type(llm).__mro__)


WARM_UP_PROMPT = "Count: 1, 2, 3, 4,"
WARM_UP_TOKENS = 16


class LlamaIndexModel:
    """Puts any LlamaIndex ``LLM`` (OpenAI, OpenAILike, Ollama, LlamaCPP, ...) behind `CragModel`.

    ``structured``: ``"auto"`` (default) asks OpenAI-compatible providers for schema-constrained JSON
    on analyze, plan and grade (`crag_lab.schemas`) and falls back to free text for good if the
    provider rejects it; ``"always"`` never falls back (a rejection is a failed call);
    ``"never"`` sends plain prompts. The tolerant parsers read either reply.

    ``task_max_tokens``: a completion-token cap per task (`TASK_MAX_TOKENS` is the one `as_model`
    uses); tasks it does not name, and all of them when it is None, keep the LLM's ``max_tokens``.

    Timeouts follow the server's speed (`SpeedMeter`): every reply is timed, and a call that runs
    past ``model_timeout_s`` asks `timeout_for` whether that speed gives it longer. ``warm_up=True``
    (`as_model` and ``crag-lab eval`` set it) times a tiny completion before the first call, while
    the server is idle; otherwise the first call that runs long, before anything was timed, does.

    >>> from llama_index.core.llms import MockLLM
    >>> LlamaIndexModel(MockLLM(max_tokens=3)).complete("plan", "hi", {}).completion_tokens
    3
    >>> LlamaIndexModel(MockLLM(max_tokens=3), task_max_tokens={"plan": 5}).complete("plan", "hi", {}).completion_tokens
    5
    """

    def __init__(self, llm: Any, *, structured: Structured = "auto",
                 task_max_tokens: Mapping[str, int] | None = None, warm_up: bool = False,
                 warm_up_timeout_s: float = 60.0, speed: SpeedMeter | None = None) -> None:
        if structured not in ("auto", "always", "never"):
            raise ValueError(f"structured must be 'auto', 'always' or 'never', got {structured!r}")
        caps = dict(task_max_tokens or {})
        unknown = sorted(set(caps) - set(TASKS))
        if unknown:
            raise ValueError(f"task_max_tokens names unknown task(s) {unknown}; tasks are {list(TASKS)}")
        bad = {t: n for t, n in caps.items() if not isinstance(n, int) or isinstance(n, bool) or n < 1}
        if bad:
            raise ValueError(f"task_max_tokens must be whole numbers >= 1, got {bad}")
        self.llm = llm
        self.name = f"llamaindex:{type(llm).__name__}"
        self.structured = structured
        self.schema_rejected: str | None = None  # why the provider refused a schema ("auto" then stops asking)
        cappable = "max_tokens" in getattr(type(llm), "model_fields", {})
        self.task_max_tokens: dict[str, int] = caps if cappable else {}
        self._task_llms = {t: llm.model_copy(update={"max_tokens": n}) for t, n in self.task_max_tokens.items()}
        self.speed = speed or SpeedMeter()
        self.warm_up_first = warm_up
        self.warm_up_timeout_s = warm_up_timeout_s
        self._warm = threading.Lock()
        self._in_flight: dict[int, float] = {}
        self._flight_lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        """What a copy in another process takes (a `RayExecutor` worker's lab): the LLM, settings and measured
        speed; not the locks or the calls in flight here, which are this process's."""
        state = dict(self.__dict__)
        for name in ("_warm", "_flight_lock", "_in_flight"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._warm, self._flight_lock, self._in_flight = threading.Lock(), threading.Lock(), {}

    def uses_schemas(self) -> bool:
        """Whether calls now go out with a JSON schema."""
        if self.structured == "never" or (self.structured == "auto" and self.schema_rejected):
            return False
        return supports_response_format(self.llm)

    def max_tokens_for(self, task: str) -> int | None:
        """The completion-token cap of ``task``'s calls (None: the LLM sets none)."""
        cap = self.task_max_tokens.get(task, getattr(self.llm, "max_tokens", None))
        return int(cap) if isinstance(cap, int) else None

    def cache_identity(self) -> dict[str, Any]:
        """The class, model and generation parameters (per-task caps included), the schemas' fingerprint
        (or False), and the endpoint.

        ``api_base`` is for messages only: the same model behind another port gives the same replies,
        so caches and journals do not key on it.
        """
        from crag_lab.schemas import fingerprint

        fields = {f: getattr(self.llm, f, None) for f in _GENERATION_FIELDS}
        caps = {"task_max_tokens": dict(sorted(self.task_max_tokens.items()))} if self.task_max_tokens else {}
        return {"class": type(self.llm).__name__, **{k: v for k, v in fields.items() if v is not None}, **caps,
                "schemas": fingerprint() if self.uses_schemas() else False,
                "api_base": getattr(self.llm, "api_base", None)}

    def complete(self, task: Task, prompt: str, inputs: Mapping[str, Any]) -> ModelReply:
        from crag_lab.schemas import task_schema

        if self.warm_up_first and self.speed.seconds_per_token is None:
            self.warm_up()
        llm = self._task_llms.get(task, self.llm)
        schema = task_schema(task, inputs) if self.uses_schemas() else None
        started = time.perf_counter()
        key = threading.get_ident()
        with self._flight_lock:
            self._in_flight[key] = started
        try:
            if schema is None:
                response = llm.complete(prompt)
            else:
                try:
                    response = llm.complete(prompt, **schema_request(llm, task, schema))
                except Exception as exc:
                    if self.structured == "always" or not _is_rejection(exc):
                        raise
                    self.schema_rejected = f"{type(exc).__name__}: {exc}"[:300]
                    started = time.perf_counter()
                    response = llm.complete(prompt)
        finally:
            with self._flight_lock:
                self._in_flight.pop(key, None)
        seconds = time.perf_counter() - started
        text = str(getattr(response, "text", response) or "")
        prompt_tokens, completion_tokens = _usage_from_raw(getattr(response, "raw", None))
        reply = ModelReply(
            text=text,
            prompt_tokens=prompt_tokens if prompt_tokens is not None else count_tokens(prompt),
            completion_tokens=completion_tokens if completion_tokens is not None else count_tokens(text),
        )
        self.speed.observe(prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens,
                           seconds=seconds)
        return reply

    def warm_up(self) -> bool:
        """Time one tiny completion (`WARM_UP_TOKENS` tokens), so that `timeout_for` knows the server's speed.

        One caller measures, the others wait for its result; it gives up after ``warm_up_timeout_s``
        (the request goes on in the background). False if the server did not answer in time.
        """
        with self._warm:
            if self.speed.seconds_per_token is not None:
                return True
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            llm = self.llm.model_copy(update={"max_tokens": WARM_UP_TOKENS}) if "max_tokens" in getattr(
                type(self.llm), "model_fields", {}) else self.llm

            def timed() -> tuple[Any, float]:
                started = time.perf_counter()
                return llm.complete(WARM_UP_PROMPT), time.perf_counter() - started

            threading.Thread(target=_run_into, args=(future, timed), daemon=True, name="crag-warm-up").start()
            try:
                response, seconds = future.result(timeout=self.warm_up_timeout_s)
            except Exception:  # a dead or stalled server: the call in flight times out as it would have
                return False
            text = str(getattr(response, "text", response) or "")
            prompt_tokens, completion_tokens = _usage_from_raw(getattr(response, "raw", None))
            self.speed.observe(
                prompt_tokens=prompt_tokens if prompt_tokens is not None else count_tokens(WARM_UP_PROMPT),
                completion_tokens=completion_tokens if completion_tokens is not None else max(count_tokens(text), 1),
                seconds=seconds, call=False)
            return True

    def timeout_for(self, task: str, prompt: str) -> float | None:
        """Seconds a call of ``task`` with ``prompt`` may take at the server's measured speed (`SpeedMeter`),
        or None when its speed cannot be measured (nothing timed, and the warm-up failed) or the task has no cap."""
        cap = self.max_tokens_for(task)
        if cap is None or (self.speed.seconds_per_token is None and not self.warm_up()):
            return None
        return self.speed.budget_s(prompt_tokens=count_tokens(prompt), max_tokens=cap)

    def server_alive(self) -> bool:
        """Whether the server at the LLM's ``api_base`` still answers ``GET /models`` (False without one)."""
        api_base = getattr(self.llm, "api_base", None)
        if not api_base:
            return False
        from crag_lab.servers import check_server

        try:
            check_server(str(api_base), timeout_s=10.0, api_key=getattr(self.llm, "api_key", None))
        except Exception:
            return False
        return True

    def activity(self) -> str:
        """One line for progress bars: calls answered, the server's speed, and the calls it is working on."""
        rate = self.speed.tokens_per_s()
        now = time.perf_counter()
        with self._flight_lock:
            running = [now - t for t in self._in_flight.values()]
        parts = [f"{self.speed.calls} calls", f"{rate:.1f} tok/s" if rate else "speed not measured yet"]
        if running:
            parts.append(f"{len(running)} running (longest {max(running):.0f} s)")
        return ", ".join(parts)


def schema_request(llm: Any, task: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The request options that constrain a reply to ``schema``: OpenAI's ``response_format`` on the chat
    endpoint; on the completions endpoint (a base model), llama.cpp's ``json_schema`` request field."""
    if getattr(llm, "is_chat_model", True):
        return {"response_format": {"type": "json_schema", "json_schema": {"name": f"crag_{task}", "schema": schema}}}
    return {"extra_body": {"json_schema": dict(schema)}}


def _is_rejection(exc: Exception) -> bool:
    """A 400/422-style refusal of the request (not a timeout or a dead server, which retries handle)."""
    status = getattr(exc, "status_code", None) or getattr(getattr(exc, "response", None), "status_code", None)
    return status in (400, 404, 415, 422, 501) or "response_format" in str(exc)


def model_identity(model: CragModel) -> dict[str, Any]:
    """What the model says identifies its replies (``model.cache_identity()``, endpoint included), or its name."""
    return dict(getattr(model, "cache_identity", lambda: {"name": model.name})())


class TaskModels:
    """Each task asked of its own model: a real LLM as the reader, say, with the offline router,
    planner and grader for the rest — ``Lab.from_directory("data/kb", llm={"synthesize": reader})``.

    Tasks ``models`` does not name go to ``default``. The name and `cache_identity` name every
    task's model, so a response cache or a run journal never mixes two line-ups.

    >>> from crag_lab.testing import ScriptedLLM
    >>> both = TaskModels({"synthesize": ScriptedLLM({"synthesize": "8443 [1]."})}, ScriptedLLM({"plan": "[]"}))
    >>> both.complete("synthesize", "...", {}).text, both.complete("plan", "...", {}).text
    ('8443 [1].', '[]')
    """

    def __init__(self, models: Mapping[str, CragModel], default: CragModel) -> None:
        unknown = sorted(set(models) - set(TASKS))
        if unknown:
            raise ValueError(f"unknown task(s) {unknown}; tasks are {list(TASKS)}")
        self.models: dict[str, CragModel] = dict(models)
        self.default = default
        self.name = " + ".join([default.name, *(f"{t}: {self.models[t].name}" for t in TASKS if t in self.models)])

    def model_for(self, task: str) -> CragModel:
        """The model that answers ``task``."""
        return self.models.get(task, self.default)

    def complete(self, task: Task, prompt: str, inputs: Mapping[str, Any]) -> ModelReply:
        return self.model_for(task).complete(task, prompt, inputs)

    def timeout_for(self, task: str, prompt: str) -> float | None:
        """The budget ``task``'s model gives a call (`LlamaIndexModel.timeout_for`), if it gives one."""
        budget = getattr(self.model_for(task), "timeout_for", None)
        return budget(task, prompt) if callable(budget) else None

    def activity(self) -> str:
        """The progress line of each model that has one (`LlamaIndexModel.activity`), by the tasks it answers."""
        lines = []
        for model in {id(m): m for m in [*self.models.values(), self.default]}.values():
            line = getattr(model, "activity", None)
            if callable(line):
                tasks = [t for t in TASKS if self.model_for(t) is model]
                lines.append(f"{'/'.join(tasks)}: {line()}")
        return "; ".join(lines)

    def server_alive(self) -> bool:
        """Whether every server behind this line-up still answers (`LlamaIndexModel.server_alive`)."""
        found = [getattr(m, "server_alive", None) for m in {id(m): m for m in self.models.values()}.values()]
        probes: list[Callable[[], bool]] = [p for p in found if callable(p)]
        return bool(probes) and all(p() for p in probes)

    def cache_identity(self) -> dict[str, Any]:
        """Every task's model identity; the servers' endpoints (for messages only) joined as ``api_base``."""
        tasks = {task: model_identity(self.model_for(task)) for task in TASKS}
        endpoints = sorted({str(ident.pop("api_base")) for ident in tasks.values() if ident.get("api_base")})
        return {"tasks": tasks, **({"api_base": ", ".join(endpoints)} if endpoints else {})}


def as_model(llm: Any | None, *, offline_factory: Callable[[], CragModel]) -> CragModel:
    """A `CragModel` for what the user passed: None ⇒ the offline default, a LlamaIndex LLM ⇒ adapted
    with the per-task caps of `TASK_MAX_TOKENS` and a warm-up that times the server first,
    a mapping of task ⇒ LLM ⇒ `TaskModels` (the tasks it does not name, and those mapped to None, answered
    by the offline default)."""
    if llm is None:
        return offline_factory()
    if isinstance(llm, Mapping):
        offline = offline_factory()
        return TaskModels({task: as_model(m, offline_factory=lambda: offline) for task, m in llm.items()}, offline)
    if isinstance(llm, CragModel):
        return llm
    try:
        from llama_index.core.llms import LLM
    except ImportError:  # pragma: no cover - a hard dependency
        LLM = ()  # type: ignore[misc,assignment]
    if isinstance(llm, LLM):
        return LlamaIndexModel(llm, task_max_tokens=TASK_MAX_TOKENS, warm_up=True)
    raise TypeError(
        f"llm must be None (offline default), a LlamaIndex LLM, a crag_lab model with "
        f".complete(task, prompt, inputs) or a mapping of task to one of those; got {type(llm).__name__}"
    )


class ModelCallFailed(Exception):
    """The model raised or timed out on every attempt."""


@dataclass(frozen=True)
class CallOutcome:
    reply: ModelReply | None
    attempts: int
    latency_ms: float
    errors: tuple[str, ...]


def call_model(
    model: CragModel,
    task: Task,
    prompt: str,
    inputs: Mapping[str, Any],
    *,
    retries: int,
    timeout_s: float,
    backoff_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> CallOutcome:
    """Call the model with a timeout, retrying exceptions and timeouts with doubling backoff.

    An attempt that outlasts ``timeout_s`` asks the model's ``timeout_for(task, prompt)`` (a
    `LlamaIndexModel` answers from the server's measured speed, `SpeedMeter`) and waits that long
    when it is longer, doubled on each retry: a slow but working server is waited for, a stalled one
    still times out. Each attempt runs on a daemon thread, so one given up on never holds the
    process at exit. A model that computes in this process (`runs_inline`: the offline model) runs on
    the caller's thread instead, with no timeout: it waits on nothing that can stall, a reply it
    finishes is never thrown away for being late, and its torch readers run faster on the thread
    that also embeds the question (bench/RESULTS.md, "Offline latency").

    Never raises: a call that failed every attempt returns ``reply=None`` and the errors, and the
    node degrades as documented (analyze ⇒ complex, plan ⇒ text fallback, grade ⇒ 0.5, synthesize
    ⇒ an error answer).
    """
    errors: list[str] = []
    start = time.perf_counter()
    inline = runs_inline(model, task)
    for attempt in range(retries + 1):
        if attempt:
            sleep(backoff_s * (2 ** (attempt - 1)))
        try:
            if inline:
                reply = model.complete(task, prompt, inputs)
            else:
                future: concurrent.futures.Future[ModelReply] = concurrent.futures.Future()
                threading.Thread(target=_run_into, args=(future, model.complete, task, prompt, inputs), daemon=True,
                                 name="crag-model").start()
                reply = _wait(future, model, task, prompt, timeout_s, 2 ** attempt)
            if not isinstance(reply, ModelReply):
                raise TypeError(f"{type(model).__name__}.complete returned {type(reply).__name__}, not ModelReply")
            if not isinstance(reply.text, str):
                raise TypeError(f"{type(model).__name__}.complete returned text of type {type(reply.text).__name__}")
            return CallOutcome(reply, attempt + 1, (time.perf_counter() - start) * 1000, tuple(errors))
        except _TimedOut as exc:
            errors.append(f"timeout after {exc.seconds:g}s")
        except Exception as exc:  # any model failure degrades the node, never the run
            errors.append(f"{type(exc).__name__}: {exc}"[:500])
    return CallOutcome(None, retries + 1, (time.perf_counter() - start) * 1000, tuple(errors))


def runs_inline(model: CragModel, task: str) -> bool:
    """Whether ``task``'s model (`TaskModels.model_for` when ``model`` is a line-up; a `crag_lab.cache.CachedModel`
    answers for the model it wraps) says ``in_process = True``: it computes in this process and waits on nothing
    outside it, so `call_model` calls it on the caller's thread.

    >>> from crag_lab.offline import OfflineModel
    >>> from crag_lab.testing import ScriptedLLM
    >>> runs_inline(OfflineModel(), "grade"), runs_inline(ScriptedLLM({}), "grade")
    (True, False)
    >>> line_up = TaskModels({"synthesize": ScriptedLLM({})}, OfflineModel())
    >>> runs_inline(line_up, "grade"), runs_inline(line_up, "synthesize")
    (True, False)
    """
    pick = getattr(model, "model_for", None)
    chosen = pick(task) if callable(pick) else model
    return getattr(chosen, "in_process", False) is True


class _TimedOut(Exception):
    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.seconds = seconds


def _run_into(future: concurrent.futures.Future[Any], fn: Callable[..., Any], *args: Any) -> None:
    """``fn(*args)``'s result or exception into ``future`` (the body of a daemon thread)."""
    if not future.set_running_or_notify_cancel():
        return
    try:
        future.set_result(fn(*args))
    except BaseException as exc:  # handed to the waiting caller
        future.set_exception(exc)


def _wait(future: concurrent.futures.Future[Any], model: CragModel, task: Task, prompt: str, timeout_s: float,
          scale: float) -> Any:
    """The attempt's result; past ``timeout_s``, as long as the model's own budget for the call allows."""
    started = time.perf_counter()
    limit = timeout_s
    try:
        return future.result(timeout=timeout_s)
    except concurrent.futures.TimeoutError:
        pass
    budget_for = getattr(model, "timeout_for", None)
    budget = budget_for(task, prompt) if callable(budget_for) else None
    if isinstance(budget, (int, float)) and budget * scale > timeout_s:
        limit = float(budget) * scale
        try:
            return future.result(timeout=max(limit - (time.perf_counter() - started), 0.0))
        except concurrent.futures.TimeoutError:
            pass
    raise _TimedOut(round(limit, 3))
