"""Load: 500 questions through ``graph.batch`` and ``graph.abatch``, no errors, no cross-talk, bounded memory.

The model here is a small thread-safe fake that derives every answer from its ``inputs`` alone (a
`ScriptedLLM` is shared mutable state, so it cannot serve concurrent runs), and the search tools
return evidence that depends on the query text. Each answer must then cite only its own question's
files. The loop is bounded by the iteration counter, never by LangGraph's recursion limit, and the
limit is always passed explicitly.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Mapping, Sequence
from typing import Any

import psutil
import pytest
from langchain_core.runnables import RunnableConfig

from crag_lab import CragConfig, Lab, build_graph
from crag_lab.graph import initial_state
from crag_lab.models import ModelReply, Task
from crag_lab.tools import evidence_json

N_QUERIES = 500
CONCURRENCY = 8
RSS_GROWTH_CAP = 300 * 2**20  # bytes; generous: 500 states with their audit trails need a few MB
ROUTES = {
    "chitchat": ["analyze_and_route", "synthesize"],
    "simple direct": ["analyze_and_route", "plan", "tool_exec", "synthesize"],
    "complex direct": ["analyze_and_route", "plan", "tool_exec", "grade_evidence", "synthesize"],
    "complex": ["analyze_and_route", "plan", "tool_exec", "grade_evidence", "plan", "tool_exec", "grade_evidence",
                "synthesize"],  # REFINE, then GENERATE on the refined search
}
KINDS = list(ROUTES)


def qid_of(text: str) -> str:
    return text.split()[0]


class EchoModel:
    """Deterministic and stateless: each reply is a function of ``(task, inputs)``, so it is thread-safe.

    analyze: the complexity named in the question; plan: one vector_search (refined on REFINE);
    grade: 0.95 for "strong" evidence, else 0.5; synthesize: quotes and cites the evidence it was given.
    """

    name = "echo"

    def complete(self, task: Task, prompt: str, inputs: Mapping[str, Any]) -> ModelReply:
        query = str(inputs["query"])
        if task == "analyze":
            complexity = next(k for k in ("chitchat", "simple", "complex") if k in query)
            text = json.dumps({"complexity": complexity, "suggested_tools": ["vector_search"]})
        elif task == "plan":
            refined = f"{query} refined" if inputs.get("refine") else query
            text = json.dumps([{"tool": "vector_search", "args": {"query": refined, "top_k": 3}}])
        elif task == "grade":
            text = json.dumps([0.95 if "strong" in item["text"] else 0.5 for item in inputs["items"]])
        elif inputs.get("kind") == "chitchat":
            text = f"Hello from {qid_of(query)}!"
        else:
            text = f"{qid_of(query)}: " + " ".join(f"{e['text']} [{e['n']}]." for e in inputs["evidence"][:2])
        return ModelReply(text, len(prompt) // 4 + 1, len(text) // 4 + 1)


class QueryTool:
    """Three evidence items whose paths and text belong to the question that asked (``q0042/...``)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, args: Mapping[str, Any]) -> str:
        query = str(args["query"])
        strength = "strong" if ("refined" in query or "direct" in query) else "weak"
        qid = qid_of(query)
        return evidence_json(
            {"text": f"{qid} {strength} fact {i}", "path": f"{qid}/{strength}{i}.md", "line": i + 1, "score": 0.5}
            for i in range(3)
        )


def questions(n: int) -> list[str]:
    return [f"q{i:04d} {KINDS[i % len(KINDS)]} question" for i in range(n)]


def kind_of(question: str) -> str:
    return question.split(" ", 1)[1].removesuffix(" question")


def assert_isolated(question: str, state: Mapping[str, Any]) -> None:
    """The state answers this question only: its route, its evidence, its citations, one stats block."""
    qid = qid_of(question)
    assert state["query"] == question
    assert state["path"] == ROUTES[kind_of(question)]
    assert state["answer"].startswith(f"Hello from {qid}!" if kind_of(question) == "chitchat" else f"{qid}: ")
    assert all(item["path"].startswith(f"{qid}/") for item in state["context"])
    assert all(call["args"]["query"].startswith(f"{qid} ") for call in state.get("tool_history", []))
    cited = [c["path"] for c in state["citations"]]
    assert all(path.startswith(f"{qid}/") for path in cited)
    footer = [line for line in state["answer"].splitlines() if line.startswith("[")]
    assert len(footer) == len(cited) and all(f"] {qid}/" in line for line in footer)
    if kind_of(question) != "chitchat":
        assert cited, "a retrieval answer cites its evidence"
    assert state["answer"].count("📊 **LLM Usage Stats:**") == 1


def config() -> CragConfig:
    return CragConfig(auto_approve_max_items=2, model_retries=0, recursion_limit=40)


def rss() -> int:
    gc.collect()
    return int(psutil.Process().memory_info().rss)


# --- 500 questions, concurrently ------------------------------------------------------------------------


@pytest.mark.slow
def test_500_questions_through_lab_ask_many_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config()
    lab = Lab([QueryTool("vector_search")], config=cfg, llm=EchoModel())
    graph = lab.graph()
    seen: list[Mapping[str, Any]] = []
    batch = graph.batch

    def spy(inputs: Sequence[Any], run_config: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
        seen.append(dict(run_config or {}))
        return batch(inputs, run_config, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(graph, "batch", spy)
    lab.ask_many(questions(16), concurrency=CONCURRENCY)  # warm up imports and caches before measuring
    before = rss()
    qs = questions(N_QUERIES)
    results = lab.ask_many(qs, concurrency=CONCURRENCY)
    growth = rss() - before
    assert [r.query for r in results] == qs  # results come back in question order
    for question, result in zip(qs, results, strict=True):
        assert_isolated(question, result.state)
    assert growth < RSS_GROWTH_CAP, f"RSS grew by {growth / 2**20:.0f} MiB over {N_QUERIES} questions"
    # Lab.ask_many always passes the recursion limit and the concurrency explicitly.
    assert seen and all(c["recursion_limit"] == cfg.recursion_limit and c["max_concurrency"] == CONCURRENCY
                        for c in seen)


@pytest.mark.slow
def test_500_questions_through_graph_abatch() -> None:
    cfg = config()
    graph = build_graph(EchoModel(), [QueryTool("vector_search")], cfg)
    run_config: RunnableConfig = {"recursion_limit": cfg.recursion_limit, "max_concurrency": CONCURRENCY}
    asyncio.run(graph.abatch([initial_state(q) for q in questions(16)], run_config))  # warm-up
    before = rss()
    qs = questions(N_QUERIES)
    states = asyncio.run(graph.abatch([initial_state(q) for q in qs], run_config))
    growth = rss() - before
    assert len(states) == N_QUERIES
    for question, state in zip(qs, states, strict=True):
        assert_isolated(question, state)
    assert growth < RSS_GROWTH_CAP, f"RSS grew by {growth / 2**20:.0f} MiB over {N_QUERIES} questions"


def test_lab_ask_streams_with_an_explicit_recursion_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config().model_copy(update={"recursion_limit": 33})
    lab = Lab([QueryTool("vector_search")], config=cfg, llm=EchoModel())
    graph = lab.graph()
    seen: list[Mapping[str, Any]] = []
    stream = graph.stream

    def spy(inputs: Any, run_config: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
        seen.append(dict(run_config or {}))
        return stream(inputs, run_config, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(graph, "stream", spy)
    result = lab.ask("q0001 complex question")
    assert_isolated("q0001 complex question", result.state)
    assert [c["recursion_limit"] for c in seen] == [33]


# --- the loop ends by the iteration counter ---------------------------------------------------------------


class StuckGrader(EchoModel):
    """Every grade is ``grade`` for every item: 0.5 is always REFINE, 0.1 always RE_RETRIEVE."""

    def __init__(self, grade: float) -> None:
        self.grade = grade

    def complete(self, task: Task, prompt: str, inputs: Mapping[str, Any]) -> ModelReply:
        if task == "grade":
            return ModelReply(json.dumps([self.grade] * len(inputs["items"])), 1, 1)
        if task == "plan":  # a fresh search every round, so every round has new evidence to grade
            query = f"{inputs['query']} round {len(inputs['tool_history'])}"
            return ModelReply(json.dumps([{"tool": "vector_search", "args": {"query": query}}]), 1, 1)
        return super().complete(task, prompt, inputs)


class RoundTool(QueryTool):
    def __call__(self, args: Mapping[str, Any]) -> str:
        query = str(args["query"])
        return evidence_json({"text": f"{query} weak fact {i}", "path": f"{query.replace(' ', '_')}/{i}.md",
                              "line": 1, "score": 0.5} for i in range(3))


# Steps: REFINE = analyze + 50 x (plan, tool_exec, grade) + synthesize = 152;
# RE_RETRIEVE = 50 x (analyze, plan, tool_exec, grade) + synthesize = 201.
@pytest.mark.parametrize(("grade", "action", "steps"), [(0.5, "REFINE", 152), (0.1, "RE_RETRIEVE", 201)])
def test_a_stuck_grader_at_max_iterations_50_ends_by_the_iteration_counter(
    grade: float, action: str, steps: int
) -> None:
    cfg = CragConfig(max_iterations=50, auto_approve_max_items=0, model_retries=0, recursion_limit=1000)
    graph = build_graph(StuckGrader(grade), [RoundTool("vector_search")], cfg)
    state = graph.invoke(initial_state("q0000 complex question"), {"recursion_limit": cfg.recursion_limit})
    assert state["iteration"] == 50
    assert [r["action"] for r in state["rounds"]] == [action] * 50
    assert state["rounds"][-1]["capped"] is True
    assert [e["event"] for e in state["audit"]].count("max_iterations_reached") == 1
    assert state["path"][-1] == "synthesize"
    assert len(state["path"]) == steps < cfg.recursion_limit / 4  # well within the limit


def test_the_default_recursion_limit_fits_the_largest_max_iterations() -> None:
    cfg = CragConfig(max_iterations=50, auto_approve_max_items=0, model_retries=0)
    graph = build_graph(StuckGrader(0.1), [RoundTool("vector_search")], cfg)
    state = graph.invoke(initial_state("q0000 complex question"), {"recursion_limit": cfg.recursion_limit})
    assert state["iteration"] == 50
