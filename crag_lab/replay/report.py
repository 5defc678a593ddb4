"""What a replay says: one `QueryReplay` per recorded query, gathered in a `ReplayReport`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from crag_lab.config import CragConfig
from crag_lab.records import Route

Outcome = Literal["chitchat", "simple", "GENERATE", "capped", "needs_rerun", "other"]
"""How a query ends under replay; ``needs_rerun``: it would leave what was recorded."""
FINAL_OUTCOMES: tuple[Outcome, ...] = ("chitchat", "simple", "GENERATE", "capped", "needs_rerun", "other")


def outcome_of(route: Route) -> Outcome:
    """The replay outcome of a recorded run's route: the routes a replay can end in, else ``other``.

    A finished knowledge-base run ends in chitchat, simple, GENERATE or capped; ``other`` is a run
    of another mode, or a record that ends elsewhere.

    >>> outcome_of("capped"), outcome_of("naive_rag")
    ('capped', 'other')
    """
    if route in ("chitchat", "simple", "GENERATE", "capped"):
        return route
    return "other"


@dataclass
class QueryReplay:
    """What one query would do at the replayed thresholds."""

    id: str
    query: str
    complexity: str | None
    recorded_outcome: str
    outcome: str
    first_action: str | None
    recorded_first_action: str | None
    actions: list[str]
    recorded_actions: list[str]
    flipped_rounds: list[int]
    fast_path_gained: list[str]
    fast_path_lost: list[str]
    items_kept: int
    items_dropped: int
    recorded_items_kept: int
    recorded_items_dropped: int
    calls_delta: int
    tokens_delta: int
    calls_delta_is_lower_bound: bool
    note: str = ""

    @property
    def changed(self) -> bool:
        return self.actions != self.recorded_actions or self.outcome != self.recorded_outcome


@dataclass
class ReplayReport:
    """Replay of a whole experiment at one config, with the totals the dashboard shows."""

    config: CragConfig
    queries: list[QueryReplay] = field(default_factory=list)

    def outcome_counts(self) -> dict[str, int]:
        counts = Counter(q.outcome for q in self.queries)
        return {k: counts.get(k, 0) for k in FINAL_OUTCOMES if counts.get(k, 0) or k in ("GENERATE",)}

    def first_action_counts(self) -> dict[str, int]:
        """Complex queries by the action of their first grading round (exact for every query)."""
        counts = Counter(q.first_action for q in self.queries if q.first_action is not None)
        return {a: counts.get(a, 0) for a in ("GENERATE", "REFINE", "RE_RETRIEVE")}

    def route_counts(self) -> dict[str, int]:
        """Every query by route: chitchat, simple, or its first grading action."""
        counts = Counter(
            q.first_action if q.first_action is not None else (q.complexity or "other") for q in self.queries
        )
        return {r: counts.get(r, 0) for r in ("chitchat", "simple", "GENERATE", "REFINE", "RE_RETRIEVE")}

    @property
    def flipped(self) -> list[QueryReplay]:
        return [q for q in self.queries if q.changed]

    @property
    def needs_rerun(self) -> list[QueryReplay]:
        return [q for q in self.queries if q.outcome == "needs_rerun"]

    def totals(self) -> dict[str, Any]:
        return {
            "queries": len(self.queries),
            "decisions_flipped": sum(len(q.flipped_rounds) for q in self.queries),
            "queries_changed": len(self.flipped),
            "fast_path_gained": sum(len(q.fast_path_gained) for q in self.queries),
            "fast_path_lost": sum(len(q.fast_path_lost) for q in self.queries),
            "items_kept": sum(q.items_kept for q in self.queries),
            "items_dropped": sum(q.items_dropped for q in self.queries),
            "calls_delta": sum(q.calls_delta for q in self.queries),
            "tokens_delta": sum(q.tokens_delta for q in self.queries),
            "needs_rerun": len(self.needs_rerun),
        }

    def limits(self) -> str:
        """What this replay cannot know, in plain words."""
        n = len(self.needs_rerun)
        if not n:
            return "Every decision of this replay is exact: no query leaves the recorded rounds."
        return (
            f"{n} quer{'y' if n == 1 else 'ies'} would continue past what was recorded (a new REFINE or "
            "RE_RETRIEVE round, or more rounds under a higher max_iterations): the evidence those rounds "
            "would retrieve and its grades are unknown, so their final outcome and the exact calls are "
            "not replayable. Call lab.rerun(query, config) to run the real graph for them."
        )

    def table(self) -> list[dict[str, Any]]:
        return [
            {"id": q.id, "query": q.query, "recorded": q.recorded_outcome, "replayed": q.outcome,
             "actions": " → ".join(q.actions), "recorded_actions": " → ".join(q.recorded_actions),
             "calls_delta": q.calls_delta, "note": q.note}
            for q in self.queries
        ]
