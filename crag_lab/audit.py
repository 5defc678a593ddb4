"""The audit trail: every decision a node makes, as plain dicts with an ``event`` key."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from crag_lab._text import json_line


class JsonlSink:
    """Appends audit events to a JSONL file, one line per event, safe across threads.

    >>> sink = JsonlSink("/tmp/crag_audit_example.jsonl")  # doctest: +SKIP
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def write(self, event: dict[str, Any]) -> None:
        line = json_line(event, default=str)  # a lone surrogate in a model's text is escaped, not fatal
        with self._lock, self.path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")


class AuditLog:
    """The events of one node execution; the node returns ``log.events`` in its state update.

    >>> log = AuditLog("grade_evidence")
    >>> log.log_audit("fast_path_hit", rule_name="few_context")["node"]
    'grade_evidence'
    """

    def __init__(self, node: str, sink: JsonlSink | None = None, run_id: str | None = None) -> None:
        self.node = node
        self.sink = sink
        self.run_id = run_id
        self.events: list[dict[str, Any]] = []

    def log_audit(self, event: str, *, level: str = "info", **payload: Any) -> dict[str, Any]:
        """Record one event (and write it to the sink at once, so a crash leaves a trail)."""
        record: dict[str, Any] = {"event": event, "node": self.node, "level": level, **payload}
        if self.run_id is not None:
            record["run_id"] = self.run_id
        self.events.append(record)
        if self.sink is not None:
            self.sink.write(record)
        return record
