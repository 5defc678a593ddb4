"""The graph's state. Nodes return only the keys they change; append-only keys carry reducers.

What the state records about a run (rounds, usage, tool calls, the routing plan) is declared in
`crag_lab.records`, the types every analysis reads.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from crag_lab.records import (
    Action,
    Complexity,
    Mode,
    NodeName,
    RoundRecord,
    RoutingPlan,
    ToolCall,
    UsageRecord,
)

__all__ = ["Action", "AgentState", "Complexity", "EvidenceItem", "Mode", "RoutingPlan", "ToolCall", "UsageRecord"]


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
    path: Annotated[list[NodeName], operator.add]
    rounds: Annotated[list[RoundRecord], operator.add]
    dropped: Annotated[list[EvidenceItem], operator.add]  # every item a grading round dropped, in order
