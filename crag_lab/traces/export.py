"""`export_traces`: a recorded run (``Experiment.to_otel``, ``crag-lab export-traces``) as one trace per question."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from crag_lab.config import CragConfig
from crag_lab.records import QueryRecord
from crag_lab.traces._otlp import _Collect, _FixedIds, _OtlpJsonLines, _quiet_exporter, _resource, otlp_exporter, traces_url
from crag_lab.traces._spans import BATCH_SPANS, MISSING_MEANS, PROJECT, TraceExportError, _ns, _require, _Writer, missing_fields

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter


class RecordedRun(Protocol):
    """What an export reads: an `crag_lab.replay.Experiment` (its config, records and meta)."""

    config: CragConfig
    records: list[QueryRecord]
    meta: dict[str, Any]


@dataclass
class TraceExport:
    """What `export_traces` sent or wrote."""

    target: str
    traces: int
    spans: int
    seconds: float
    missing: dict[str, int] = field(default_factory=dict)
    """Fields the recording lacks (`MISSING_MEANS`), with how many questions lack each."""
    replayed: bool = False

    def line(self) -> str:
        """One line for a terminal: what was exported where."""
        verb = "wrote" if not self.target.startswith(("http://", "https://")) else "sent"
        what = "replayed traces" if self.replayed else "traces"
        return f"{verb} {self.traces} {what} ({self.spans} spans) to {self.target}"

    def lacking(self) -> str | None:
        """One line saying what the recording did not have and what the traces lack for it; None when complete."""
        if not self.missing:
            return None
        parts = [f"{name}{'' if name == 'started_at' else f' in {n} of {self.traces} questions'}: {MISSING_MEANS[name]}"
                 for name, n in self.missing.items()]
        return "the recording lacks " + "; ".join(parts)


def _run_key(exp: RecordedRun, replay_config: CragConfig | None, start_ns: int) -> bytes:
    """What tells one export from another: the run's config, meta, each question's id, time and answer, the
    replayed setting and the start. The same recording exported at the same start gets the same ids."""
    h = hashlib.blake2b(digest_size=16)
    h.update(start_ns.to_bytes(8, "big", signed=True))
    h.update(json.dumps([exp.config.model_dump(), exp.meta], sort_keys=True, default=str).encode())
    for rec in exp.records:
        h.update(f"{rec.get('id')}\x00{rec.get('latency_ms')}\x00{rec.get('answer')}\x00".encode("utf-8", "surrogatepass"))
    if replay_config is not None:
        h.update(b"replay" + json.dumps(replay_config.model_dump(), sort_keys=True).encode())
    return h.digest()


def _start_ns(start: datetime | str | None, meta: Mapping[str, Any]) -> tuple[int, bool]:
    """When the first question starts, in ns since the epoch, and whether the recording said so."""
    recorded = start is None and isinstance(meta.get("started_at"), str)
    value = meta["started_at"] if recorded else start
    if value is None:
        return time.time_ns(), False
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"start {value!r} is not an ISO 8601 time such as 2026-01-31T09:00:00Z") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return int(value.timestamp() * 1_000_000_000), recorded


def export_traces(
    exp: RecordedRun,
    exporter: SpanExporter | None = None,
    *,
    endpoint: str | None = None,
    path: str | Path | None = None,
    replay: CragConfig | Mapping[str, Any] | None = None,
    start: datetime | str | None = None,
    project: str = PROJECT,
    timeout_s: float = 10.0,
) -> TraceExport:
    """Export every recorded question of ``exp`` as one trace: to an exporter, an OTLP/HTTP endpoint or a file.

    Parameters
    ----------
    exporter
        Any OpenTelemetry ``SpanExporter`` (an in-memory one in a test, a console one, a vendor's).
    endpoint
        An OTLP/HTTP endpoint: Phoenix's ``http://127.0.0.1:6006/v1/traces``, a collector's
        ``http://host:4318/v1/traces`` (a URL without a path gets ``/v1/traces``).
    path
        A file of OTLP/JSON lines, one question's trace per line (what the OpenTelemetry
        Collector's ``otlpjsonfile`` receiver reads); it appears whole or not at all.
    replay
        A setting (a `CragConfig`, or changes to the recorded one) to export the replay at instead
        of the recorded decisions: each ``grade_evidence`` span then shows the replayed decision
        beside the recorded one, and the root is marked ``crag.replayed``.
    start
        When the first question starts (a ``datetime`` or ISO 8601 text; UTC unless it says).
        Default: the recording's ``started_at`` if it has one, else now. Questions are laid end to
        end from there, each as long as it took.
    project
        The Phoenix project (resource attribute ``openinference.project.name``).
    timeout_s
        Seconds an OTLP request may take.

    Exactly one of ``exporter``, ``endpoint`` and ``path``. An endpoint that cannot be reached
    raises `TraceExportError` naming it (nothing about the recording changes). The result says
    what was exported, and which fields an older recording lacked (`TraceExport.lacking`).

    >>> from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    >>> from crag_lab.replay import Experiment
    >>> rec = {"id": "q1", "query": "Hi", "mode": "knowledge_base", "complexity": "chitchat",
    ...        "path": ["analyze_and_route", "synthesize"], "node_ms": [["analyze_and_route", 2.0], ["synthesize", 1.0]],
    ...        "usage": [], "rounds": [], "tool_history": [], "latency_ms": 3.0, "answer": "Hello!", "citations": []}
    >>> memory = InMemorySpanExporter()
    >>> export_traces(Experiment(CragConfig(), [rec]), memory, start="2026-01-01T00:00:00Z").spans
    3
    >>> [s.name for s in memory.get_finished_spans()]
    ['analyze_and_route', 'synthesize', 'crag_knowledge_base']
    """
    _require()
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExportResult

    targets = [t for t in (exporter, endpoint, path) if t is not None]
    if len(targets) != 1:
        raise ValueError("give exactly one of exporter=, endpoint= (an OTLP/HTTP URL) and path= (a file)")
    clock = time.perf_counter()
    if endpoint is not None:
        target = traces_url(endpoint)
        exporter = otlp_exporter(endpoint, timeout_s=timeout_s)
    elif path is not None:
        from crag_lab._paths import check_output

        check_output(path, what="the traces file")
        target = str(path)
        exporter = _OtlpJsonLines(path)  # type: ignore[assignment]
    else:
        target = type(exporter).__name__
    assert exporter is not None
    replay_config: CragConfig | None = None
    if replay is not None:
        replay_config = replay if isinstance(replay, CragConfig) else exp.config.with_changes(**dict(replay))
    start_ns, recorded_start = _start_ns(start, exp.meta)
    ids = _FixedIds(_run_key(exp, replay_config, start_ns))
    collect = _Collect()
    resource = _resource(project)
    provider = TracerProvider(resource=resource, id_generator=ids, shutdown_on_exit=False,  # type: ignore[arg-type]
                              span_limits=SpanLimits(max_span_attributes=4096, max_attribute_length=None))
    provider.add_span_processor(collect)  # type: ignore[arg-type]
    tracer = provider.get_tracer("crag_lab")
    model = str(exp.meta.get("model")) if exp.meta.get("model") is not None else None
    per_trace = isinstance(exporter, _OtlpJsonLines)
    missing: dict[str, int] = {}
    spans = sent = 0

    def flush() -> None:
        nonlocal sent
        if not collect.spans:
            return
        with _quiet_exporter():
            result = exporter.export(collect.spans)
        if result is not SpanExportResult.SUCCESS:
            exporter.shutdown()
            done = f"the first {sent} spans were sent" if sent else "nothing was sent"
            raise TraceExportError(f"could not send traces to {target}: is an OTLP/HTTP collector (Phoenix, the "
                                   f"OpenTelemetry Collector) listening there? {done}; the recording is unchanged, so "
                                   "export it again once the endpoint answers")
        sent += len(collect.spans)
        collect.spans.clear()

    at = start_ns
    replay_of = None
    if replay_config is not None:
        from crag_lab.replay.scalar import replay_record

        replay_of = replay_record
    for rec in exp.records:
        for name in missing_fields(rec):
            missing[name] = missing.get(name, 0) + 1
        ids.question(str(rec.get("id", "")))
        replayed = replay_of(rec, replay_config) if replay_of is not None and replay_config is not None else None
        spans += _Writer(tracer, rec, model=model, config=exp.config, replayed=replayed,
                         replay_config=replay_config).write(at, Context())
        at += _ns(float(rec.get("latency_ms") or sum(float(ms) for _, ms in rec.get("node_ms") or [])))
        if per_trace or len(collect.spans) >= BATCH_SPANS:
            flush()
    flush()
    exporter.shutdown()
    if start is None and not recorded_start:
        missing["started_at"] = 1
    return TraceExport(target, len(exp.records), spans, time.perf_counter() - clock, missing,
                       replayed=replay_config is not None)
