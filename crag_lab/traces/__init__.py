"""Recorded runs as OpenTelemetry traces, in OpenInference's conventions: open them in Phoenix or any OTLP backend.

Each recorded question (`crag_lab.records.QueryRecord`) becomes one trace:

- a root CHAIN span named after the graph (``crag_knowledge_base``), with the question, the answer,
  its citations, the route, the token counts and the thresholds in force;
- a CHAIN span per graph node, in the order the nodes ran (``node_ms``);
- under them an LLM span per model call (analyze, plan, synthesize), an EVALUATOR span per grading
  call with every item's grade, and a RETRIEVER span per tool call with its documents (path,
  lines, score); the ``grade_evidence`` span carries the decision (action, pre-filter rule, kept
  and dropped items, aggregate) and the thresholds it was taken with.

`export_traces` (``Experiment.to_otel``, ``crag-lab export-traces``) sends a recording to an OTLP/HTTP
endpoint, writes it as OTLP/JSON lines, or hands it to any OpenTelemetry ``SpanExporter``; with
``replay=`` the decisions are those of a replay at another setting, marked as replayed.
`LiveTraces` emits the same spans while `crag_lab.Lab` runs (``Lab(..., tracer_provider=...)`` or
``CRAG_OTEL_ENDPOINT``). Times come from the recording; trace and span ids of an export are derived
from the run, the question and the start, so exporting a recording twice at the same start gives
the same ids (a backend keeps one copy) and the same file. A recording made by `Lab.run` says when
it started; an older one starts at the export time unless ``start`` is given.

The OpenTelemetry SDK and the OpenInference conventions are optional (``pip install
'crag-lab[trace]'``): they are imported only here, when a trace is asked for.

>>> from crag_lab import Experiment
>>> exp = Experiment.load("notebooks/recordings/kb_knowledge_base.jsonl")  # doctest: +SKIP
>>> exp.to_otel(endpoint="http://127.0.0.1:6006/v1/traces").line()  # doctest: +SKIP
'sent 140 traces (1416 spans) to http://127.0.0.1:6006/v1/traces'
"""

from crag_lab.traces._otlp import otlp_exporter, traces_url
from crag_lab.traces._spans import (
    INSTALL_HINT,
    MISSING_MEANS,
    PROJECT,
    TraceExportError,
    TracingUnavailableError,
    missing_fields,
    trace_record,
)
from crag_lab.traces.export import RecordedRun, TraceExport, export_traces
from crag_lab.traces.live import LiveTraces

__all__ = [
    "INSTALL_HINT",
    "MISSING_MEANS",
    "PROJECT",
    "LiveTraces",
    "RecordedRun",
    "TraceExport",
    "TraceExportError",
    "TracingUnavailableError",
    "export_traces",
    "missing_fields",
    "otlp_exporter",
    "trace_record",
    "traces_url",
]
