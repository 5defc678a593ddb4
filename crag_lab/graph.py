"""`build_graph`: wire the five nodes on a LangGraph ``StateGraph`` and compile it.

Routers are thin adapters over `crag_lab.decisions`; their ``Literal`` return types let LangGraph
draw every conditional edge (``graph.get_graph().draw_mermaid()``).
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from crag_lab import decisions
from crag_lab._text import check_history, check_question
from crag_lab.audit import JsonlSink
from crag_lab.config import CragConfig
from crag_lab.models import CragModel
from crag_lab.nodes import analyze, grade, plan, synthesize, tool_exec
from crag_lab.nodes._deps import Deps
from crag_lab.records import Mode
from crag_lab.state import AgentState
from crag_lab.tools import Tool, ToolRegistry

MODES: tuple[Mode, ...] = ("knowledge_base", "normal", "naive_rag")


def after_analyze(state: AgentState) -> decisions.AfterAnalyze:
    return decisions.route_after_analyze((state.get("routing_plan") or {}).get("complexity"))


def after_tools(state: AgentState) -> decisions.AfterTools:
    return decisions.route_after_tools((state.get("routing_plan") or {}).get("complexity"))


def make_after_grade(max_iterations: int) -> Any:
    def after_grade(state: AgentState) -> decisions.AfterGrade:
        return decisions.route_after_grade(state.get("grader_action"), state.get("iteration", 0), max_iterations)

    return after_grade


def build_graph(
    model: CragModel,
    tools: ToolRegistry | list[Tool],
    config: CragConfig | None = None,
    *,
    mode: Mode = "knowledge_base",
    audit_sink: JsonlSink | None = None,
    shadow_grading: bool = False,
) -> CompiledStateGraph:
    """Compile the corrective-RAG graph for one mode.

    ``knowledge_base`` is the full spec graph; ``normal`` answers from the model alone;
    ``naive_rag`` retrieves top-k with vector_search and synthesizes, with no grading.
    ``shadow_grading`` makes the grader also score rounds the pre-filter skipped (recorded for
    replay, never used for a decision or counted as a call). Invoke it with an explicit
    ``recursion_limit`` (``config.recursion_limit``), as `Lab` does.

    >>> from crag_lab.testing import ScriptedLLM
    >>> g = build_graph(ScriptedLLM({}), [], mode="normal")
    >>> sorted(g.get_graph().nodes)
    ['__end__', '__start__', 'synthesize']
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {list(MODES)}")
    config = config or CragConfig()
    registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
    deps = Deps(model=model, tools=registry, config=config, sink=audit_sink, shadow_grading=shadow_grading)
    graph = StateGraph(AgentState)
    graph.add_node(synthesize.NODE, synthesize.make_synthesize(deps))
    graph.add_edge(synthesize.NODE, END)
    if mode == "normal":
        graph.add_edge(START, synthesize.NODE)
        return graph.compile(name="crag_normal")
    graph.add_node(tool_exec.NODE, tool_exec.make_tool_exec(deps))
    if mode == "naive_rag":
        graph.add_edge(START, tool_exec.NODE)
        graph.add_edge(tool_exec.NODE, synthesize.NODE)
        return graph.compile(name="crag_naive_rag")
    graph.add_node(analyze.NODE, analyze.make_analyze(deps))
    graph.add_node(plan.NODE, plan.make_plan(deps))
    graph.add_node(grade.NODE, grade.make_grade(deps))
    graph.add_edge(START, analyze.NODE)
    graph.add_conditional_edges(analyze.NODE, after_analyze)
    graph.add_edge(plan.NODE, tool_exec.NODE)
    graph.add_conditional_edges(tool_exec.NODE, after_tools)
    graph.add_conditional_edges(grade.NODE, make_after_grade(config.max_iterations))
    return graph.compile(name="crag_knowledge_base")


def initial_state(
    query: str,
    *,
    mode: Mode = "knowledge_base",
    history: list[dict[str, str]] | None = None,
    top_k: int = 5,
) -> AgentState:
    """The state a run starts from. ``naive_rag`` starts with its single vector_search planned.

    The question is checked here too (``crag_lab._text.check_question``), for graphs run without `Lab`.
    """
    query = check_question(query)
    history = check_history(history)
    state = AgentState(query=query, mode=mode, history=list(history or []), context=[], iteration=0,
                       tried_tools=[], evidence_scores=[], context_scores=[], grader_action=None)
    if mode == "naive_rag":
        state["planned_calls"] = [{"tool": "vector_search", "args": {"query": query, "top_k": top_k}}]
        state["routing_plan"] = {"complexity": None, "suggested_tools": ["vector_search"]}
    return state
