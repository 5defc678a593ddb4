"""`LiveTraces`: the spans of each question as `crag_lab.Lab` answers it (``tracer_provider=`` or ``CRAG_OTEL_ENDPOINT``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from crag_lab.config import CragConfig
from crag_lab.records import QueryRecord
from crag_lab.traces._otlp import _quiet_exporter, _resource, otlp_exporter, traces_url
from crag_lab.traces._spans import PROJECT, _require, _Writer

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import TracerProvider

_log = logging.getLogger("crag_lab.traces")


class _SaysOnce:
    """Wraps an exporter: a failed export is one log line naming the endpoint (once per endpoint), never an error."""

    def __init__(self, exporter: SpanExporter, target: str) -> None:
        self.exporter, self.target, self.said = exporter, target, False

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        with _quiet_exporter():
            result = self.exporter.export(spans)
        if result is not SpanExportResult.SUCCESS and not self.said:
            self.said = True
            _log.warning("crag_lab: could not send traces to %s (is an OTLP/HTTP collector listening there?); the run "
                         "goes on and its records are kept", self.target)
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class LiveTraces:
    """Emits each question's spans on a tracer provider as `crag_lab.Lab` answers it.

    Built by `Lab` from ``tracer_provider=`` (yours: you flush and shut it down) or from
    ``CRAG_OTEL_ENDPOINT`` (`LiveTraces.to_endpoint`: an OTLP/HTTP exporter behind a batch
    processor, which `Lab.run` flushes at its end). A failed export is one log line naming the
    endpoint; the run and its records go on.
    """

    def __init__(self, provider: TracerProvider, *, model: str | None = None, owned: bool = False) -> None:
        _require()
        self.provider = provider
        self.tracer = provider.get_tracer("crag_lab")
        self.model = model
        self.owned = owned

    @classmethod
    def to_endpoint(cls, endpoint: str, *, model: str | None = None, project: str = PROJECT,
                    timeout_s: float = 5.0) -> LiveTraces:
        """Traces sent to an OTLP/HTTP endpoint in the background (a ``BatchSpanProcessor``)."""
        _require()
        from opentelemetry.sdk.trace import TracerProvider as SdkProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        exporter = _SaysOnce(otlp_exporter(endpoint, timeout_s=timeout_s), traces_url(endpoint))
        provider = SdkProvider(resource=_resource(project))
        provider.add_span_processor(BatchSpanProcessor(exporter))  # type: ignore[arg-type]
        return cls(provider, model=model, owned=True)

    def emit(self, record: QueryRecord, start_ns: int, config: CragConfig | None = None) -> None:
        """The spans of one answered question (its root under the current span, if there is one)."""
        try:
            _Writer(self.tracer, record, model=self.model, config=config, replayed=None,
                    replay_config=None).write(start_ns, None)
        except Exception as exc:  # tracing must never cost the run its answer
            _log.warning("crag_lab: the trace of question %r was not emitted (%s: %s)", record.get("id"),
                         type(exc).__name__, exc)

    def flush(self, timeout_s: float = 10.0) -> None:
        """Send what is queued (only for a provider crag_lab made; yours is yours to flush)."""
        if self.owned:
            force_flush = getattr(self.provider, "force_flush", None)
            if callable(force_flush):
                force_flush(int(timeout_s * 1000))
