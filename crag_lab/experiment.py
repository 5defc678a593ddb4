"""Record a query set once; replay its grading rounds at other thresholds without any model call.

`Lab.run` produces an `Experiment`: per query, the path through the graph, every grading round
(items with provenance, tool, vector score, grader score, the pre-filter rule, the action, the
thresholds in force), model calls, tokens and latency per node, the answer and its citations.

`Experiment.replay` re-decides every recorded round with the rules of the pure functions the graph
uses (`crag_lab.decisions`). It is exact for every round the recording contains; where a changed
decision would lead the run somewhere the recording never went (another REFINE round, a RE_RETRIEVE
that did not happen), replay says so (``outcome == "needs_rerun"``) instead of guessing: `Lab.rerun`
runs the real graph for those.

`replay_record` replays one query by calling those functions round by round: it is the reference.
By default `Experiment.replay` decides all rounds at once with numpy (`crag_lab._replay`, fast enough
for a slider over 10,000 rounds) and gives the same `QueryReplay`s, field for field.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from crag_lab import _replay, decisions
from crag_lab._replay import grader_cost, recorded_fields
from crag_lab._text import check_question, json_line
from crag_lab.config import CragConfig
from crag_lab.errors import ExperimentFileError

SCHEMA_VERSION = 1
FINAL_OUTCOMES = ("chitchat", "simple", "GENERATE", "capped", "needs_rerun", "other")
Engine = Literal["vectorised", "scalar"]
ENGINES: tuple[Engine, ...] = ("vectorised", "scalar")


def _round_decision(rnd: Mapping[str, Any], config: CragConfig) -> tuple[decisions.Decision | None, str | None]:
    """Re-decide one recorded round; None when the grader scores it would need were never recorded."""
    items = rnd["items"]
    rule = decisions.prefilter_rule(
        round_tools=rnd["round_tools"],
        item_tools=[i["tool"] for i in items],
        item_vector_scores=[i.get("vector_score") for i in items],
        auto_approve_max_items=config.auto_approve_max_items,
        vector_score_threshold=config.vector_score_threshold,
    ) if config.prefilter else None
    if rule is not None:
        return decisions.auto_approve(len(items), rule), None
    if rnd.get("rule") is None:
        scores = [float(i["grader_score"]) for i in items]
    elif rnd.get("shadow"):
        scores = [float(s) for s in rnd["shadow"]["scores"]]
    else:
        return None, _replay.NOTE_NO_SHADOW
    return decisions.decide(scores, floor=config.relevance_floor, generate_threshold=config.generate_threshold,
                            aggregator=config.aggregator), None


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


def replay_record(record: Mapping[str, Any], config: CragConfig) -> QueryReplay:
    """Replay one recorded query at ``config``, round by round (see the module docstring for what is exact).

    The reference implementation: ``Experiment.replay(..., engine="scalar")`` calls it per query, and
    the default vectorised engine must give the same result.
    """
    rounds = list(record.get("rounds", []))
    base = recorded_fields(record)
    recorded_outcome: str = base["recorded_outcome"]
    if not rounds:
        return QueryReplay(**base, outcome=recorded_outcome, first_action=None, actions=[], flipped_rounds=[],
                           fast_path_gained=[], fast_path_lost=[], items_kept=0, items_dropped=0,
                           calls_delta=0, tokens_delta=0, calls_delta_is_lower_bound=False)
    actions: list[str] = []
    flipped: list[int] = []
    gained: list[str] = []
    lost: list[str] = []
    kept = dropped = calls = tokens = 0
    outcome, note, lower_bound = recorded_outcome, "", False
    for k, rnd in enumerate(rounds):
        decision, why_not = _round_decision(rnd, config)
        if decision is None:
            outcome, note, lower_bound = "needs_rerun", why_not or "", True
            break
        actions.append(decision.action)
        kept, dropped = kept + len(decision.kept), dropped + len(decision.dropped)
        if decision.action != rnd["action"]:
            flipped.append(int(rnd["iteration"]))
        if decision.rule != rnd.get("rule"):
            if decision.rule is not None:
                gained.append(decision.rule)
            if rnd.get("rule") is not None:
                lost.append(str(rnd["rule"]))
        grader_calls, grader_tokens = grader_cost(rnd)
        if decision.rule is None and rnd.get("rule") is not None:
            calls, tokens = calls + grader_calls, tokens + grader_tokens
        elif decision.rule is not None and rnd.get("rule") is None:
            calls, tokens = calls - grader_calls, tokens - grader_tokens
        route = decisions.route_after_grade(decision.action, int(rnd["iteration"]), config.max_iterations)
        recorded_route = (
            "synthesize" if k == len(rounds) - 1
            else decisions.route_after_grade(rnd["action"], int(rnd["iteration"]), int(rnd["thresholds"]["max_iterations"]))
        )
        same_context = tuple(decision.kept) == tuple(i for i, item in enumerate(rnd["items"]) if item["id"] in rnd["kept"])
        if route == "synthesize":
            later = [u for u in record.get("usage", [])
                     if u["node"] != "synthesize" and u.get("iteration", 0) >= int(rnd["iteration"])]
            calls -= len(later)
            tokens -= sum(u["prompt_tokens"] + u["completion_tokens"] for u in later)
            if k < len(rounds) - 1:
                note = f"stops at round {rnd['iteration']} instead of {rounds[-1]['iteration']}"
            outcome = "GENERATE" if decision.action == "GENERATE" else "capped"
            break
        if route != recorded_route:
            outcome, lower_bound = "needs_rerun", True
            calls += 2 if route == "plan" else 3  # at least plan + grade (and analyze for RE_RETRIEVE)
            note = f"round {rnd['iteration']} would go to {route}; the recording never went there"
            break
        if not same_context:
            outcome, lower_bound = "needs_rerun", True
            note = f"round {rnd['iteration']} keeps different items, so later rounds would see other evidence"
            break
    return QueryReplay(**base, outcome=outcome, first_action=actions[0] if actions else None, actions=actions,
                       flipped_rounds=flipped, fast_path_gained=gained, fast_path_lost=lost, items_kept=kept,
                       items_dropped=dropped, calls_delta=calls, tokens_delta=tokens,
                       calls_delta_is_lower_bound=lower_bound, note=note)


@dataclass
class Experiment:
    """Recorded runs of a query set under one config. Save, load, replay.

    ``records`` are treated as recorded data. Adding, removing or replacing records is fine (replay
    notices), but replay does not notice a record edited in place: build a new ``Experiment``
    instead, or replay with ``engine="scalar"``.
    """

    config: CragConfig
    records: list[dict[str, Any]]
    meta: dict[str, Any] = field(default_factory=dict)
    _compiled: _replay.CompiledRounds | None = field(default=None, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records)

    def replay(self, config: CragConfig | Mapping[str, Any] | None = None, *, engine: Engine = "vectorised",
               **changes: Any) -> ReplayReport:
        """Re-decide every recorded round at ``config`` (or the recorded config with ``changes``).

        No model is called. ``exp.replay(relevance_floor=0.5)`` is the same as
        ``exp.replay(exp.config.model_copy(update={"relevance_floor": 0.5}))``.

        ``engine`` only changes the speed, never the result. ``"vectorised"`` (the default) decides
        every round at once with numpy: the first replay also builds the arrays (costing one or two
        scalar replays), which are kept until ``records`` changes; each later replay is several times
        faster than a scalar one. ``"scalar"`` calls `replay_record` for each query: the reference.
        Either way Python's garbage collector is paused while the report is built (see
        `crag_lab._replay.collector_paused`).

        >>> items = [{"id": f"d{i}", "tool": "keyword_search", "grader_score": s} for i, s in enumerate([0.9, 0.6, 0.2])]
        >>> rnd = {"iteration": 1, "round_tools": ["keyword_search"], "items": items, "rule": None, "action": "GENERATE",
        ...        "kept": ["d0", "d1"], "dropped": ["d2"], "capped": False, "thresholds": {"max_iterations": 3}}
        >>> exp = Experiment(CragConfig(), [{"id": "q1", "query": "?", "complexity": "complex", "rounds": [rnd]}])
        >>> q = exp.replay(generate_threshold=0.8).queries[0]  # the mean of 0.9 and 0.6 no longer answers
        >>> q.actions, q.outcome
        (['REFINE'], 'needs_rerun')
        >>> exp.replay(generate_threshold=0.8, engine="scalar").queries[0] == q
        True
        """
        if engine not in ENGINES:
            raise ValueError(f"unknown replay engine {engine!r}; choose one of {list(ENGINES)}")
        if config is None:
            config = self.config.with_changes(**changes)
        elif isinstance(config, Mapping):
            config = self.config.with_changes(**(dict(config) | changes))
        with _replay.collector_paused():
            if engine == "scalar" or not _replay.supports(config):
                return ReplayReport(config, [replay_record(r, config) for r in self.records])
            if self._compiled is None or not self._compiled.matches(self.records):
                self._compiled = _replay.CompiledRounds(self.records)
            replayed = self._compiled.replay(config)
            return ReplayReport(config, [
                replay_record(record, config) if fields is None else QueryReplay(**fields)
                for record, fields in zip(self.records, replayed, strict=True)
            ])

    # ---- aggregates the plots and tables use --------------------------------------------------

    def rounds(self) -> list[dict[str, Any]]:
        """Every grading round of every query, each with its query id."""
        return [{**rnd, "query_id": rec["id"]} for rec in self.records for rnd in rec.get("rounds", [])]

    def graded_items(self) -> list[dict[str, Any]]:
        """One row per item graded by the model (first grading of each item), with gold labels if known."""
        rows = []
        for rec in self.records:
            gold = set(rec.get("labels", {}).get("gold_ids", []))
            gold_paths = set(rec.get("labels", {}).get("gold_paths", []))
            seen: set[str] = set()
            for rnd in rec.get("rounds", []):
                scores = [i["grader_score"] for i in rnd["items"]] if rnd.get("rule") is None else (
                    (rnd.get("shadow") or {}).get("scores"))
                for i, item in enumerate(rnd["items"]):
                    if item["id"] in seen or scores is None:
                        continue
                    seen.add(item["id"])
                    is_gold = (item["id"] in gold or item.get("path") in gold_paths) if (gold or gold_paths) else None
                    rows.append({"query_id": rec["id"], "id": item["id"], "path": item.get("path"),
                                 "tool": item["tool"], "vector_score": item.get("vector_score"),
                                 "grader_score": scores[i], "gold": is_gold, "shadow": rnd.get("rule") is not None})
        return rows

    def vector_scores(self) -> list[float]:
        return [i["vector_score"] for r in self.rounds() for i in r["items"] if i.get("vector_score") is not None]

    def calls_per_query(self) -> list[int]:
        return [len(r.get("usage", [])) for r in self.records]

    def fast_path_counts(self) -> dict[str, int]:
        counts = Counter(r["rule"] for r in self.rounds() if r.get("rule"))
        for rec in self.records:
            if rec.get("complexity") in ("chitchat", "simple"):
                counts[str(rec["complexity"])] += 1
        return dict(counts)

    def record(self, query_id: str) -> dict[str, Any]:
        for rec in self.records:
            if str(rec["id"]) == str(query_id):
                return rec
        raise KeyError(f"no query with id {query_id!r} in this experiment")

    # ---- persistence ----------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write JSONL: a header line (schema, config, meta), then one line per query.

        The file appears whole or not at all: it is written beside ``path`` and renamed into place,
        and a failed write removes what it wrote (an older file at ``path`` stays as it was). Text
        that UTF-8 cannot encode (a lone surrogate) is written as JSON ``\\uXXXX`` escapes, which
        ``load`` turns back into the same string.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        header = {"schema": SCHEMA_VERSION, "kind": "crag_lab.experiment", "config": self.config.model_dump(),
                  "meta": self.meta}
        try:
            with tmp.open("w", encoding="utf-8") as fh:
                fh.write(json_line(header, sort_keys=True, default=str) + "\n")
                for rec in self.records:
                    fh.write(json_line(rec, sort_keys=True, default=str) + "\n")
            tmp.replace(path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return path

    @classmethod
    def load(cls, path: str | Path, *, skip_invalid: bool = False) -> Experiment:
        """Read what `save` wrote.

        A file of another kind or schema, or an unreadable header, raises ``ExperimentFileError`` (a
        ``ValueError``) naming the file. So does a record line that is not a JSON object, naming the
        line: a recording that was killed leaves a truncated last line. With ``skip_invalid=True``
        such lines are skipped instead, with one warning that gives their count and numbers, and the
        valid records are kept.

        >>> Experiment.load("runs/killed.jsonl", skip_invalid=True)  # doctest: +SKIP
        UserWarning: runs/killed.jsonl: skipped 1 invalid record line (line 141); kept 140 records
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
        if header.get("kind") != "crag_lab.experiment" or header.get("schema") != SCHEMA_VERSION:
            raise ExperimentFileError(f"{path} is not a crag_lab experiment of schema {SCHEMA_VERSION} "
                                      f"(header: {first[:120].decode('utf-8', 'replace')})")
        try:
            config = CragConfig(**header["config"])
        except (KeyError, TypeError, ValueError) as exc:
            detail = " ".join(str(exc).split())
            raise ExperimentFileError(f"{path}:{n}: the recorded config is missing or invalid ({detail})") from None
        records: list[dict[str, Any]] = []
        invalid: list[int] = []
        for n, line in lines[1:]:
            try:
                records.append(_json_object(line))
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
                          UserWarning, stacklevel=2)
        meta = header.get("meta")
        return cls(config, records, meta if isinstance(meta, dict) else {})


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


def make_record(query_id: str, query: str, state: Mapping[str, Any], *, labels: Mapping[str, Any] | None = None,
                node_ms: Sequence[tuple[str, float]] = (), latency_ms: float = 0.0) -> dict[str, Any]:
    """The JSON-ready record of one run (the schema `Experiment.save` writes)."""
    return {
        "id": query_id,
        "query": query,
        "labels": dict(labels or {}),
        "mode": state.get("mode"),
        "complexity": (state.get("routing_plan") or {}).get("complexity"),
        "routing_plan": state.get("routing_plan"),
        "path": list(state.get("path", [])),
        "rounds": list(state.get("rounds", [])),
        "tool_history": list(state.get("tool_history", [])),
        "usage": list(state.get("usage", [])),
        "node_ms": [[n, round(ms, 3)] for n, ms in node_ms],
        "latency_ms": round(latency_ms, 3),
        "answer": state.get("answer", ""),
        "citations": [{k: c.get(k) for k in ("id", "path", "line", "line_end", "tool")} for c in state.get("citations", [])],
        "audit_events": Counter(e["event"] for e in state.get("audit", [])),
    }


def query_rows(queries: Iterable[str | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Normalise a query set: strings get ids ``q001...``; dicts keep ``id``, ``question`` and labels.

    Every question is checked before anything runs (``crag_lab._text.check_question``): a row that
    is neither a string nor a mapping raises ``TypeError``, a mapping without question text, an
    empty question or one with a lone surrogate ``ValueError``, each naming the row.
    """
    if isinstance(queries, (str, bytes, bytearray)) or not isinstance(queries, Iterable):
        raise TypeError(f"queries must be an iterable of questions or query dicts, got {type(queries).__name__}; "
                        "wrap a single question in a list")
    rows = []
    for n, q in enumerate(queries, 1):
        if isinstance(q, str):
            rows.append({"id": f"q{n:03d}", "question": check_question(q, what=f"query #{n}"), "labels": {}})
        elif isinstance(q, Mapping):
            question = q.get("question") or q.get("query")
            if not isinstance(question, str):
                raise ValueError(f"query #{n} has no 'question' text: {dict(q)!r}"[:300])
            check_question(question, what=f"query #{n} ({q.get('id', 'no id')})")
            labels = {k: v for k, v in q.items() if k not in ("id", "question", "query")}
            gold = labels.get("gold", [])
            labels["gold_paths"] = sorted({str(g).split(":L")[0] for g in gold})
            rows.append({"id": str(q.get("id", f"q{n:03d}")), "question": question, "labels": labels})
        else:
            raise TypeError(f"query #{n} must be a question (str) or a dict with 'question', "
                            f"got {type(q).__name__} {q!r}"[:300])
    return rows
