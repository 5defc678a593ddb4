"""Record a query set once; replay its grading rounds at other thresholds without any model call.

`Lab.run` produces an `Experiment`: one `crag_lab.records.QueryRecord` per query (the path through
the graph, every grading round with its items, scores, rule, action and thresholds, model calls,
tokens and latency per node, the answer and its citations), under the config it ran with.

`Experiment.replay` re-decides every recorded round with the pure functions the graph uses
(`crag_lab.decisions`). It is exact for every round the recording contains; where a changed
decision would lead the run somewhere the recording never went (another REFINE round, a
RE_RETRIEVE that did not happen), replay says so (``outcome == "needs_rerun"``) instead of
guessing: `Lab.rerun` runs the real graph for those. `crag_lab.replay.scalar.replay_record` replays
one query round by round and is the reference; by default `Experiment.replay` decides all rounds
at once with numpy (`crag_lab.replay._vectorised`, fast enough for a slider over 10,000 rounds)
and gives the same `QueryReplay`s, field for field.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from crag_lab.config import CragConfig
from crag_lab.records import QueryRecord, RoundRecord, read_records, round_grades, write_records
from crag_lab.replay import _vectorised
from crag_lab.replay.report import QueryReplay, ReplayReport
from crag_lab.replay.scalar import replay_record

if TYPE_CHECKING:
    from crag_lab.replay.frontier import Frontier
    from crag_lab.replay.guarantee import Guarantee, GuaranteeResult
    from crag_lab.replay.regrade import GraderLike, ItemTexts
    from crag_lab.replay.tune import TuneResult
    from crag_lab.traces import TraceExport

Engine = Literal["vectorised", "scalar"]
ENGINES: tuple[Engine, ...] = ("vectorised", "scalar")


class QueryRound(RoundRecord):
    """A grading round with the id of its query (`Experiment.rounds`)."""

    query_id: str


@dataclass
class Experiment:
    """Recorded runs of a query set under one config. Save, load, replay.

    ``records`` are treated as recorded data. Adding, removing or replacing records is fine (replay
    notices), but replay does not notice a record edited in place: build a new ``Experiment``
    instead, or replay with ``engine="scalar"``.
    """

    config: CragConfig
    records: list[QueryRecord]
    meta: dict[str, Any] = field(default_factory=dict)
    _compiled: _vectorised.CompiledRounds | None = field(default=None, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[QueryRecord]:
        return iter(self.records)

    def replay(self, config: CragConfig | Mapping[str, Any] | None = None, *, engine: Engine = "vectorised",
               **changes: Any) -> ReplayReport:
        """Re-decide every recorded round at ``config`` (or the recorded config with ``changes``).

        No model is called. ``exp.replay(relevance_floor=0.5)`` is the same as
        ``exp.replay(exp.config.model_copy(update={"relevance_floor": 0.5}))``.

        Parameters
        ----------
        config
            The config to replay at: a `CragConfig`, or a mapping of fields to change in the
            recorded config. None (the default) replays at the recorded config with ``changes``.
        engine
            Only changes the speed, never the result. ``"vectorised"`` (the default) decides every
            round at once with numpy: the first replay also builds the arrays (costing one or two
            scalar replays), which are kept until ``records`` changes; each later replay is several
            times faster than a scalar one. ``"scalar"`` calls `replay_record` for each query: the
            reference. Either way Python's garbage collector is paused while the report is built
            (see `crag_lab.replay._vectorised.collector_paused`).
        **changes
            Config fields to change (``relevance_floor=0.5``), validated like the constructor's.

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
        with _vectorised.collector_paused():
            if engine == "scalar" or not _vectorised.supports(config):
                return ReplayReport(config, [replay_record(r, config) for r in self.records])
            if self._compiled is None or not self._compiled.matches(self.records):
                self._compiled = _vectorised.CompiledRounds(self.records)
            replayed = self._compiled.replay(config)
            return ReplayReport(config, [
                replay_record(record, config) if fields is None else QueryReplay(**fields)
                for record, fields in zip(self.records, replayed, strict=True)
            ])

    def frontier(self, **kwargs: Any) -> Frontier:
        """Replay at every setting of a grid and measure each on the gold labels: `crag_lab.replay.frontier.frontier`."""
        from crag_lab.replay.frontier import frontier

        return frontier(self, **kwargs)

    @overload
    def tune(self, *, guarantee: None = ..., **kwargs: Any) -> TuneResult: ...

    @overload
    def tune(self, *, guarantee: str | Guarantee | Sequence[str | Guarantee], **kwargs: Any) -> GuaranteeResult: ...

    def tune(self, *, guarantee: str | Guarantee | Sequence[str | Guarantee] | None = None,
             **kwargs: Any) -> TuneResult | GuaranteeResult:
        """Pick thresholds by cross-validation over questions: `crag_lab.replay.tune.tune`.

        With ``guarantee="gold_dropped<=0.10"`` (and ``delta``), the risk-controlled pick instead:
        `crag_lab.replay.guarantee.risk_controlled`.
        """
        from crag_lab.replay.tune import tune

        return tune(self, guarantee=guarantee, **kwargs)

    def regrade(self, grader: GraderLike, *, texts: ItemTexts = None, **kwargs: Any) -> Experiment:
        """The same recording with every grade replaced by ``grader``'s: `crag_lab.replay.regrade.regrade`."""
        from crag_lab.replay.regrade import regrade

        return regrade(self, grader, texts=texts, **kwargs)

    # ---- aggregates the plots and tables use --------------------------------------------------

    def rounds(self) -> list[QueryRound]:
        """Every grading round of every query, each with its query id."""
        return [{**rnd, "query_id": rec["id"]} for rec in self.records for rnd in rec.get("rounds", [])]

    def graded_items(self) -> list[dict[str, Any]]:
        """One row per item graded by the model (first grading of each item), with gold labels if known.

        ``gold`` has one meaning everywhere (the evaluation, the frontier, the plots): the item's lines
        overlap one of its question's labelled gold locations (``labels["gold"]``, ``path:Lstart-Lend``).
        Items of an unanswerable or chitchat question are never gold; None: the question labels nothing.
        Records that list only ``gold_ids`` or ``gold_paths`` (no locations) are matched on those.
        """
        from crag_lab.replay._frontier import item_flags

        rows = []
        for rec in self.records:
            labels = rec.get("labels", {})
            gold = set(labels.get("gold_ids", []))
            gold_paths = set(labels.get("gold_paths", []))
            located = bool(labels.get("gold")) or labels.get("answerable") is False \
                or labels.get("complexity") == "chitchat"
            flags = item_flags(rec, labels) if located else None
            seen: set[str] = set()
            for k, rnd in enumerate(rec.get("rounds", [])):
                grades = round_grades(rnd)
                if grades is None:
                    continue
                scores = grades[0]
                for i, item in enumerate(rnd["items"]):
                    if item["id"] in seen:
                        continue
                    seen.add(item["id"])
                    if flags is not None:
                        is_gold: bool | None = flags[k][i][0] if flags[k][i][1] else None
                    else:
                        is_gold = (item["id"] in gold or item.get("path") in gold_paths) if (gold or gold_paths) \
                            else None
                    rows.append({"query_id": rec["id"], "id": item["id"], "path": item.get("path"),
                                 "tool": item["tool"], "vector_score": item.get("vector_score"),
                                 "grader_score": scores[i], "gold": is_gold, "shadow": rnd.get("rule") is not None})
        return rows

    def vector_scores(self) -> list[float]:
        return [s for r in self.rounds() for i in r["items"] if (s := i.get("vector_score")) is not None]

    def calls_per_query(self) -> list[int]:
        return [len(r.get("usage", [])) for r in self.records]

    def fast_path_counts(self) -> dict[str, int]:
        counts = Counter[str](rule for r in self.rounds() if (rule := r.get("rule")))
        for rec in self.records:
            complexity = rec.get("complexity")
            if complexity in ("chitchat", "simple"):
                counts[str(complexity)] += 1
        return dict(counts)

    def record(self, query_id: str) -> QueryRecord:
        for rec in self.records:
            if str(rec["id"]) == str(query_id):
                return rec
        raise KeyError(f"no query with id {query_id!r} in this experiment")

    # ---- persistence ----------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write JSONL: a header line (schema, config, meta), then one line per query.

        The file appears whole or not at all (see `crag_lab.records.write_records`). Text that UTF-8
        cannot encode (a lone surrogate) is written as JSON ``\\uXXXX`` escapes, which ``load``
        turns back into the same string.
        """
        return write_records(path, self.config, self.meta, self.records)

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
        config, meta, records = read_records(path, skip_invalid=skip_invalid)
        return cls(config, records, meta)

    def to_otel(self, exporter: Any = None, **kwargs: Any) -> TraceExport:
        """Every recorded question as one OpenTelemetry trace (OpenInference conventions): `crag_lab.traces.export_traces`.

        >>> exp.to_otel(endpoint="http://127.0.0.1:6006/v1/traces")  # Phoenix  # doctest: +SKIP
        >>> exp.to_otel(path="runs/kb.otlp.jsonl", replay={"relevance_floor": 0.5})  # doctest: +SKIP
        """
        from crag_lab.traces import export_traces

        return export_traces(self, exporter, **kwargs)
