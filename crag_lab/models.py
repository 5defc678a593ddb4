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


class LlamaIndexModel:
    """Puts any LlamaIndex ``LLM`` (OpenAI, OpenAILike, Ollama, LlamaCPP, ...) behind `CragModel`.

    >>> from llama_index.core.llms import MockLLM
    >>> LlamaIndexModel(MockLLM(max_tokens=3)).complete("plan", "hi", {}).completion_tokens
    3
    """

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.name = f"llamaindex:{type(llm).__name__}"

    def complete(self, task: Task, prompt: str, inputs: Mapping[str, Any]) -> ModelReply:
        response = self.llm.complete(prompt)
        text = str(getattr(response, "text", response) or "")
        prompt_tokens, completion_tokens = _usage_from_raw(getattr(response, "raw", None))
        return ModelReply(
            text=text,
            prompt_tokens=prompt_tokens if prompt_tokens is not None else count_tokens(prompt),
            completion_tokens=completion_tokens if completion_tokens is not None else count_tokens(text),
        )


def as_model(llm: Any | None, *, offline_factory: Callable[[], CragModel]) -> CragModel:
    """A `CragModel` for what the user passed: None ⇒ the offline default, a LlamaIndex LLM ⇒ adapted."""
    if llm is None:
        return offline_factory()
    if isinstance(llm, CragModel):
        return llm
    try:
        from llama_index.core.llms import LLM
    except ImportError:  # pragma: no cover - a hard dependency
        LLM = ()  # type: ignore[misc,assignment]
    if isinstance(llm, LLM):
        return LlamaIndexModel(llm)
    raise TypeError(
        f"llm must be None (offline default), a LlamaIndex LLM or a crag_lab model with "
        f".complete(task, prompt, inputs); got {type(llm).__name__}"
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
