"""The one model interface the nodes use, and the adapter that puts any LlamaIndex LLM behind it.

The engine calls a model per *task* (``analyze``, ``plan``, ``grade``, ``synthesize``) with the
rendered prompt text and the structured inputs that produced it. A remote LLM reads the prompt; the
offline model and test doubles may read the inputs. Token counts are real counts: the provider's
usage numbers when it reports them, else the tokenizer's count of the rendered text.
"""

from __future__ import annotations

import concurrent.futures
import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

Task = Literal["analyze", "plan", "grade", "synthesize"]
TASKS: tuple[Task, ...] = ("analyze", "plan", "grade", "synthesize")


@dataclass(frozen=True)
class ModelReply:
    """Raw text a model produced for one call, with its token counts."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    cached: bool = False  # answered from a `crag_lab.cache.ResponseCache`, not by the model
    note: str | None = None  # the model's own account of this reply, when it gives one (why it abstained)


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


class LlamaIndexModel:
    """Puts any LlamaIndex ``LLM`` (OpenAI, OpenAILike, Ollama, LlamaCPP, ...) behind `CragModel`.

    ``structured``: ``"auto"`` (default) asks OpenAI-compatible providers for schema-constrained JSON
    on analyze, plan and grade (`crag_lab.schemas`) and falls back to free text for good if the
    provider rejects it; ``"always"`` never falls back (a rejection is a failed call);
    ``"never"`` sends plain prompts. The tolerant parsers read either reply.

    >>> from llama_index.core.llms import MockLLM
    >>> LlamaIndexModel(MockLLM(max_tokens=3)).complete("plan", "hi", {}).completion_tokens
    3
    """

    def __init__(self, llm: Any, *, structured: Structured = "auto") -> None:
        if structured not in ("auto", "always", "never"):
            raise ValueError(f"structured must be 'auto', 'always' or 'never', got {structured!r}")
        self.llm = llm
        self.name = f"llamaindex:{type(llm).__name__}"
        self.structured = structured
        self.schema_rejected: str | None = None  # why the provider refused a schema ("auto" then stops asking)

    def uses_schemas(self) -> bool:
        """Whether calls now go out with a JSON schema."""
        if self.structured == "never" or (self.structured == "auto" and self.schema_rejected):
            return False
        return supports_response_format(self.llm)

    def cache_identity(self) -> dict[str, Any]:
        """The class, model and generation parameters, the schemas' fingerprint (or False), and the endpoint.

        ``api_base`` is for messages only: the same model behind another port gives the same replies,
        so caches and journals do not key on it.
        """
        from crag_lab.schemas import fingerprint

        fields = {f: getattr(self.llm, f, None) for f in _GENERATION_FIELDS}
        return {"class": type(self.llm).__name__, **{k: v for k, v in fields.items() if v is not None},
                "schemas": fingerprint() if self.uses_schemas() else False,
                "api_base": getattr(self.llm, "api_base", None)}

    def complete(self, task: Task, prompt: str, inputs: Mapping[str, Any]) -> ModelReply:
        from crag_lab.schemas import task_schema

        schema = task_schema(task, inputs) if self.uses_schemas() else None
        if schema is None:
            response = self.llm.complete(prompt)
        else:
            try:
                response = self.llm.complete(prompt, **schema_request(self.llm, task, schema))
            except Exception as exc:
                if self.structured == "always" or not _is_rejection(exc):
                    raise
                self.schema_rejected = f"{type(exc).__name__}: {exc}"[:300]
                response = self.llm.complete(prompt)
        text = str(getattr(response, "text", response) or "")
        prompt_tokens, completion_tokens = _usage_from_raw(getattr(response, "raw", None))
        return ModelReply(
            text=text,
            prompt_tokens=prompt_tokens if prompt_tokens is not None else count_tokens(prompt),
            completion_tokens=completion_tokens if completion_tokens is not None else count_tokens(text),
        )


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

    def cache_identity(self) -> dict[str, Any]:
        """Every task's model identity; the servers' endpoints (for messages only) joined as ``api_base``."""
        tasks = {task: model_identity(self.model_for(task)) for task in TASKS}
        endpoints = sorted({str(ident.pop("api_base")) for ident in tasks.values() if ident.get("api_base")})
        return {"tasks": tasks, **({"api_base": ", ".join(endpoints)} if endpoints else {})}


def as_model(llm: Any | None, *, offline_factory: Callable[[], CragModel]) -> CragModel:
    """A `CragModel` for what the user passed: None ⇒ the offline default, a LlamaIndex LLM ⇒ adapted,
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
        return LlamaIndexModel(llm)
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

    Never raises: a call that failed every attempt returns ``reply=None`` and the errors, and the
    node degrades as documented (analyze ⇒ complex, plan ⇒ text fallback, grade ⇒ 0.5, synthesize
    ⇒ an error answer).
    """
    errors: list[str] = []
    start = time.perf_counter()
    for attempt in range(retries + 1):
        if attempt:
            sleep(backoff_s * (2 ** (attempt - 1)))
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="crag-model")
        try:
            reply = pool.submit(model.complete, task, prompt, inputs).result(timeout=timeout_s)
            if not isinstance(reply, ModelReply):
                raise TypeError(f"{type(model).__name__}.complete returned {type(reply).__name__}, not ModelReply")
            if not isinstance(reply.text, str):
                raise TypeError(f"{type(model).__name__}.complete returned text of type {type(reply.text).__name__}")
            return CallOutcome(reply, attempt + 1, (time.perf_counter() - start) * 1000, tuple(errors))
        except concurrent.futures.TimeoutError:
            errors.append(f"timeout after {timeout_s:g}s")
        except Exception as exc:  # any model failure degrades the node, never the run
            errors.append(f"{type(exc).__name__}: {exc}"[:500])
        finally:
            pool.shutdown(wait=False)
    return CallOutcome(None, retries + 1, (time.perf_counter() - start) * 1000, tuple(errors))
