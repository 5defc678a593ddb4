"""Engine overhead per query: retrieval (tool time), model (usage latency) and graph bookkeeping.

With the offline model and a warm index, each question is asked once through `Lab.ask` with every
tool wrapped in a timer; bookkeeping is total − tools − model (LangGraph, node code, state merges,
audit, citations). A bare LlamaIndex retriever call on the same question runs right before or after
it (alternating), for the ratio; each embeds the question itself (the model's memory of texts embedded
alone is cleared before each). A second, noise-free measure runs the graph with a scripted model
and static tools, so that nearly all the time is bookkeeping.

    .venv/bin/python bench/bench_overhead.py [--quick] [--json out.json]
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from _common import KB, emit, load_rows, log, parse_args, ratio, stratified, summary


class TimedTool:
    """A tool that adds its wall time to a shared counter (cost: two perf_counter calls)."""

    def __init__(self, tool: Any, clock: dict[str, float]) -> None:
        self.tool = tool
        self.name = tool.name
        self.clock = clock

    def __call__(self, args: Mapping[str, Any]) -> str:
        start = time.perf_counter()
        try:
            return str(self.tool(args))
        finally:
            self.clock["tools"] += time.perf_counter() - start


def split(result: Any, tools_s: float) -> dict[str, Any]:
    total = result.latency_ms
    model = sum(float(u["latency_ms"]) for u in result.usage)
    tools = tools_s * 1000
    return {"total_ms": total, "tools_ms": tools, "model_ms": model, "bookkeeping_ms": total - tools - model,
            "nodes": len(result.node_ms), "route": result.route}


def engine_split(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    from crag_lab import Lab
    from crag_lab.embeddings import default_embed_model

    base = Lab.from_directory(KB, remote=False)
    assert base.kb is not None
    clock = {"tools": 0.0}
    lab = Lab([TimedTool(t, clock) for t in base.tools.values()], config=base.config, kb=base.kb,
              embed_model=default_embed_model())
    retriever = base.kb.vector_retriever(base.config.top_k)
    forget = getattr(default_embed_model(), "forget", lambda: None)
    for row in rows[:3]:  # warm: embedding model, grader, BM25 index, LangGraph compile
        lab.ask(row["question"])
        retriever.retrieve(row["question"])
    per_query: list[dict[str, Any]] = []
    bare_ms: list[float] = []
    for n, row in enumerate(rows):
        def ask(question: str = row["question"]) -> dict[str, Any]:
            clock["tools"] = 0.0
            result = lab.ask(question)
            return split(result, clock["tools"])

        def bare(question: str = row["question"]) -> float:
            start = time.perf_counter()
            retriever.retrieve(question)
            return (time.perf_counter() - start) * 1000

        # Each embeds its question itself: the bundled model remembers texts it embedded alone
        # (crag_lab._minilm), and the second of the two would otherwise search with the first's vector.
        for step in ((bare, ask) if n % 2 else (ask, bare)):
            forget()
            if step is bare:
                bare_ms.append(bare())
            else:
                per_query.append(ask())
    keys = ("total_ms", "tools_ms", "model_ms", "bookkeeping_ms")
    total = sum(q["total_ms"] for q in per_query)
    by_route: dict[str, Any] = {}
    for route in sorted({q["route"] for q in per_query}):
        sel = [q for q in per_query if q["route"] == route]
        by_route[route] = {k: summary([q[k] for q in sel], 2) for k in keys}
    shares = [q["bookkeeping_ms"] / q["total_ms"] for q in per_query if q["total_ms"] > 0]
    return {
        "questions": len(rows),
        "all": {k: summary([q[k] for q in per_query], 2) for k in keys},
        "by_route": by_route,
        "bookkeeping_share_of_total": round(sum(q["bookkeeping_ms"] for q in per_query) / total, 4),
        "bookkeeping_share_median_per_query": round(sorted(shares)[len(shares) // 2], 4),
        "bare_retriever_ms": summary(bare_ms, 3),
        "engine_vs_bare_retriever": ratio(summary([q["total_ms"] for q in per_query])["median"],
                                          summary(bare_ms)["median"], 1),
        "engine_minus_model_vs_bare_retriever": ratio(
            summary([q["total_ms"] - q["model_ms"] for q in per_query])["median"], summary(bare_ms)["median"], 1),
    }


class FreeModel:
    """Answers every task instantly with a fixed script; each plan asks for a new search."""

    name = "free"

    def __init__(self, analysis: Mapping[str, Any], grade: float, answer: str) -> None:
        self.analysis, self.grade, self.answer = json.dumps(analysis), grade, answer

    def complete(self, task: str, prompt: str, inputs: Mapping[str, Any]) -> Any:
        from crag_lab.models import ModelReply

        if task == "analyze":
            text = self.analysis
        elif task == "plan":
            n = len(inputs.get("tool_history", []))
            text = json.dumps([{"tool": "vector_search", "args": {"query": f"gateway port {n}", "top_k": 5}}])
        elif task == "grade":
            text = json.dumps([self.grade] * len(inputs.get("items", [])))
        else:
            text = self.answer
        return ModelReply(text, 0, 0)


class FreeTool:
    """Five new passages per call, instantly."""

    name = "vector_search"

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, args: Mapping[str, Any]) -> str:
        from crag_lab.tools import evidence_json

        self.calls += 1
        return evidence_json([{"text": f"The gateway listens on port 84{i}3 for public TLS traffic.",
                               "path": f"gw{self.calls}.md", "line": 3 + 10 * i, "line_end": 5 + 10 * i,
                               "score": 0.6, "title": "Gateway"} for i in range(5)])


def scripted_bookkeeping(repeats: int) -> dict[str, Any]:
    """The graph with a free model and free tools: what is left is LangGraph and the node code."""
    from crag_lab import CragConfig, Lab

    complex_ = {"complexity": "complex", "suggested_tools": ["vector_search"]}
    cases: dict[str, tuple[dict[str, Any], float]] = {
        "chitchat": ({"complexity": "chitchat"}, 0.9),
        "simple": ({"complexity": "simple", "suggested_tools": ["vector_search"]}, 0.9),
        "complex_generate": (complex_, 0.9),
        "complex_refine_3_rounds": (complex_, 0.5),
        "complex_re_retrieve_3_rounds": (complex_, 0.05),
    }
    out: dict[str, Any] = {}
    for name, (analysis, grade) in cases.items():
        lab = Lab([FreeTool()], config=CragConfig(), llm=FreeModel(analysis, grade, "Port 8443 [1]."))
        lab.ask("warm-up")
        times, wrapper, nodes = [], [], 0
        for _ in range(repeats):
            result = lab.ask("On which port does the gateway accept public TLS traffic?")
            times.append(result.latency_ms)
            wrapper.append(sum(u["latency_ms"] for u in result.usage))
            nodes = len(result.node_ms)
        median = summary(times)["median"]
        out[name] = {"nodes": nodes, "model_calls": result.llm_calls, "total_ms": summary(times, 3),
                     "model_call_wrapper_ms": summary(wrapper, 3),
                     "per_node_ms": round(median / max(nodes, 1), 3) if median is not None else None}
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(__doc__.splitlines()[0], argv)
    started = time.perf_counter()
    rows = stratified(load_rows(), 16 if args.quick else 24)
    log(f"overhead: {len(rows)} questions, offline model, warm index")
    result: dict[str, Any] = {"engine": engine_split(rows)}
    log("overhead: scripted model and static tools")
    result["scripted"] = scripted_bookkeeping(20 if args.quick else 40)
    result["target_bookkeeping_le_10pct"] = result["engine"]["bookkeeping_share_of_total"] <= 0.10
    result["wall_s"] = round(time.perf_counter() - started, 1)
    emit(result, args.json_out)
    return result


if __name__ == "__main__":
    main()
