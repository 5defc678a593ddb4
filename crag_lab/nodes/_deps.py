"""What every node needs, passed in by `build_graph` (no module globals)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from crag_lab.audit import AuditLog, JsonlSink
from crag_lab.config import CragConfig
from crag_lab.models import CragModel, ModelReply, Task, call_model
from crag_lab.state import AgentState, UsageRecord
from crag_lab.tools import ToolRegistry


class Node(Protocol):
    """A graph node: reads the state, returns only the keys it changes."""

    def __call__(self, state: AgentState) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Deps:
    """The model, tools, configuration and audit sink a compiled graph closes over."""

    model: CragModel
    tools: ToolRegistry
    config: CragConfig
    sink: JsonlSink | None = None
    shadow_grading: bool = False

    def audit(self, node: str) -> AuditLog:
        return AuditLog(node, self.sink)

    def call(
        self, node: str, task: Task, prompt: str, inputs: Mapping[str, Any], log: AuditLog, *, iteration: int = 0
    ) -> tuple[ModelReply | None, UsageRecord]:
        """One model call with retries; failures are audited and come back as ``None``."""
        cfg = self.config
        outcome = call_model(
            self.model,
            task,
            prompt,
            inputs,
            retries=cfg.model_retries,
            timeout_s=cfg.model_timeout_s,
            backoff_s=cfg.retry_backoff_s,
        )
        if outcome.errors:
            log.log_audit(
                "model_retry" if outcome.reply is not None else "model_failed",
                level="warning",
                task=task,
                attempts=outcome.attempts,
                errors=list(outcome.errors),
            )
        reply = outcome.reply
        usage = UsageRecord(
            node=node,
            task=task,
            prompt_tokens=reply.prompt_tokens if reply else 0,
            completion_tokens=reply.completion_tokens if reply else 0,
            latency_ms=round(outcome.latency_ms, 3),
            ok=reply is not None,
            attempts=outcome.attempts,
            iteration=iteration,
        )
        if reply is not None and reply.cached:
            usage["cached"] = True
        return reply, usage
