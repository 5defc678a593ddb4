"""`AskResult`: one answered question, with everything needed to see how it was reached.

Its `AskResult.to_record` is the `crag_lab.records.QueryRecord` that `Lab.run` records and
`Experiment.save` writes; `AskResult.route` is `crag_lab.records.run_route` of that record.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from crag_lab.records import (
    CitationRecord,
    Mode,
    QueryRecord,
    Route,
    UsageRecord,
    WeighedUnit,
    run_route,
    usage_tokens,
)
from crag_lab.state import AgentState, EvidenceItem


@dataclass(frozen=True)
class AskResult:
    """One answered question: the final text and everything needed to see how it was reached.

    >>> from crag_lab.testing import ScriptedLLM
    >>> from crag_lab.lab import Lab
    >>> res = Lab([], llm=ScriptedLLM({"analyze": '{"complexity": "chitchat"}', "synthesize": "Hi!"})).ask("Hello")
    >>> res.route, res.path, res.llm_calls
    ('chitchat', ['analyze_and_route', 'synthesize'], 2)
    >>> res.to_record("q1")["complexity"]
    'chitchat'
    """

    query: str
    mode: Mode
    answer: str
    state: AgentState = field(repr=False)
    latency_ms: float = field(default=0.0, compare=False, repr=False)
    node_ms: tuple[tuple[str, float], ...] = field(default=(), repr=False, compare=False)

    @property
    def path(self) -> list[str]:
        """Node names in the order they ran."""
        return list(self.state.get("path", []))

    @property
    def audit(self) -> list[dict[str, Any]]:
        """Every ``log_audit`` event of this run."""
        return list(self.state.get("audit", []))

    @property
    def usage(self) -> list[UsageRecord]:
        return list(self.state.get("usage", []))

    @property
    def llm_calls(self) -> int:
        return len(self.state.get("usage", []))

    @property
    def tokens(self) -> int:
        return usage_tokens(self.state.get("usage", []))

    @property
    def citations(self) -> list[EvidenceItem]:
        return list(self.state.get("citations", []))

    @property
    def complexity(self) -> str | None:
        return (self.state.get("routing_plan") or {}).get("complexity")

    @property
    def grader_action(self) -> str | None:
        return self.state.get("grader_action")

    @property
    def weighed(self) -> UnitsWeighed:
        """The units the synthesizer weighed for this answer, with their scores, and why it answered or abstained.

        From the offline model's ``answer_read`` or ``model_abstained`` audit event (`crag_lab.offline.synthesizer.Answered`);
        empty for a model that does not say (an LLM), for chitchat and for a run with no evidence. A table in a notebook.
        """
        said = [e for e in self.state.get("audit", []) if e["event"] in ("answer_read", "model_abstained")]
        if not said:
            return UnitsWeighed(None, (), False)
        event = said[-1]
        abstained = event["event"] == "model_abstained"
        return UnitsWeighed(event.get("reason") if abstained else event.get("why"), tuple(event.get("units", ())), abstained)

    @property
    def route(self) -> Route:
        """A one-word summary: chitchat, simple, GENERATE, REFINE, RE_RETRIEVE, capped, complex or a mode."""
        return run_route(self.to_record())

    def to_record(self, query_id: str = "", *, labels: Mapping[str, Any] | None = None) -> QueryRecord:
        """This run as the JSON-ready record `Lab.run` keeps and `Experiment.save` writes."""
        state = self.state
        record: QueryRecord = {
            "id": query_id,
            "query": self.query,
            "labels": dict(labels or {}),
            "mode": state.get("mode", self.mode),
            "complexity": (state.get("routing_plan") or {}).get("complexity"),
            "routing_plan": state.get("routing_plan"),
            "path": list(state.get("path", [])),
            "rounds": list(state.get("rounds", [])),
            "tool_history": list(state.get("tool_history", [])),
            "usage": list(state.get("usage", [])),
            "node_ms": [[n, round(ms, 3)] for n, ms in self.node_ms],
            "latency_ms": round(self.latency_ms, 3),
            "answer": state.get("answer", ""),
            "citations": [_citation(c) for c in state.get("citations", [])],
            "audit_events": Counter(e["event"] for e in state.get("audit", [])),
        }
        weighed = self.weighed
        if weighed.why is not None or weighed.units:
            record["read"] = {"abstained": weighed.abstained, "why": weighed.why,
                              "units": [cast(WeighedUnit, dict(u)) for u in weighed.units]}
        return record

    def _repr_markdown_(self) -> str:
        """The answer as Markdown in a notebook: the question, the answer, its sources as a list, the stats, the path."""
        trail = " → ".join(self.path)
        answer = _SOURCE_LINE.sub(r"- \1", self.answer)  # "[1] path:L3" lines would run together as one paragraph
        return f"**Q:** {self.query}\n\n{answer}\n\n<sub>path: {trail}</sub>"


@dataclass(frozen=True)
class UnitsWeighed:
    """What the synthesizer weighed for one answer (`AskResult.weighed`): why it answered or abstained, and its
    best-ranked units, best first, each a dict of ``rank``, ``item`` (the evidence's number), ``id``, ``cited`` (the
    answer's ``[K]``, or None), ``score`` (what they were ranked by), ``support`` (what ``ABSTAIN_BELOW`` is checked
    against), ``quoted`` and ``unit`` (its text).

    >>> w = UnitsWeighed("best unit in item [1]", ({"rank": 1, "item": 1, "id": "a.md:L1-L2", "cited": 1,
    ...                  "score": 1.5, "support": 1.1, "quoted": True, "unit": "Port: 8443"},), False)
    >>> print(w.to_markdown())
    **Answered:** best unit in item [1]
    <BLANKLINE>
    | rank | score | support | item | cited | quoted | unit |
    |---:|---:|---:|---|---|---|---|
    | 1 | 1.50 | 1.10 | [1] a.md:L1-L2 | [1] | yes | Port: 8443 |
    """

    why: str | None
    units: tuple[Mapping[str, Any], ...]
    abstained: bool

    def to_markdown(self) -> str:
        """The reason, then the units as a Markdown table (for a README, a log or a terminal)."""
        if not self.units and self.why is None:
            return f"*{_SAID_NOTHING}*"
        rows = [f"| {u.get('rank', '')} | {u['score']:.2f} | {u['support']:.2f} | {_item(u)} | {_cited(u)} "
                f"| {'yes' if u['quoted'] else ''} | {_cell(str(u['unit']))} |" for u in self.units]
        table = ["| rank | score | support | item | cited | quoted | unit |", "|---:|---:|---:|---|---|---|---|", *rows]
        return "\n".join([f"**{self._verdict()}:** {self.why or '(no reason given)'}", "", *table]) if rows else \
            f"**{self._verdict()}:** {self.why or '(no reason given)'}"

    def _repr_html_(self) -> str:
        """The reason, then the units in a table that scrolls sideways inside a narrow output area (`crag_lab.tables`)."""
        from crag_lab.tables import scroll_table

        if not self.units and self.why is None:
            return f"<p><i>{html.escape(_SAID_NOTHING)}</i></p>"
        head = f"<p><b>{self._verdict()}:</b> {html.escape(self.why or '(no reason given)', quote=False)}</p>"
        if not self.units:
            return head
        rows = [{"rank": u.get("rank"), "score": u["score"], "support": u["support"], "item": _item(u), "cited": _cited(u),
                 "quoted": "yes" if u["quoted"] else "", "unit": str(u["unit"])} for u in self.units]
        return head + scroll_table(rows, digits=2, index=False)._repr_html_()

    def _verdict(self) -> str:
        return "Abstained" if self.abstained else "Answered"


_SAID_NOTHING = "The model said nothing about how it read the evidence."


def _item(unit: Mapping[str, Any]) -> str:
    return f"[{unit['item']}] {unit.get('id') or ''}".rstrip()


def _cited(unit: Mapping[str, Any]) -> str:
    return f"[{unit['cited']}]" if unit.get("cited") else "—"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


_SOURCE_LINE = re.compile(r"^(\[\d+\] \S.*)$", re.MULTILINE)


def _citation(item: EvidenceItem) -> CitationRecord:
    return {"id": item.get("id"), "path": item.get("path"), "line": item.get("line"),
            "line_end": item.get("line_end"), "tool": item.get("tool")}


def results_table(results: Sequence[AskResult]) -> list[Mapping[str, Any]]:
    """One plain row per result, for a DataFrame."""
    return [
        {"query": r.query, "route": r.route, "path": " → ".join(r.path), "llm_calls": r.llm_calls,
         "tokens": r.tokens, "cited": len(r.citations)}
        for r in results
    ]
