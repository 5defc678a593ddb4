"""One recorded question as OpenInference spans: the span tree `crag_lab.traces` exports and emits live.

`trace_record` lays one `crag_lab.records.QueryRecord` out on a tracer: a root CHAIN span for the
question, a CHAIN span per node step in run order, an LLM span per model call, an EVALUATOR span per
grading call (with each item's grade), a RETRIEVER span per tool call (with its documents), the
grading decision and its thresholds on the ``grade_evidence`` span. Times come from the record.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from crag_lab.config import CragConfig
from crag_lab.errors import CragLabError
from crag_lab.records import QueryRecord, RoundRecord, UsageRecord, run_route

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

    from crag_lab.replay.report import QueryReplay

PROJECT = "crag_lab"
"""The project the spans are filed under (the ``openinference.project.name`` resource attribute Phoenix reads)."""
INSTALL_HINT = "pip install 'crag-lab[trace]'"
BATCH_SPANS = 512
"""Spans per OTLP request (the SDK's ``BatchSpanProcessor`` default)."""

GRAPH_NAMES = {"knowledge_base": "crag_knowledge_base", "normal": "crag_normal", "naive_rag": "crag_naive_rag"}
EVALUATOR_TASKS = ("grade",)

MISSING_MEANS = {
    "path": "no node spans, only the model and tool calls under the question",
    "node_ms": "node spans are timed by their model calls, laid end to end",
    "usage": "no model-call spans and no token counts",
    "tool_history": "no retriever spans",
    "rounds": "no grades and no decisions",
    "latency_ms": "a question's time is the sum of its nodes'",
    "answer": "no final answer",
    "citations": "no citations",
    "started_at": "the first trace starts at the export time (give start=, or --start, for a reproducible file)",
}
"""What a recording without each field exports without (older recordings lack some)."""

_LINES = re.compile(r"^(?P<path>.*):L(?P<line>\d+)-L(?P<end>\d+)$")


class TraceExportError(CragLabError, ConnectionError):
    """Traces could not be sent or written; the message names the endpoint or file (the recording is untouched)."""


class TracingUnavailableError(CragLabError, ImportError):
    """The OpenTelemetry SDK or the OpenInference conventions are not installed; the message says what to install."""


def _require() -> None:
    """Import the SDK and the conventions now, or say what to install."""
    try:
        import openinference.semconv.trace  # noqa: F401
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        raise TracingUnavailableError(f"traces need the OpenTelemetry SDK and the OpenInference conventions ({exc.name} "
                                      f"is not installed): {INSTALL_HINT}") from None


def _attrs(values: Mapping[str, Any]) -> dict[str, Any]:
    """Attribute values OpenTelemetry takes: None left out, a dict as JSON, a sequence as strings or numbers."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, Mapping):
            out[key] = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
        elif isinstance(value, (list, tuple)):
            kinds = {type(v) for v in value}
            out[key] = list(value) if kinds <= {int} or kinds <= {float, int} or kinds <= {bool} else [str(v) for v in value]
        else:
            out[key] = value
    return out


def _document(item_id: str) -> dict[str, Any]:
    """Path and lines of an evidence id (``runbooks/tls.md:L12-L20``); a remote item keeps its id as its path."""
    match = _LINES.match(item_id)
    if match:
        return {"path": match["path"], "line": int(match["line"]), "line_end": int(match["end"])}
    return {"path": item_id.split("#", 1)[0]}


def _tokens(usage: Sequence[UsageRecord]) -> dict[str, int]:
    prompt = sum(int(u.get("prompt_tokens", 0)) for u in usage)
    completion = sum(int(u.get("completion_tokens", 0)) for u in usage)
    return {"llm.token_count.prompt": prompt, "llm.token_count.completion": completion,
            "llm.token_count.total": prompt + completion}


def missing_fields(record: Mapping[str, Any]) -> list[str]:
    """The fields of `MISSING_MEANS` a record lacks (``started_at`` is the recording's, not a record's)."""
    return [name for name in MISSING_MEANS if name != "started_at" and name not in record]


class _Writer:
    """Emits one record's spans on a tracer, at times laid out from the recording."""

    def __init__(self, tracer: Tracer, record: QueryRecord, *, model: str | None, config: CragConfig | None,
                 replayed: QueryReplay | None, replay_config: CragConfig | None) -> None:
        from openinference.semconv.trace import OpenInferenceSpanKindValues as Kinds
        from openinference.semconv.trace import SpanAttributes as A

        self.A, self.Kinds = A, Kinds
        self.tracer, self.record, self.model = tracer, record, model
        self.config, self.replayed, self.replay_config = config, replayed, replay_config
        self.spans = 0

    def _span(self, name: str, kind: Any, parent: Span | None, start: int, end: int, attributes: Mapping[str, Any],
              *, error: str | None = None, context: Context | None = None) -> Span:
        from opentelemetry.trace import Status, StatusCode, set_span_in_context

        ctx = set_span_in_context(parent) if parent is not None else context
        span = self.tracer.start_span(name, context=ctx, start_time=start,
                                      attributes=_attrs({self.A.OPENINFERENCE_SPAN_KIND: kind.value, **attributes}))
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        self.spans += 1
        span.end(end_time=max(end, start))
        return span

    def write(self, start_ns: int, context: Context | None) -> int:
        """Every span of the record, the root starting at ``start_ns``; the span count."""
        from opentelemetry.trace import Status, StatusCode

        rec, A = self.record, self.A
        usage = list(rec.get("usage") or [])
        steps = self._steps(usage)
        total_ms = float(rec.get("latency_ms") or sum(step[1] for step in steps))
        end_ns = start_ns + _ns(total_ms)
        route = run_route(rec)
        config = self.replay_config or self.config
        meta = {"query_id": str(rec.get("id", "")), "mode": rec.get("mode"), "route": route,
                "complexity": rec.get("complexity"), "labels": rec.get("labels") or None}
        root_attrs: dict[str, Any] = {
            A.INPUT_VALUE: rec.get("query", ""), A.OUTPUT_VALUE: rec.get("answer"),
            A.METADATA: {k: v for k, v in meta.items() if v is not None}, A.TAG_TAGS: ["crag_lab", route],
            **_tokens(usage), "crag.query_id": str(rec.get("id", "")), "crag.route": route, "crag.mode": rec.get("mode"),
            "crag.complexity": rec.get("complexity"), "crag.model": self.model, "crag.llm_calls": len(usage),
            "crag.latency_ms": total_ms, "crag.replayed": self.replayed is not None,
            "crag.missing": missing_fields(rec) or None,
        }
        if config is not None:
            root_attrs.update({f"crag.config.{k}": v for k, v in config.thresholds().items()})
            root_attrs["crag.config.aggregator"] = config.aggregator
        if self.replayed is not None:
            q = self.replayed
            root_attrs.update({"crag.replay.outcome": q.outcome, "crag.replay.recorded_outcome": q.recorded_outcome,
                               "crag.replay.actions": q.actions, "crag.replay.recorded_actions": q.recorded_actions,
                               "crag.replay.note": q.note or None, "crag.replay.calls_delta": q.calls_delta})
        for n, cite in enumerate(rec.get("citations") or []):
            root_attrs.update({f"crag.citations.{n}.{k}": v for k, v in cite.items() if k in ("id", "path", "line",
                                                                                             "line_end", "tool")})
        name = GRAPH_NAMES.get(str(rec.get("mode")), "crag_lab")
        root = self.tracer.start_span(name, context=context, start_time=start_ns,
                                      attributes=_attrs({A.OPENINFERENCE_SPAN_KIND: self.Kinds.CHAIN.value, **root_attrs}))
        if any(not u.get("ok", True) for u in usage):
            root.set_status(Status(StatusCode.ERROR, "a model call failed"))
        self.spans += 1
        at = start_ns
        grades_seen = 0
        for node, ms, calls, iteration in steps:
            node_end = at + _ns(ms)
            if node is None:  # model calls of a record without a path: straight under the question
                self._calls(root, calls, at, node_end)
            else:
                rnd = None
                if node == "grade_evidence":
                    rounds = rec.get("rounds") or []
                    rnd = rounds[grades_seen] if grades_seen < len(rounds) else None
                    grades_seen += 1
                span = self._span(node, self.Kinds.CHAIN, root, at, node_end, self._node_attrs(node, iteration, rnd))
                if node == "tool_exec":
                    self._tools(span, iteration, at, node_end)
                self._calls(span, calls, at, node_end, rnd)
            at = node_end
        root.end(end_time=max(end_ns, at))
        return self.spans

    def _steps(self, usage: list[UsageRecord]) -> list[tuple[str | None, float, list[UsageRecord], int]]:
        """``(node, ms, its model calls, grading rounds before it)`` per node step, in run order."""
        rec = self.record
        path = list(rec.get("path") or [])
        node_ms = [(str(n), float(ms)) for n, ms in rec.get("node_ms") or []]
        if not path:
            return [(None, sum(float(u.get("latency_ms", 0.0)) for u in usage), usage, 0)] if usage else []
        left = list(usage)
        steps: list[tuple[str | None, float, list[UsageRecord], int]] = []
        iteration = 0
        for k, node in enumerate(path):
            calls = [u for u in left if u.get("node") == node and int(u.get("iteration", 0)) == iteration]
            left = [u for u in left if not any(u is c for c in calls)]
            if k < len(node_ms) and node_ms[k][0] == node:
                ms = node_ms[k][1]
            else:
                ms = sum(float(u.get("latency_ms", 0.0)) for u in calls)
            steps.append((node, ms, calls, iteration))
            if node == "grade_evidence":
                iteration += 1
        return steps

    def _node_attrs(self, node: str, iteration: int, rnd: RoundRecord | None) -> dict[str, Any]:
        A, rec = self.A, self.record
        attrs: dict[str, Any] = {A.GRAPH_NODE_ID: node, A.GRAPH_NODE_NAME: node, "crag.iteration": iteration}
        if node == "analyze_and_route":
            plan = rec.get("routing_plan") or {}
            attrs.update({A.INPUT_VALUE: rec.get("query"), A.OUTPUT_VALUE: _json(plan) if plan else None,
                          A.OUTPUT_MIME_TYPE: "application/json" if plan else None, "crag.complexity": rec.get("complexity")})
        elif node == "plan":
            calls = [c for c in rec.get("tool_history") or [] if int(c.get("round", 0)) == iteration + 1]
            attrs.update({A.OUTPUT_VALUE: _json([{"tool": c.get("tool"), "args": c.get("args")} for c in calls]),
                          A.OUTPUT_MIME_TYPE: "application/json"})
        elif node == "synthesize":
            attrs[A.OUTPUT_VALUE] = rec.get("answer")
            read = rec.get("read")
            if read:  # how the offline synthesizer read the evidence: why, and each weighed unit's scores
                attrs.update({"crag.answer.abstained": read.get("abstained"), "crag.answer.why": read.get("why")})
                for k, unit in enumerate(read.get("units") or []):
                    attrs.update({f"crag.answer.units.{k}.{key}": value for key, value in unit.items()})
        elif node == "grade_evidence" and rnd is not None:
            attrs.update(self._decision(rnd))
        return attrs

    def _decision(self, rnd: RoundRecord) -> dict[str, Any]:
        """The round's thresholds and decision; under replay, the replayed ones beside what was recorded."""
        items = rnd.get("items") or []
        attrs: dict[str, Any] = {"crag.round": rnd.get("iteration"), "crag.decision.parse_ok": rnd.get("parse_ok"),
                                 "crag.decision.capped": rnd.get("capped")}
        thresholds = dict(rnd.get("thresholds") or {})
        action: str | None = rnd.get("action")
        rule: str | None = rnd.get("rule")
        kept, dropped, aggregate = list(rnd.get("kept") or []), list(rnd.get("dropped") or []), rnd.get("aggregate")
        if self.replayed is not None and self.replay_config is not None:
            from crag_lab.replay.scalar import round_decision

            attrs.update({"crag.recorded.action": action, "crag.recorded.rule": rule, "crag.recorded.kept": kept,
                          "crag.recorded.dropped": dropped, "crag.recorded.aggregate": aggregate})
            thresholds = {**self.replay_config.thresholds(), "aggregator": self.replay_config.aggregator}
            k, decided = int(rnd.get("iteration", 0)), len(self.replayed.actions)
            decision = round_decision(rnd, self.replay_config)[0] if k <= decided else None
            if k == decided + 1 and self.replayed.note:
                attrs["crag.replay.note"] = self.replayed.note
            if decision is None:
                attrs["crag.replay.reached"] = False  # the replayed run never gets here, or cannot be decided here
                action = rule = aggregate = None
                kept = dropped = []
            else:
                attrs["crag.replay.reached"] = True
                action, rule, aggregate = decision.action, decision.rule, decision.aggregate
                kept = [items[i]["id"] for i in decision.kept]
                dropped = [items[i]["id"] for i in decision.dropped]
        attrs.update({f"crag.thresholds.{k}": v for k, v in thresholds.items()})
        kept_ids = set(kept)
        table = [{"id": i.get("id"), "tool": i.get("tool"), "vector_score": i.get("vector_score"),
                  "grade": i.get("grader_score"), "new": i.get("new"), "kept": i.get("id") in kept_ids} for i in items]
        outcome = {"action": action, "rule": rule, "aggregate": aggregate, "kept": kept, "dropped": dropped}
        attrs.update({"crag.decision.action": action, "crag.decision.rule": rule, "crag.decision.aggregate": aggregate,
                      "crag.decision.kept": kept, "crag.decision.dropped": dropped, "crag.items": _json(table),
                      self.A.INPUT_VALUE: _json(table), self.A.INPUT_MIME_TYPE: "application/json",
                      self.A.OUTPUT_VALUE: _json(outcome), self.A.OUTPUT_MIME_TYPE: "application/json"})
        return attrs

    def _tools(self, parent: Span, iteration: int, start: int, end: int) -> None:
        """A RETRIEVER span per tool call of the round; the node's time is shared out (per-call times are not recorded)."""
        A = self.A
        calls = [c for c in self.record.get("tool_history") or [] if int(c.get("round", 0)) == iteration + 1]
        if not calls:
            return
        share = (end - start) // len(calls)
        for n, call in enumerate(calls):
            args = call.get("args") or {}
            attrs: dict[str, Any] = {
                A.TOOL_NAME: call.get("tool"), A.INPUT_VALUE: args.get("query") if isinstance(args.get("query"), str)
                else json.dumps(args, ensure_ascii=False, default=str), A.TOOL_PARAMETERS: args or None,
                "crag.round": call.get("round"), "crag.latency_estimated": True,
            }
            scores = list(call.get("scores") or [])
            for k, item_id in enumerate(call.get("item_ids") or []):
                prefix = f"{A.RETRIEVAL_DOCUMENTS}.{k}."
                attrs.update({prefix + "document.id": item_id, prefix + "document.metadata": _document(item_id),
                              prefix + "document.score": scores[k] if k < len(scores) else None})
            s = start + n * share
            self._span(str(call.get("tool", "tool")), self.Kinds.RETRIEVER, parent, s, s + share, attrs,
                       error=None if call.get("ok", True) else str(call.get("error") or "the tool failed"))

    def _calls(self, parent: Span, calls: list[UsageRecord], start: int, end: int, rnd: RoundRecord | None = None) -> None:
        """A span per model call, laid end to end from the node's start: EVALUATOR for grading, LLM otherwise."""
        at = start
        graders = [u for u in calls if u.get("task") in EVALUATOR_TASKS]
        new_items = [i for i in (rnd or {}).get("items", []) if i.get("new", True)] if rnd is not None else []
        shadow: Mapping[str, Any] | None = rnd.get("shadow") if rnd is not None else None
        laid: list[tuple[UsageRecord, bool]] = [(u, False) for u in calls]
        if shadow:
            laid += [(u, True) for u in shadow.get("usage", [])]
        for u, is_shadow in laid:
            took = _ns(float(u.get("latency_ms", 0.0)))
            s, e = at, min(at + took, max(end, at))
            at = e
            grading = u.get("task") in EVALUATOR_TASKS
            attrs: dict[str, Any] = {
                self.A.LLM_MODEL_NAME: self.model, **_tokens([u]), "crag.task": u.get("task"),
                "crag.attempts": u.get("attempts"), "crag.cached": u.get("cached"), "crag.iteration": u.get("iteration"),
            }
            if grading and rnd is not None:
                attrs.update(self._grades(rnd, u, graders, new_items, is_shadow))
            kind = self.Kinds.EVALUATOR if grading else self.Kinds.LLM
            name = ("grader" if grading else f"llm.{u.get('task', 'call')}") + (" (shadow)" if is_shadow else "")
            self._span(name, kind, parent, s, e, attrs, error=None if u.get("ok", True) else "the model call failed")

    def _grades(self, rnd: RoundRecord, call: UsageRecord, graders: list[UsageRecord], new_items: list[Any],
                is_shadow: bool) -> dict[str, Any]:
        """The grades one grading call gave: every new item's (one call per round), or its own item's (per item)."""
        if is_shadow:  # the shadow scores cover every item of the round, in order; its calls graded the new ones
            shadow: Mapping[str, Any] = rnd.get("shadow") or {}
            scores = list(shadow.get("scores", []))
            items = list(rnd.get("items") or [])[-len(scores):] if scores else []
            usage = list(shadow.get("usage", []))
            fresh = len(new_items)
            if len(usage) > 1 and len(usage) == fresh <= len(items):
                k = next(n for n, u in enumerate(usage) if u is call)
                items, scores = items[len(items) - fresh + k:][:1], scores[len(items) - fresh + k:][:1]
            graded = [(i.get("id"), s) for i, s in zip(items, scores, strict=False)]
            source = "shadow"
        else:
            items = new_items
            if len(graders) > 1 and len(graders) == len(items):
                k = next(n for n, u in enumerate(graders) if u is call)
                items = items[k:k + 1]
            graded = [(i.get("id"), i.get("grader_score")) for i in items]
            source = "grader"
        attrs: dict[str, Any] = {"crag.grade_source": source, "crag.shadow": is_shadow, "crag.graded": len(graded),
                                 self.A.OUTPUT_VALUE: _json([{"id": i, "grade": g} for i, g in graded]),
                                 self.A.OUTPUT_MIME_TYPE: "application/json"}
        for n, (item_id, grade) in enumerate(graded):
            attrs.update({f"crag.grades.{n}.id": item_id, f"crag.grades.{n}.grade": grade})
        return attrs


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _ns(ms: float) -> int:
    return round(ms * 1_000_000)


def trace_record(tracer: Tracer, record: QueryRecord, *, start_ns: int, model: str | None = None,
                 config: CragConfig | None = None, replayed: QueryReplay | None = None,
                 replay_config: CragConfig | None = None, context: Context | None = None) -> int:
    """Emit one recorded question as spans on ``tracer`` (its root starting at ``start_ns``); the span count.

    ``context`` is the parent of the root span (None: the current one; an empty ``Context()``: a
    new trace). ``replayed`` and ``replay_config`` mark the trace as a replay at that setting
    (`crag_lab.replay.scalar.replay_record`).
    """
    _require()
    return _Writer(tracer, record, model=model, config=config, replayed=replayed,
                   replay_config=replay_config).write(start_ns, context)
