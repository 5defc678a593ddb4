"""crag_lab.traces: recorded and live runs as OpenInference traces (no server here; Phoenix is tests/test_traces_phoenix.py)."""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _experiments import COMPLEX, PLAN, REFINE_PLANS, items
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from crag_lab import CragConfig, Lab
from crag_lab.cli import main
from crag_lab.records import QueryRecord
from crag_lab.replay import Experiment
from crag_lab.testing import ScriptedLLM, StaticTool
from crag_lab.traces import (
    INSTALL_HINT,
    TraceExportError,
    TracingUnavailableError,
    export_traces,
)

START = "2026-01-01T00:00:00Z"
START_NS = 1_767_225_600_000_000_000

THRESHOLDS = {"relevance_floor": 0.3, "generate_threshold": 0.7, "vector_score_threshold": 0.8,
              "auto_approve_max_items": 2, "max_iterations": 3, "aggregator": "mean"}


def usage(node: str, task: str, iteration: int, ms: float, prompt: int = 100, completion: int = 10) -> dict[str, Any]:
    return {"node": node, "task": task, "iteration": iteration, "latency_ms": ms, "prompt_tokens": prompt,
            "completion_tokens": completion, "ok": True, "attempts": 1}


def two_rounds() -> QueryRecord:
    """A REFINE round (one item dropped) then a GENERATE round, as `Lab.run` records it."""
    round1 = {"iteration": 1, "round_tools": ["vector_search", "keyword_search"], "rule": None, "parse_ok": True,
              "items": [{"id": "a.md:L1-L4", "path": "a.md", "line": 1, "tool": "vector_search", "vector_score": 0.61,
                         "grader_score": 0.6, "new": True},
                        {"id": "b.md:L7-L9", "path": "b.md", "line": 7, "tool": "keyword_search", "vector_score": None,
                         "grader_score": 0.1, "new": True},
                        {"id": "d.md:L5-L6", "path": "d.md", "line": 5, "tool": "keyword_search", "vector_score": None,
                         "grader_score": 0.05, "new": True}],
              "grader_calls": 1, "grader_tokens": 330, "aggregate": 0.6, "action": "REFINE", "kept": ["a.md:L1-L4"],
              "dropped": ["b.md:L7-L9", "d.md:L5-L6"], "capped": False, "thresholds": THRESHOLDS, "shadow": None}
    round2 = {**round1, "iteration": 2, "round_tools": ["keyword_search"],
              "items": [{**round1["items"][0], "new": False},
                        {"id": "c.md:L2-L3", "path": "c.md", "line": 2, "tool": "keyword_search", "vector_score": None,
                         "grader_score": 0.95, "new": True},
                        {"id": "e.md:L1-L2", "path": "e.md", "line": 1, "tool": "keyword_search", "vector_score": None,
                         "grader_score": 0.9, "new": True}],
              "aggregate": 0.8167, "action": "GENERATE", "kept": ["a.md:L1-L4", "c.md:L2-L3", "e.md:L1-L2"],
              "dropped": []}
    return {
        "id": "q7", "query": "Which port does the gateway use?", "labels": {"gold": ["c.md:L2-L3"]},
        "mode": "knowledge_base", "complexity": "complex",
        "routing_plan": {"complexity": "complex", "suggested_tools": ["vector_search"]},
        "path": ["analyze_and_route", "plan", "tool_exec", "grade_evidence", "plan", "tool_exec", "grade_evidence",
                 "synthesize"],
        "node_ms": [["analyze_and_route", 5.0], ["plan", 2.0], ["tool_exec", 30.0], ["grade_evidence", 20.0],
                    ["plan", 3.0], ["tool_exec", 10.0], ["grade_evidence", 15.0], ["synthesize", 8.0]],
        "latency_ms": 95.0,
        "rounds": [round1, round2],
        "tool_history": [
            {"tool": "vector_search", "args": {"query": "gateway port", "top_k": 5}, "round": 1, "ok": True,
             "error": None, "item_ids": ["a.md:L1-L4"], "scores": [0.61]},
            {"tool": "keyword_search", "args": {"query": "gateway port", "top_k": 3}, "round": 1, "ok": True,
             "error": None, "item_ids": ["b.md:L7-L9", "d.md:L5-L6"], "scores": [4.2, 3.1]},
            {"tool": "keyword_search", "args": {"query": "port 8443", "top_k": 3}, "round": 2, "ok": True,
             "error": None, "item_ids": ["c.md:L2-L3", "e.md:L1-L2"], "scores": [6.5, 5.0]},
        ],
        "usage": [usage("analyze_and_route", "analyze", 0, 4.0), usage("plan", "plan", 0, 1.5),
                  usage("grade_evidence", "grade", 0, 18.0, 300, 30), usage("plan", "plan", 1, 2.5),
                  usage("grade_evidence", "grade", 1, 12.0), usage("synthesize", "synthesize", 2, 7.0)],
        "answer": "Port 8443 [1].\n\nSources:\n[1] c.md:L2-L3",
        "citations": [{"id": "c.md:L2-L3", "path": "c.md", "line": 2, "line_end": 3, "tool": "keyword_search"}],
        "audit_events": {},
    }  # type: ignore[typeddict-item]


def exported(exp: Experiment, **kwargs: Any) -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    export_traces(exp, memory, start=kwargs.pop("start", START), **kwargs)
    return sorted(memory.get_finished_spans(), key=lambda s: (s.start_time or 0, s.context.span_id))


def children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def kind(span: ReadableSpan) -> str:
    return str((span.attributes or {})["openinference.span.kind"])


def test_a_question_is_one_trace_with_its_nodes_in_run_order_and_their_calls_beneath() -> None:
    rec = two_rounds()
    spans = exported(Experiment(CragConfig(), [rec], {"model": "offline"}))
    assert len({s.context.trace_id for s in spans}) == 1
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == "crag_knowledge_base" and kind(root) == "CHAIN"
    nodes = children(spans, root)
    assert [n.name for n in nodes] == rec["path"] and {kind(n) for n in nodes} == {"CHAIN"}
    # Times are the recording's: each node as long as it took, laid end to end from the start.
    assert root.start_time == START_NS and root.end_time == START_NS + 95_000_000
    assert [(n.end_time - n.start_time) / 1e6 for n in nodes] == [ms for _, ms in rec["node_ms"]]  # type: ignore[operator]
    assert all(a.end_time == b.start_time for a, b in itertools.pairwise(nodes))
    # Model calls: LLM spans, the grader's EVALUATOR; token counts on each and summed on the question.
    below = {n.name + str(i): [(c.name, kind(c)) for c in children(spans, n)] for i, n in enumerate(nodes)}
    assert below["analyze_and_route0"] == [("llm.analyze", "LLM")]
    assert below["grade_evidence3"] == [("grader", "EVALUATOR")]
    assert below["tool_exec2"] == [("vector_search", "RETRIEVER"), ("keyword_search", "RETRIEVER")]
    assert below["tool_exec5"] == [("keyword_search", "RETRIEVER")]
    assert root.attributes["llm.token_count.total"] == sum(u["prompt_tokens"] + u["completion_tokens"]  # type: ignore[index]
                                                            for u in rec["usage"])
    grader = children(spans, nodes[3])[0]
    assert grader.attributes["llm.token_count.prompt"] == 300 and grader.end_time - grader.start_time == 18_000_000  # type: ignore[index,operator]
    assert [root.attributes[k] for k in ("input.value", "output.value", "crag.route", "crag.query_id")] == [  # type: ignore[index]
        rec["query"], rec["answer"], "GENERATE", "q7"]
    assert root.attributes["crag.citations.0.path"] == "c.md" and root.attributes["crag.citations.0.line_end"] == 3  # type: ignore[index]


def test_retriever_spans_carry_their_documents_and_the_grader_every_grade() -> None:
    spans = exported(Experiment(CragConfig(), [two_rounds()]))
    vector = next(s for s in spans if s.name == "vector_search")
    attrs = dict(vector.attributes or {})
    assert attrs["retrieval.documents.0.document.id"] == "a.md:L1-L4"
    assert attrs["retrieval.documents.0.document.score"] == 0.61
    assert json.loads(str(attrs["retrieval.documents.0.document.metadata"])) == {"path": "a.md", "line": 1, "line_end": 4}
    assert attrs["input.value"] == "gateway port"
    graders = [dict(s.attributes or {}) for s in spans if s.name == "grader"]
    assert [(g["crag.grades.0.id"], g["crag.grades.0.grade"]) for g in graders] == [("a.md:L1-L4", 0.6), ("c.md:L2-L3", 0.95)]
    assert graders[0]["crag.grades.2.grade"] == 0.05 and graders[0]["crag.graded"] == 3
    assert graders[1]["crag.graded"] == 2  # round 2 grades only its new items


def test_the_grading_node_carries_the_thresholds_in_force_and_the_decision() -> None:
    spans = exported(Experiment(CragConfig(), [two_rounds()]))
    first, second = [dict(s.attributes or {}) for s in spans if s.name == "grade_evidence"]
    assert first["crag.decision.action"] == "REFINE" and list(first["crag.decision.dropped"]) == ["b.md:L7-L9",
                                                                                                     "d.md:L5-L6"]
    assert list(first["crag.decision.kept"]) == ["a.md:L1-L4"] and first["crag.decision.aggregate"] == 0.6
    assert first["crag.thresholds.relevance_floor"] == 0.3 and first["crag.thresholds.generate_threshold"] == 0.7
    assert "crag.decision.rule" not in first  # no pre-filter rule fired
    assert second["crag.decision.action"] == "GENERATE"
    assert [i["kept"] for i in json.loads(str(first["crag.items"]))] == [True, False, False]
    assert json.loads(str(second["output.value"]))["kept"] == ["a.md:L1-L4", "c.md:L2-L3", "e.md:L1-L2"]


def test_a_replayed_export_is_marked_and_shows_the_decision_at_that_setting() -> None:
    exp = Experiment(CragConfig(), [two_rounds()])
    spans = exported(exp, replay={"relevance_floor": 0.65, "generate_threshold": 0.9})
    (root,) = [s for s in spans if s.parent is None]
    assert root.attributes["crag.replayed"] is True and root.attributes["crag.config.relevance_floor"] == 0.65  # type: ignore[index]
    assert root.attributes["crag.replay.recorded_actions"] == ("REFINE", "GENERATE")  # type: ignore[index]
    first = dict(next(s for s in spans if s.name == "grade_evidence").attributes or {})
    # At floor 0.65 the 0.6 item is dropped too: nothing survives, so the round re-retrieves.
    assert first["crag.decision.action"] == "RE_RETRIEVE" and first["crag.recorded.action"] == "REFINE"
    assert list(first["crag.decision.dropped"]) == ["a.md:L1-L4", "b.md:L7-L9", "d.md:L5-L6"]
    assert first["crag.thresholds.relevance_floor"] == 0.65 and first["crag.replay.reached"] is True
    second = dict([s for s in spans if s.name == "grade_evidence"][1].attributes or {})
    assert second["crag.replay.reached"] is False  # the replayed run leaves the recording after round 1
    recorded = exported(exp)
    assert {s.context.trace_id for s in recorded}.isdisjoint({s.context.trace_id for s in spans})


def test_the_file_is_otlp_json_and_the_same_for_the_same_recording_and_start(tmp_path: Path) -> None:
    exp = Experiment(CragConfig(), [two_rounds(), {**two_rounds(), "id": "q8"}], {"model": "offline"})
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    assert export_traces(exp, path=a, start=START).line() == f"wrote 2 traces (36 spans) to {a}"
    export_traces(exp, path=b, start=START)
    export_traces(exp, path=c, start="2026-01-02T00:00:00Z")
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    lines = [json.loads(line) for line in a.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 2  # one question's trace per line
    spans = [s for scope in lines[0]["resourceSpans"][0]["scopeSpans"] for s in scope["spans"]]
    assert len(spans) == 18 and len({s["traceId"] for s in spans}) == 1
    assert all(len(s["traceId"]) == 32 and len(s["spanId"]) == 16 and int(s["spanId"], 16) for s in spans)
    ids = {s["spanId"] for s in spans}
    assert all(s.get("parentSpanId", next(iter(ids))) in ids for s in spans)  # every parent is in the trace
    resource = {a["key"]: a["value"]["stringValue"] for a in lines[0]["resourceSpans"][0]["resource"]["attributes"]}
    assert resource["openinference.project.name"] == "crag_lab"  # the Phoenix project; --project names another
    exp.save(tmp_path / "run.jsonl")
    assert main(["export-traces", str(tmp_path / "run.jsonl"), "--file", str(c), "--project", "kb-1"]) == 0
    line = json.loads(c.read_text(encoding="utf-8").splitlines()[0])
    assert {"key": "openinference.project.name", "value": {"stringValue": "kb-1"}} in \
        line["resourceSpans"][0]["resource"]["attributes"]


def test_a_recording_that_says_when_it_started_exports_the_same_file_without_a_start(tmp_path: Path) -> None:
    exp = Experiment(CragConfig(), [two_rounds()], {"started_at": "2026-01-01T00:00:00.000+00:00"})
    done = export_traces(exp, path=tmp_path / "a.jsonl")
    assert done.lacking() is None
    export_traces(exp, path=tmp_path / "b.jsonl", start=START)
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def test_an_older_recording_exports_what_it_has_and_says_what_is_missing(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    old = {k: v for k, v in two_rounds().items() if k not in ("node_ms", "tool_history", "citations")} | {"id": "old"}
    exp = Experiment(CragConfig(), [old, two_rounds()])  # type: ignore[list-item]
    memory = InMemorySpanExporter()
    done = export_traces(exp, memory, start=START)
    assert done.missing == {"node_ms": 1, "tool_history": 1, "citations": 1}
    line = done.lacking()
    assert line is not None and "node_ms in 1 of 2 questions" in line and "no retriever spans" in line
    spans = memory.get_finished_spans()
    (root,) = [s for s in spans if s.parent is None and (s.attributes or {}).get("crag.query_id") == "old"]
    assert list(root.attributes["crag.missing"]) == ["node_ms", "tool_history", "citations"]  # type: ignore[index]
    names = [s.name for s in spans if s.context.trace_id == root.context.trace_id]
    assert names.count("grade_evidence") == 2 and "vector_search" not in names  # its nodes and calls, no tool calls
    node = next(s for s in spans if s.context.trace_id == root.context.trace_id and s.name == "grade_evidence")
    assert node.end_time - node.start_time == 18_000_000  # type: ignore[operator]  # timed by its model call
    # The command line exports it too (exit 0) and says what is missing on stderr.
    rec = tmp_path / "old.jsonl"
    exp.save(rec)
    assert main(["export-traces", str(rec), "--file", str(tmp_path / "t.jsonl")]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == f"wrote 2 traces (33 spans) to {tmp_path / 't.jsonl'}"
    assert err.startswith("crag-lab: note: the recording lacks node_ms in 1 of 2 questions") and err.count("\n") == 1
    assert err.rstrip().endswith("started_at: the first trace starts at the export time (give start=, or --start, for a "
                                 "reproducible file)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_endpoint_is_one_line_naming_it_and_the_recording_is_untouched(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "run.jsonl"
    Experiment(CragConfig(), [two_rounds()]).save(rec)
    before = hashlib.sha256(rec.read_bytes()).hexdigest()
    url = f"http://127.0.0.1:{free_port()}/v1/traces"
    assert main(["export-traces", str(rec), "--otlp", url, "--timeout", "1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith(f"crag-lab: could not send traces to {url}: ") and "nothing was sent" in err
    assert hashlib.sha256(rec.read_bytes()).hexdigest() == before
    with pytest.raises(TraceExportError, match=r"could not send traces to http://127\.0\.0\.1"):
        Experiment.load(rec).to_otel(endpoint=url.removesuffix("/v1/traces"), timeout_s=1)


@pytest.mark.parametrize(("argv", "message"), [
    (["--otlp", "ftp://127.0.0.1:6006"], "--otlp 'ftp://127.0.0.1:6006' must start with http:// or https://"),
    (["--file", "t.jsonl", "--replay", "relevance_floor=high"], "relevance_floor: Input should be a valid number"),
    (["--file", "t.jsonl", "--start", "yesterday"], "start 'yesterday' is not an ISO 8601 time"),
])
def test_bad_options_are_one_line_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    monkeypatch.chdir(tmp_path)
    Experiment(CragConfig(), [two_rounds()]).save("run.jsonl")
    assert main(["export-traces", "run.jsonl", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "t.jsonl").exists()


# ---- live -------------------------------------------------------------------------------------------


def scripted_lab(**kwargs: Any) -> Lab:
    """A REFINE round then a GENERATE round, with a vector_search and keyword_search tool."""
    llm = ScriptedLLM({"analyze": COMPLEX, "plan": [PLAN, *REFINE_PLANS], "grade": ["[0.6, 0.6, 0.1, 0.6]",
                                                                                    "[0.9, 0.9, 0.9, 0.9]"],
                       "synthesize": "An answer [1]."})
    return Lab([StaticTool("vector_search", items(4)), StaticTool("keyword_search", [items(4, 0.0, f"k{i}_")
                                                                                     for i in range(4)])],
               llm=llm, config=CragConfig(model_retries=0), **kwargs)


def shape(spans: list[ReadableSpan]) -> list[tuple[Any, ...]]:
    """The spans as a tree of names, kinds and attributes, without times and ids."""
    by_id = {s.context.span_id: s for s in spans}
    timing = {"crag.latency_ms"}

    def depth(s: ReadableSpan) -> int:
        return 0 if s.parent is None or s.parent.span_id not in by_id else 1 + depth(by_id[s.parent.span_id])

    return sorted((depth(s), s.name, kind(s), by_id[s.parent.span_id].name if s.parent and s.parent.span_id in by_id
                   else None, sorted((k, str(v)) for k, v in (s.attributes or {}).items() if k not in timing))
                  for s in spans)


def test_live_tracing_emits_the_spans_the_export_of_its_recording_does() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    lab = scripted_lab(tracer_provider=provider)
    exp = lab.run([{"id": "q1", "question": "Which port does the gateway use?"}])
    live = list(memory.get_finished_spans())
    assert [r["path"] for r in exp.records] == [["analyze_and_route", "plan", "tool_exec", "grade_evidence", "plan",
                                                 "tool_exec", "grade_evidence", "synthesize"]]
    again = exported(exp, start=exp.meta["started_at"])
    assert len(live) == len(again) == 17  # the question, 8 nodes, 6 model calls, 2 tool calls
    assert shape(live) == shape(again)
    (root,) = [s for s in live if s.parent is None]
    assert root.attributes["crag.query_id"] == "q1" and root.attributes["crag.model"] == "scripted"  # type: ignore[index]
    # Live spans start when the question was asked, and last as long as the recording says.
    assert abs((root.end_time - root.start_time) / 1e6 - exp.records[0]["latency_ms"]) < 0.01  # type: ignore[operator]
    lab.ask("Which port does the gateway use?")  # ask traces too
    roots = [s for s in memory.get_finished_spans() if s.parent is None]
    assert len(roots) == 2 and roots[1].attributes["input.value"] == "Which port does the gateway use?"  # type: ignore[index]


def test_ask_many_traces_each_question() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    questions = ["Which port does the gateway use?", "Which host runs the gateway?"]
    results = scripted_lab(tracer_provider=provider).ask_many(questions, concurrency=1)
    roots = [s for s in memory.get_finished_spans() if s.parent is None]
    assert sorted(r.attributes["input.value"] for r in roots) == sorted(questions)  # type: ignore[index]
    for result, root in zip(results, sorted(roots, key=lambda r: questions.index(r.attributes["input.value"])),
                            strict=True):  # type: ignore[index, arg-type]
        nodes = [s.name for s in sorted(memory.get_finished_spans(), key=lambda s: s.start_time or 0)
                 if s.parent is not None and s.parent.span_id == root.context.span_id]
        assert nodes == result.path  # one CHAIN span per node the question ran, in order


@pytest.fixture
def no_trace_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.chdir(tmp_path)  # no .env
    for name in ("CRAG_OTEL_ENDPOINT", "CRAG_OTEL_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    yield


def test_live_tracing_to_an_unreachable_endpoint_completes_the_run_and_says_so_once(
        no_trace_env: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1/traces"
    monkeypatch.setenv("CRAG_OTEL_ENDPOINT", url)
    lab = scripted_lab()
    assert lab.traces is not None
    with caplog.at_level(logging.INFO):
        exp = lab.run([{"id": "q1", "question": "Which port?"}, {"id": "q2", "question": "Which host?"}])
        lab.traces.flush()
    assert [r["answer"].split("\n")[0] for r in exp.records] == ["An answer [1].", "An answer [1]."]
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said == [f"crag_lab: could not send traces to {url} (is an OTLP/HTTP collector listening there?); the run "
                    "goes on and its records are kept"]


def test_the_endpoint_setting_is_checked_before_a_command_runs(no_trace_env: None, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    Experiment(CragConfig(), [two_rounds()]).save("run.jsonl")
    monkeypatch.setenv("CRAG_OTEL_ENDPOINT", "127.0.0.1:6006")
    assert main(["export-traces", "run.jsonl", "--file", "t.jsonl"]) == 2
    assert "CRAG_OTEL_ENDPOINT='127.0.0.1:6006' (set in the environment): must start with http://" in capsys.readouterr().err
    monkeypatch.delenv("CRAG_OTEL_ENDPOINT")
    monkeypatch.setenv("CRAG_OTEL_ENDPONT", "http://127.0.0.1:6006")
    assert main(["export-traces", "run.jsonl", "--file", "t.jsonl"]) == 2
    assert "did you mean CRAG_OTEL_ENDPOINT?" in capsys.readouterr().err


NOTHING_IMPORTED = """
import sys
from crag_lab import Lab
from crag_lab.testing import ScriptedLLM
lab = Lab([], llm=ScriptedLLM({"analyze": '{"complexity": "chitchat"}', "synthesize": "Hi!"}))
lab.run(["Hello"])
# langsmith (under langgraph) imports the OpenTelemetry SDK when it is installed; crag_lab imports none of its own.
print(lab.traces, sorted(m for m in sys.modules if m.startswith(("openinference", "opentelemetry.exporter",
                                                                 "crag_lab.traces"))))
"""


def test_nothing_of_opentelemetry_is_imported_unless_asked(no_trace_env: None) -> None:
    proc = subprocess.run([sys.executable, "-c", NOTHING_IMPORTED], capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "None []"


def test_without_the_sdk_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if opentelemetry-sdk were not installed
    exp = Experiment(CragConfig(), [two_rounds()])
    with pytest.raises(TracingUnavailableError, match=INSTALL_HINT.replace("[", r"\[").replace("]", r"\]")):
        exp.to_otel(path=tmp_path / "t.jsonl")
    exp.save(tmp_path / "run.jsonl")
    assert main(["export-traces", str(tmp_path / "run.jsonl"), "--file", str(tmp_path / "t.jsonl")]) == 2
    assert capsys.readouterr().err.strip().endswith(INSTALL_HINT)
    with pytest.raises(TracingUnavailableError):
        Lab([], llm=ScriptedLLM({}), tracer_provider=TracerProvider())
    assert not (tmp_path / "t.jsonl").exists()


def test_the_synthesize_span_says_how_the_offline_model_read_the_evidence(tmp_path: Path) -> None:
    """The offline synthesizer's reason and the units it weighed reach the recording and the synthesize span."""
    from crag_lab.offline import OfflineModel

    rows = [{"text": "# api-gateway\n\n| Field | Value |\n|---|---|\n| Public TLS port | 8443 |\n| Admin port | 9000 |",
             "path": "gateway.md", "line": 1, "line_end": 6, "score": 0.7, "title": "api-gateway"},
            {"text": "# Teams\n\nPayments Core is led by Tiago Mendes.", "path": "teams.md", "line": 1, "line_end": 3,
             "score": 0.4, "title": "Teams"}]
    lab = Lab([StaticTool("vector_search", rows)], llm=OfflineModel(), config=CragConfig(model_retries=0))
    exp = lab.run([{"id": "q1", "question": "Which port does the api-gateway use for public TLS traffic?"}])
    read = exp.records[0]["read"]
    assert not read["abstained"] and str(read["why"]).startswith("the rules' best unit is in item [1] (cited as [1])")
    assert read["units"][0]["quoted"] and "8443" in read["units"][0]["unit"] and read["units"][0]["cited"] == 1
    exp.save(tmp_path / "run.jsonl")
    spans = exported(Experiment.load(tmp_path / "run.jsonl"))
    (synth,) = [dict(s.attributes or {}) for s in spans if s.name == "synthesize"]
    assert synth["crag.answer.why"] == read["why"] and synth["crag.answer.abstained"] is False
    assert synth["crag.answer.units.0.id"] == "gateway.md:L1-L6" and synth["crag.answer.units.0.quoted"] is True
    assert synth["crag.answer.units.0.score"] == read["units"][0]["score"]
    assert len({k.split(".")[3] for k in synth if k.startswith("crag.answer.units.")}) == len(read["units"])
    # A model that does not say how it read (the scripted one) leaves them out.
    plain = exported(scripted_lab().run([{"id": "q1", "question": "Which port does the gateway use?"}]))
    (synth,) = [dict(s.attributes or {}) for s in plain if s.name == "synthesize"]
    assert not any(k.startswith("crag.answer.") for k in synth)
