"""The OpenTelemetry plumbing of an export: fixed ids, the OTLP/JSON file, the OTLP/HTTP exporter, quiet retries."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crag_lab.traces._spans import INSTALL_HINT, TracingUnavailableError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter


class _FixedIds:
    """Trace and span ids derived from the run and the question: the same recording exports the same ids."""

    def __init__(self, run_key: bytes) -> None:
        self.run_key = run_key
        self.key = run_key
        self.count = 0

    def question(self, query_id: str) -> None:
        self.key = self.run_key + b"\x00" + query_id.encode("utf-8", "surrogatepass")
        self.count = 0

    def generate_trace_id(self) -> int:
        return int.from_bytes(hashlib.blake2b(self.key, digest_size=16, person=b"crag-trace").digest(), "big") or 1

    def generate_span_id(self) -> int:
        self.count += 1
        digest = hashlib.blake2b(self.key + self.count.to_bytes(4, "big"), digest_size=8, person=b"crag-span").digest()
        return int.from_bytes(digest, "big") or 1

    def is_trace_id_random(self) -> bool:
        return False


class _Collect:
    """A span processor that keeps each ended span for `export_traces` to hand to the exporter itself."""

    def __init__(self) -> None:
        self.spans: list[Any] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def _on_ending(self, span: Any) -> None:
        pass

    def on_end(self, span: Any) -> None:
        self.spans.append(span)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class _OtlpJsonLines:
    """OTLP/JSON lines: each `export` call one ``ExportTraceServiceRequest`` per line, encoded by the SDK's own
    OTLP encoder and protobuf's JSON mapping, with ids in hex as OTLP/JSON has them. The file appears
    whole at `shutdown` (`crag_lab._paths.replacing`)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.lines: list[str] = []

    def export(self, spans: Sequence[Any]) -> Any:
        from google.protobuf.json_format import MessageToDict
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        from opentelemetry.sdk.trace.export import SpanExportResult

        request = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
        for resource in request.get("resourceSpans", []):
            for scope in resource.get("scopeSpans", []):
                for span in scope.get("spans", []):
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in span:
                            span[key] = _hex(span[key])
        self.lines.append(json.dumps(request, sort_keys=True, ensure_ascii=False))
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        from crag_lab._paths import replacing

        with replacing(self.path) as fh:
            for line in self.lines:
                fh.write(line + "\n")

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _resource(project: str) -> Any:
    """The resource every crag_lab span is filed under: the service, the Phoenix project, the package version.

    Built as given (not ``Resource.create``, which adds a random ``service.instance.id`` per
    process and would make two exports of one recording differ).
    """
    from importlib.metadata import PackageNotFoundError, version

    from opentelemetry.sdk.resources import Resource

    try:
        ours = version("crag-lab")
    except PackageNotFoundError:  # pragma: no cover - run from a checkout that was never installed
        ours = "unknown"
    return Resource({"service.name": "crag_lab", "service.version": ours, "openinference.project.name": project})


def _hex(b64: str) -> str:
    import base64

    return base64.b64decode(b64).hex()


class _QuietExporter(logging.Filter):
    """Drops the OTLP exporter's own retry and failure log lines while crag_lab is the caller: it says it once."""

    local = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(self.local, "quiet", False)


_QUIET = _QuietExporter()


@contextmanager
def _quiet_exporter() -> Iterator[None]:
    for name in ("opentelemetry.exporter", "opentelemetry.sdk"):
        logger = logging.getLogger(name)
        if _QUIET not in logger.filters:
            logger.addFilter(_QUIET)
    for name in list(logging.root.manager.loggerDict):  # filters do not pass down to child loggers
        if name.startswith("opentelemetry.exporter"):
            logger = logging.getLogger(name)
            if _QUIET not in logger.filters:
                logger.addFilter(_QUIET)
    _QUIET.local.quiet = True
    try:
        yield
    finally:
        _QUIET.local.quiet = False


def otlp_exporter(endpoint: str, *, timeout_s: float = 10.0) -> SpanExporter:
    """The SDK's OTLP/HTTP span exporter for ``endpoint``; a base URL (``http://host:6006``) gets ``/v1/traces``."""
    from crag_lab._env import check_url

    check_url(endpoint, what="the OTLP endpoint", example="http://127.0.0.1:6006/v1/traces")
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise TracingUnavailableError("sending traces over OTLP needs opentelemetry-exporter-otlp-proto-http: "
                                      f"{INSTALL_HINT}") from None
    return OTLPSpanExporter(endpoint=traces_url(endpoint), timeout=timeout_s)


def traces_url(endpoint: str) -> str:
    """``endpoint`` with the OTLP traces path when it has no path of its own.

    >>> traces_url("http://127.0.0.1:6006"), traces_url("http://collector:4318/v1/traces")
    ('http://127.0.0.1:6006/v1/traces', 'http://collector:4318/v1/traces')
    """
    from urllib.parse import urlsplit

    return endpoint.rstrip("/") + "/v1/traces" if urlsplit(endpoint).path in ("", "/") else endpoint
