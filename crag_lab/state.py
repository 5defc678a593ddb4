"""The graph's state. Nodes return only the keys they change; append-only keys carry reducers."""

from __future__ import annotations

import operator
from typing import Annotated, Any, Literal, TypedDict

Action = Literal["GENERATE", "REFINE", "RE_RETRIEVE"]
Complexity = Literal["chitchat", "simple", "complex"]
Mode = Literal["knowledge_base", "normal", "naive_rag"]


class EvidenceItem(TypedDict, total=False):
    """One piece of evidence in ``AgentState.context``.

    ``path`` is relative to the knowledge-base root (or a URL / issue key for remote tools);
    ``line`` is the first 1-based line, ``line_end`` the last, both None when unknown.
    ``score`` is the retrieval score the tool reported (cosine for vector_search, BM25 for
    keyword_search), never the grader's score.
    """

    id: str
    text: str
    path: str
    line: int | None
    line_end: int | None
    tool: str
    score: float | None
    title: str | None
    round: int


class ToolCall(TypedDict, total=False):
    """One entry of ``AgentState.tool_history``."""

    tool: str
    args: dict[str, Any]
    round: int
    ok: bool
    error: str | None
    item_ids: list[str]
    scores: list[float | None]


class RoutingPlan(TypedDict, total=False):
    query_type: str
    complexity: Complexity | None
    sub_questions: list[str]
    suggested_tools: list[str]
    grep_keywords: list[str]
    parsed: bool
    classified: bool


class UsageRecord(TypedDict):
    node: str
    task: str
    prompt_tokens: int
    completion_tokens: int
    latency_ms: float
    ok: bool
    attempts: int
    iteration: int  # grading rounds completed when the call was made


class AgentState(TypedDict, total=False):
    """State of one question through the graph."""

    query: str
    mode: Mode
    history: list[dict[str, str]]
    routing_plan: RoutingPlan
    planned_calls: list[dict[str, Any]]
    context: list[EvidenceItem]
    evidence_scores: list[float]  # every item graded in the latest round, in context order
    context_scores: list[float]  # aligned with ``context``: the scores of the items that survived
    grader_action: Action | None
    iteration: int
    tried_tools: list[str]
    answer: str
    citations: list[EvidenceItem]
    # Append-only: each node adds, never rewrites.
    tool_history: Annotated[list[ToolCall], operator.add]
    usage: Annotated[list[UsageRecord], operator.add]
    audit: Annotated[list[dict[str, Any]], operator.add]
    path: Annotated[list[str], operator.add]
    rounds: Annotated[list[dict[str, Any]], operator.add]
