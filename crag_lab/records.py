"""The recorded run, declared once: a query's record, its grading rounds and their items.

`grade_evidence` appends one `RoundRecord` per grading round to ``AgentState.rounds``;
``AskResult.to_record`` turns a finished run into a `QueryRecord`; `write_records` and
`read_records` are the JSON-lines file of `Experiment.save` and `Experiment.load`. Replay, the
evaluation, the plots and the dashboard read records through these types, and what several of
them need to know is answered here once: how a run ended (`run_route`), which grades a round has
(`round_grades`), how many tokens some model calls cost (`usage_tokens`).

The types are TypedDicts: a record is the plain dict that LangGraph's state and JSON hold, so a
recording loads as it was written, and mypy checks every key that is read.

>>> rnd: RoundRecord = {
...     "iteration": 1, "round_tools": ["vector_search"], "rule": None, "parse_ok": True,
...     "items": [{"id": "a.md:L1-L4", "path": "a.md", "line": 1, "tool": "vector_search",
...                "vector_score": 0.62, "grader_score": 0.9, "new": True}],
...     "grader_calls": 1, "grader_tokens": 120, "aggregate": 0.9, "action": "GENERATE",
...     "kept": ["a.md:L1-L4"], "dropped": [], "capped": False, "shadow": None,
...     "thresholds": {"relevance_floor": 0.3, "generate_threshold": 0.7, "vector_score_threshold": 0.8,
...                    "auto_approve_max_items": 2, "max_iterations": 3, "aggregator": "mean"}}
>>> run_route({"mode": "knowledge_base", "complexity": "complex", "rounds": [rnd]})
'GENERATE'
>>> round_grades(rnd)
([0.9], 'grader')
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypedDict, cast, get_args

from typing_extensions import NotRequired

from crag_lab._paths import replacing
from crag_lab._text import check_question, json_line
from crag_lab.config import CragConfig
from crag_lab.errors import DuplicateIdError, ExperimentFileError

# ---- the vocabularies -----------------------------------------------------------------------

NodeName = Literal["analyze_and_route", "plan", "tool_exec", "grade_evidence", "synthesize"]
"""The graph's five nodes; the routers of `crag_lab.decisions` return subsets of these."""
NODE_NAMES: tuple[NodeName, ...] = get_args(NodeName)

Mode = Literal["knowledge_base", "normal", "naive_rag"]
Complexity = Literal["chitchat", "simple", "complex"]
Action = Literal["GENERATE", "REFINE", "RE_RETRIEVE"]
Rule = Literal["read_file", "few_context", "high_vector_score"]
"""The pre-filter rules, in the order they are tried."""

Route = Literal["chitchat", "simple", "GENERATE", "REFINE", "RE_RETRIEVE", "capped", "complex", "normal",
                "naive_rag"]
"""How a run ended, in one word (`run_route`)."""

GradeSource = Literal["grader", "shadow"]


# ---- what the graph records while it runs ----------------------------------------------------


class UsageRecord(TypedDict):
    """One model call: ``AgentState.usage`` and ``QueryRecord.usage``."""

    node: str
    task: str
    prompt_tokens: int
    completion_tokens: int
    latency_ms: float
    ok: bool
    attempts: int
    iteration: int  # grading rounds completed when the call was made
    cached: NotRequired[bool]  # True: answered from the response cache (`crag_lab.cache`), no model call


class ToolCall(TypedDict, total=False):
    """One tool call: ``AgentState.tool_history`` and ``QueryRecord.tool_history``."""

    tool: str
    args: dict[str, Any]
    round: int
    ok: bool
    error: str | None
    item_ids: list[str]
    scores: list[float | None]  # each item's retrieval score, as the tool reported it


class RoutingPlan(TypedDict, total=False):
    """What ``analyze_and_route`` decided: ``AgentState.routing_plan`` and ``QueryRecord.routing_plan``."""

    query_type: str
    complexity: Complexity | None
    sub_questions: list[str]
    suggested_tools: list[str]
    grep_keywords: list[str]
    parsed: bool
    classified: bool
    router: dict[str, Any]
    """Only from a router that reports itself (the offline learned router): its name and class probabilities."""


class ItemRecord(TypedDict):
    """One evidence item as a grading round saw it.

    ``vector_score`` is the item's cosine from ``vector_search`` (None when that tool did not find
    it); ``grader_score`` the score the round decided with: the grader's, or 1.0 when a pre-filter
    rule approved the round; ``new`` is False for an item kept from an earlier round, which is not
    graded again.
    """

    id: str
    path: str | None
    line: int | None
    tool: str
    vector_score: float | None
    grader_score: float
    new: bool


class ShadowGrades(TypedDict):
    """What the grader said about a round the pre-filter skipped (``Lab.run(shadow_grading=True)``).

    Recorded for replay only: these scores decided nothing and their calls are not the run's.
    """

    scores: list[float]
    usage: list[UsageRecord]


class RoundThresholds(TypedDict):
    """The config values a grading round was decided with."""

    relevance_floor: float
    generate_threshold: float
    vector_score_threshold: float
    auto_approve_max_items: int
    max_iterations: int
    aggregator: str


class RoundRecord(TypedDict):
    """One grading round: its items, the pre-filter rule that fired (or None), the grades and the decision.

    ``kept`` and ``dropped`` are item ids; ``capped`` says the round reached ``max_iterations``;
    ``grader_calls`` and ``grader_tokens`` are the run's own grader calls in this round (none when a
    rule fired).
    """

    iteration: int
    round_tools: list[str]
    items: list[ItemRecord]
    rule: Rule | None
    parse_ok: bool
    grader_calls: int
    grader_tokens: int
    aggregate: float | None
    action: Action
    kept: list[str]
    dropped: list[str]
    capped: bool
    thresholds: RoundThresholds
    shadow: ShadowGrades | None


class CitationRecord(TypedDict):
    """Where one cited item of the answer came from."""

    id: str | None
    path: str | None
    line: int | None
    line_end: int | None
    tool: str | None


class WeighedUnit(TypedDict):
    """One unit the offline synthesizer weighed (`crag_lab.offline.weighed.Answered`): its ``rank`` (1 = best), the
    ``score`` it was ranked by, its ``support`` (what ``ABSTAIN_BELOW`` is checked against), its ``item`` (the
    evidence's number) and that item's ``id``, the answer's citation of it (``cited``: ``[K]``'s K, or None),
    whether the answer quotes it and its text."""

    rank: int
    item: int
    unit: str
    score: float
    support: float
    quoted: bool
    id: str | None
    cited: int | None


class AnswerReading(TypedDict):
    """How the model read the evidence for its answer, when it says (the offline synthesizer does; an LLM does not):
    whether it abstained, why, and the units it weighed (`crag_lab.offline.weighed.Answered`, with the citation each
    unit's item became: `crag_lab.citations.weighed_as`)."""

    abstained: bool
    why: str | None
    units: list[WeighedUnit]


class QueryRecord(TypedDict):
    """One question's recorded run: one line of an experiment file.

    ``labels`` are the query set's own fields (``gold``, ``answers``, ...; see `query_rows`);
    ``node_ms`` is ``[node, milliseconds]`` per node step; ``audit_events`` counts the audit events
    by name; ``read`` is how the model read the evidence, when it said (recordings made before 2026-12-02 lack it).
    """

    id: str
    query: str
    labels: dict[str, Any]
    mode: Mode
    complexity: Complexity | None
    routing_plan: RoutingPlan | None
    path: list[str]
    rounds: list[RoundRecord]
    tool_history: list[ToolCall]
    usage: list[UsageRecord]
    node_ms: list[list[Any]]
    latency_ms: float
    answer: str
    citations: list[CitationRecord]
    audit_events: dict[str, int]
    read: NotRequired[AnswerReading]


class QueryRow(TypedDict):
    """One question of a query set, as `query_rows` normalises it: where a `QueryRecord` starts."""

    id: str
    question: str
    labels: dict[str, Any]


# ---- what every reader asks ------------------------------------------------------------------


class RunOutline(TypedDict, total=False):
    """The part of a record `run_route` reads (a whole `QueryRecord` is one)."""

    mode: Mode
    complexity: Complexity | None
    rounds: list[RoundRecord]


def run_route(record: RunOutline | QueryRecord) -> Route:
    """How a run ended: chitchat, simple, its last action, capped, complex (no round) or the mode.

    ``capped``: the iteration cap sent the run to synthesize without a GENERATE. ``normal`` and
    ``naive_rag`` runs have no routes of their own and answer with their mode. A record without a
    mode is read as a ``knowledge_base`` run.

    >>> run_route({"mode": "naive_rag", "rounds": []}), run_route({"complexity": "simple"})
    ('naive_rag', 'simple')
    """
    mode = record.get("mode") or "knowledge_base"
    if mode != "knowledge_base":
        return mode
    complexity = record.get("complexity")
    if complexity in ("chitchat", "simple"):
        return complexity
    rounds = record.get("rounds") or []
    if not rounds:
        return "complex"
    last = rounds[-1]
    if last["capped"] and last["action"] != "GENERATE":
        return "capped"
    return last["action"]


def round_grades(rnd: RoundRecord) -> tuple[list[float], GradeSource] | None:
    """The grades of every item of a round: the grader's own, or the shadow grades of a round the
    pre-filter skipped; None when the pre-filter skipped it and no shadow grades were kept."""
    if rnd.get("rule") is None:
        return [item["grader_score"] for item in rnd["items"]], "grader"
    shadow = rnd.get("shadow")
    if shadow:
        return list(shadow["scores"]), "shadow"
    return None


def usage_tokens(usage: Iterable[UsageRecord]) -> int:
    """Prompt plus completion tokens of these model calls.

    >>> usage_tokens([{"prompt_tokens": 10, "completion_tokens": 5}, {"prompt_tokens": 3, "completion_tokens": 1}])
    19
    """
    return sum(u["prompt_tokens"] + u["completion_tokens"] for u in usage)


# ---- query sets ------------------------------------------------------------------------------


def query_rows(queries: Iterable[str | Mapping[str, Any]]) -> list[QueryRow]:
    """Normalise a query set: strings get ids ``q001...``; dicts keep ``id``, ``question`` and labels.

    Every question is checked, and made NFC, before anything runs (``crag_lab._text.check_question``): a row that
    is neither a string nor a mapping raises ``TypeError``, a mapping without question text, an
    empty question or one with a lone surrogate ``ValueError``, each naming the row.

    >>> query_rows(["Which port?", {"id": "a7", "question": "Who owns it?", "gold": ["team.md:L3"]}])[1]
    {'id': 'a7', 'question': 'Who owns it?', 'labels': {'gold': ['team.md:L3'], 'gold_paths': ['team.md']}}
    """
    if isinstance(queries, (str, bytes, bytearray)) or not isinstance(queries, Iterable):
        raise TypeError(f"queries must be an iterable of questions or query dicts, got {type(queries).__name__}; "
                        "wrap a single question in a list")
    rows: list[QueryRow] = []
    for n, q in enumerate(queries, 1):
        if isinstance(q, str):
            rows.append({"id": f"q{n:03d}", "question": check_question(q, what=f"query #{n}"), "labels": {}})
        elif isinstance(q, Mapping):
            question = q.get("question") or q.get("query")
            if not isinstance(question, str):
                raise ValueError(f"query #{n} has no 'question' text: {dict(q)!r}"[:300])
            question = check_question(question, what=f"query #{n} ({q.get('id', 'no id')})")
            labels = {k: v for k, v in q.items() if k not in ("id", "question", "query")}
            gold = labels.get("gold", [])
            labels["gold_paths"] = sorted({str(g).split(":L")[0] for g in gold})
            rows.append({"id": str(q.get("id", f"q{n:03d}")), "question": question, "labels": labels})
        else:
            raise TypeError(f"query #{n} must be a question (str) or a dict with 'question', "
                            f"got {type(q).__name__} {q!r}"[:300])
    check_unique_ids([row["id"] for row in rows])
    return rows


def check_unique_ids(ids: Iterable[str], *, source: str = "the query set") -> None:
    """Refuse a query set in which two questions share an id, naming each such id and where it occurs.

    A run keys its records and its journal by id: a shared one would keep one answer for two
    questions. Ids are compared as given (``"Q1"`` and ``"q1"`` are two ids).

    >>> check_unique_ids(["a", "b", "a"])
    Traceback (most recent call last):
    ...
    crag_lab.errors.DuplicateIdError: the query set has 1 id used by more than one question: 'a' (queries #1, #3); ...
    """
    where: dict[str, list[int]] = {}
    for n, query_id in enumerate(ids, 1):
        where.setdefault(query_id, []).append(n)
    shared = {query_id: at for query_id, at in where.items() if len(at) > 1}
    if shared:
        named = ", ".join(f"{query_id!r} (queries {', '.join(f'#{n}' for n in at)})"
                          for query_id, at in list(shared.items())[:10])
        more = f" and {len(shared) - 10} more" if len(shared) > 10 else ""
        raise DuplicateIdError(f"{source} has {len(shared)} id{'s' if len(shared) > 1 else ''} used by more than one "
                               f"question: {named}{more}; give each question its own id")


# ---- the file: a header line, then one record per line ----------------------------------------

SCHEMA_VERSION = 1
FILE_KIND = "crag_lab.experiment"


def write_records(path: str | Path, config: CragConfig, meta: Mapping[str, Any], records: Iterable[QueryRecord]) -> Path:
    """Write JSONL: a header line (schema, config, meta), then one line per record.

    The file appears whole or not at all (`crag_lab._paths.replacing`): it is written to a fresh
    temporary file beside ``path`` and renamed into place, and a failed write removes only that
    temporary file (an older file at ``path`` stays as it was). Text
    that UTF-8 cannot encode (a lone surrogate) is written as JSON ``\\uXXXX`` escapes, which
    `read_records` turns back into the same string.
    """
    path = Path(path)
    header = {"schema": SCHEMA_VERSION, "kind": FILE_KIND, "config": config.model_dump(), "meta": meta}
    with replacing(path) as fh:
        fh.write(json_line(header, sort_keys=True, default=str) + "\n")
        for rec in records:
            fh.write(json_line(rec, sort_keys=True, default=str) + "\n")
    return path


def read_records(path: str | Path, *, skip_invalid: bool = False) -> tuple[CragConfig, dict[str, Any], list[QueryRecord]]:
    """The config, meta and records of a file `write_records` wrote.

    A file of another kind or schema, or an unreadable header or config, raises
    ``ExperimentFileError`` (a ``ValueError``) naming the file. So does a record line that is not a
    JSON object, naming the line: a recording that was killed leaves a truncated last line. With
    ``skip_invalid=True`` such lines are skipped instead, with one warning that gives their count
    and numbers, and the valid records are kept. Records are not checked key by key: a recording
    loads as it was written.
    """
    raw = Path(path).read_bytes().split(b"\n")
    lines = [(n, line) for n, line in enumerate(raw, 1) if line.strip()]
    if not lines:
        raise ExperimentFileError(f"{path} is empty; expected a crag_lab experiment written by Experiment.save")
    n, first = lines[0]
    try:
        header = _json_object(first)
    except ValueError as exc:
        raise ExperimentFileError(f"{path}:{n}: the header is not a JSON object ({exc}); "
                                  "expected a crag_lab experiment written by Experiment.save") from None
    if header.get("kind") != FILE_KIND or header.get("schema") != SCHEMA_VERSION:
        raise ExperimentFileError(f"{path} is not a crag_lab experiment of schema {SCHEMA_VERSION} "
                                  f"(header: {first[:120].decode('utf-8', 'replace')})")
    try:
        config = CragConfig(**header["config"])
    except (KeyError, TypeError, ValueError) as exc:
        detail = " ".join(str(exc).split())
        raise ExperimentFileError(f"{path}:{n}: the recorded config is missing or invalid ({detail})") from None
    records: list[QueryRecord] = []
    invalid: list[int] = []
    for n, line in lines[1:]:
        try:
            records.append(cast(QueryRecord, _json_object(line)))  # as it was written: not checked key by key
        except ValueError as exc:
            if not skip_invalid:
                raise ExperimentFileError(
                    f"{path}:{n}: not a valid record ({exc}); the file may be truncated (a killed recording): "
                    "Experiment.load(path, skip_invalid=True) keeps the valid records"
                ) from None
            invalid.append(n)
    if invalid:
        shown = ", ".join(map(str, invalid[:20])) + (", ..." if len(invalid) > 20 else "")
        warnings.warn(f"{path}: skipped {len(invalid)} invalid record line{'s' if len(invalid) > 1 else ''} "
                      f"(line{'s' if len(invalid) > 1 else ''} {shown}); kept {len(records)} records",
                      UserWarning, stacklevel=3)
    meta = header.get("meta")
    return config, meta if isinstance(meta, dict) else {}, records


def _json_object(line: bytes) -> dict[str, Any]:
    """One line of an experiment file as a JSON object; ``ValueError`` saying what is wrong otherwise."""
    try:
        value = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if not isinstance(value, dict):
        raise ValueError(f"a JSON {type(value).__name__}, not an object")
    return value


__all__ = [
    "NODE_NAMES",
    "Action",
    "AnswerReading",
    "CitationRecord",
    "Complexity",
    "GradeSource",
    "ItemRecord",
    "Mode",
    "NodeName",
    "QueryRecord",
    "QueryRow",
    "RoundRecord",
    "RoundThresholds",
    "Route",
    "Rule",
    "RunOutline",
    "ShadowGrades",
    "ToolCall",
    "UsageRecord",
    "WeighedUnit",
    "check_unique_ids",
    "read_records",
    "round_grades",
    "run_route",
    "usage_tokens",
    "write_records",
]
