"""Trace export: the 140-question KB recording as OpenInference traces, against the time the run took.

`Experiment.to_otel` (`crag_lab.traces.export_traces`) turns the bundled recording
(``notebooks/recordings/kb_knowledge_base.jsonl``: 140 questions, offline model, prepared index) into
one trace per question, three ways, interleaved, each repeated and the median kept (wall and CPU time
of this process):

- ``memory``: to the SDK's ``InMemorySpanExporter`` (building the spans only);
- ``file``: OTLP/JSON lines (``--file``);
- ``otlp``: OTLP/HTTP protobuf to a receiver on 127.0.0.1 in this process that answers 200 (what a
  client pays to send them; the backend's own ingestion is the backend's).

The run's time is the recording's: the sum of the questions' ``latency_ms`` (they ran one after
another). Target (issue #34): exporting takes ≤ 5 % of it.

    .venv/bin/python bench/bench_export.py [--quick] [--json out.json]

Result keys: ``run_ms``, ``spans``, ``export_ms`` (per way: wall/CPU medians), ``ratio`` (per way:
median wall export ms / run ms), ``replayed_file_ms``, ``bytes``.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from _common import ROOT, SCRATCH, emit, load_average, log, parse_args, ratio

RECORDING = ROOT / "notebooks" / "recordings" / "kb_knowledge_base.jsonl"
TARGET = 0.05


class _Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that reads each request whole and answers an empty ExportTraceServiceResponse."""

    received = 0

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).received += len(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def receiver() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    finally:
        server.shutdown()
        server.server_close()


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000, out


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(__doc__.splitlines()[0], argv)
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from crag_lab.replay import Experiment

    exp = Experiment.load(RECORDING)
    run_ms = sum(float(r["latency_ms"]) for r in exp.records)
    repeats = 3 if args.quick else 9
    out_dir = SCRATCH / "export"
    out_dir.mkdir(parents=True, exist_ok=True)
    start = "2026-01-01T00:00:00Z"
    load_before = load_average()
    times: dict[str, list[tuple[float, float]]] = {"memory": [], "file": [], "otlp": [], "replayed_file": []}
    spans = 0
    with receiver() as url:
        ways: dict[str, Callable[[], Any]] = {
            "memory": lambda: exp.to_otel(InMemorySpanExporter(), start=start),
            "file": lambda: exp.to_otel(path=out_dir / "kb.otlp.jsonl", start=start),
            "otlp": lambda: exp.to_otel(endpoint=url, start=start),
            "replayed_file": lambda: exp.to_otel(path=out_dir / "kb-replayed.otlp.jsonl", start=start,
                                                 replay={"relevance_floor": 0.4}),
        }
        for way in ways.values():  # warm: imports, the exporter's first connection
            way()
        for n in range(repeats):
            for name, way in ways.items():
                wall, cpu, done = timed(way)
                times[name].append((wall, cpu))
                spans = done.spans
            log(f"export: repeat {n + 1}/{repeats}: " + ", ".join(f"{k} {v[-1][0]:.0f} ms" for k, v in times.items()))
        sent_bytes = _Receiver.received // (repeats + 1)

    def medians(rows: list[tuple[float, float]]) -> dict[str, float]:
        return {"wall_median": round(statistics.median(w for w, _ in rows), 1),
                "cpu_median": round(statistics.median(c for _, c in rows), 1),
                "wall_min": round(min(w for w, _ in rows), 1), "wall_max": round(max(w for w, _ in rows), 1)}

    export_ms = {name: medians(rows) for name, rows in times.items()}
    ratios = {name: ratio(m["wall_median"], run_ms, 4) for name, m in export_ms.items()}
    emit({
        "recording": str(RECORDING.relative_to(ROOT)),
        "questions": len(exp.records),
        "spans": spans,
        "run_ms": round(run_ms, 1),
        "repeats": repeats,
        "export_ms": export_ms,
        "ratio": ratios,
        "worst_ratio": max(r for r in ratios.values() if r is not None),
        "target_ratio": TARGET,
        "bytes": {"file": (out_dir / "kb.otlp.jsonl").stat().st_size, "otlp_protobuf": sent_bytes},
        "load_average_before": load_before,
        "load_average_after": load_average(),
    }, args.json_out)


if __name__ == "__main__":
    main()
