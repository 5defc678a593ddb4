"""Run a labelled query set through the agent's modes and measure every run against the labels.

The raw material is `Lab.run`'s `Experiment` records (rounds with grader scores, usage, citations,
the answer, the complexity). `Evaluation` flattens them into tidy tables (one row per query, per
graded item, per grading round) and computes the metrics of `crag_lab.eval.metrics` per mode,
overall and per route.

>>> from crag_lab.eval import evaluate, load_dataset  # doctest: +SKIP
>>> ev = evaluate(lab, load_dataset("data/kb_queries.jsonl"), modes=["knowledge_base", "naive_rag"])  # doctest: +SKIP
>>> ev.summary()  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crag_lab.config import CragConfig
from crag_lab.eval import metrics as m
from crag_lab.eval.datasets import EvalQuery, EvalSet
from crag_lab.eval.report import render_markdown
from crag_lab.records import Mode, QueryRecord, check_unique_ids, round_grades, run_route, usage_tokens
from crag_lab.replay import Experiment

if TYPE_CHECKING:
    import pandas as pd

    from crag_lab.lab import Lab
    from crag_lab.ray_executor import Executor

EVAL_MODES: tuple[str, ...] = ("knowledge_base", "normal", "naive_rag", "per_item_grading")
"""Modes `evaluate` runs. ``per_item_grading`` is the baseline of LangGraph's and LlamaIndex's CRAG
examples: one grader call per item, no pre-filter, no complexity routing (every question graded)."""

COMPARED_MODES: tuple[str, ...] = ("knowledge_base", "naive_rag", "per_item_grading")
GROUPINGS = ("route", "complexity", "question_kind")
HEADLINE = ("grader_auroc", "floor_precision", "floor_recall", "routing_accuracy", "answer_containment",
            "citation_precision", "abstention_rate", "false_abstention_rate", "calls_per_query",
            "tokens_per_query")


def mode_setup(mode: str, config: CragConfig) -> tuple[Mode, CragConfig]:
    """The graph mode and config an evaluation mode runs with.

    >>> graph_mode, cfg = mode_setup("per_item_grading", CragConfig())
    >>> graph_mode, cfg.grading, cfg.prefilter, cfg.routing
    ('knowledge_base', 'per_item', False, False)
    """
    if mode == "per_item_grading":
        return "knowledge_base", config.model_copy(update={"grading": "per_item", "prefilter": False,
                                                           "routing": False})
    if mode in ("knowledge_base", "normal", "naive_rag"):
        return mode, config  # type: ignore[return-value]
    raise ValueError(f"unknown evaluation mode {mode!r}; choose one of {list(EVAL_MODES)}")


# ---- records -> tidy rows ------------------------------------------------------------------------


def _item_label(query: EvalQuery, path: str | None, line: int | None, line_end: int | None) -> bool | None:
    """Gold or not; None for an answerable, non-chitchat question that lists no gold location."""
    if query.gold:
        return m.is_gold(path, line, line_end, query.gold)
    if query.answerable is False or query.complexity == "chitchat":
        return False
    return None


def query_row(mode: str, record: QueryRecord, query: EvalQuery, routed: bool) -> dict[str, Any]:
    """One tidy row: labels, what the run did, and the per-query metrics."""
    answer = str(record.get("answer", ""))
    abstained = m.is_abstention(answer)
    cited = [(c.get("path"), c.get("line"), c.get("line_end")) for c in record.get("citations", [])]
    cit_p, cit_r = m.citation_precision_recall(cited, query.gold) if query.gold else (None, None)
    retrieved = [m.location_of(i) for call in record.get("tool_history", []) if call.get("ok")
                 for i in call.get("item_ids", [])]
    retrieval_recall = (sum(any(g.matches(*loc) for loc in retrieved) for g in query.gold) / len(query.gold)
                        if query.gold else None)
    usage = record.get("usage", [])
    rounds = record.get("rounds", [])
    kb_question = query.answerable is True and query.complexity != "chitchat"
    contained = m.answer_contained(answer, query.answers) if query.answerable else None
    read = record.get("read")  # the offline synthesizer's account: why it abstained
    stage = None
    if query.gold and query.answerable:
        # What reached the synthesizer: the last grading round's kept items, or every retrieved item.
        evidence = [m.location_of(i) for i in rounds[-1]["kept"]] if rounds else retrieved
        stage = m.loss_stage(contained=contained, abstained=abstained, retrieved_gold=bool(retrieval_recall),
                             evidence_gold=any(m.is_gold(*loc, query.gold) for loc in evidence),
                             cited_gold=bool(cit_p))  # recall > 0: a gold location was found; precision > 0: cited
    return {
        "mode": mode,
        "id": query.id,
        "question": query.question,
        "complexity": query.complexity,
        "predicted": record.get("complexity") if routed else None,
        "route": run_route(record),
        "answerable": query.answerable,
        "abstained": abstained,
        "contained": contained,
        "exact_match": m.exact_match(answer, query.answers) if query.answerable else None,
        "f1": m.token_f1(answer, query.answers) if query.answerable else None,
        "question_kind": query.kind,
        "loss_stage": stage,
        "abstain_cause": m.abstain_cause(no_evidence=bool(record.get("audit_events", {}).get("no_evidence")),
                                         reason=read.get("why") if read else None) if abstained else None,
        "abstained_unanswerable": abstained if query.answerable is False else None,
        "abstained_answerable": abstained if kb_question else None,
        "n_cited": len(cited),
        "citation_precision": cit_p,
        "citation_recall": cit_r,
        "retrieval_recall": retrieval_recall,
        "calls": len(usage),
        "grader_calls": sum(1 for u in usage if u.get("task") == "grade"),
        "tokens": usage_tokens(usage),
        "latency_ms": float(record.get("latency_ms", 0.0)),
        "model_latency_ms": sum(float(u.get("latency_ms", 0.0)) for u in usage),
        "rounds": len(rounds),
        "actions": " → ".join(r["action"] for r in rounds),
        "rules": ",".join(str(r["rule"]) for r in rounds if r.get("rule")),
        "answer": m.answer_body(answer),
    }


def item_rows(mode: str, record: QueryRecord, query: EvalQuery, floor: float) -> list[dict[str, Any]]:
    """One row per item the grader scored (its first grading; shadow grades of skipped rounds included)."""
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    route = run_route(record)
    for rnd in record.get("rounds", []):
        grades = round_grades(rnd)
        if grades is None:
            continue
        scores, source = grades
        for item, score in zip(rnd["items"], scores, strict=False):
            if item["id"] in seen:
                continue
            seen.add(item["id"])
            path, line, line_end = item.get("path"), item.get("line"), None
            loc = m.location_of(item["id"])
            if loc[0] == path:
                line_end = loc[2]
            rows.append({"mode": mode, "query_id": query.id, "route": route,
                         "complexity": query.complexity, "item_id": item["id"], "path": path, "line": line,
                         "line_end": line_end, "tool": item.get("tool"), "round": rnd["iteration"],
                         "score": float(score), "source": source, "kept": float(score) >= floor,
                         "gold": _item_label(query, path, line, line_end)})
    return rows


def round_rows(mode: str, record: QueryRecord, query: EvalQuery) -> list[dict[str, Any]]:
    route = run_route(record)
    return [{"mode": mode, "query_id": query.id, "route": route, "complexity": query.complexity,
             "iteration": r["iteration"], "rule": r.get("rule"), "action": r["action"], "capped": r["capped"],
             "items": len(r["items"])} for r in record.get("rounds", [])]


# ---- metrics over a slice of the tables -------------------------------------------------------------


def _col(frame: pd.DataFrame, name: str) -> list[Any]:
    return [None if _missing(v) else v for v in frame[name].tolist()] if name in frame else []


def _missing(value: Any) -> bool:
    try:
        return value is None or bool(value != value)  # NaN is the only value unequal to itself
    except (TypeError, ValueError):
        return False


def _flag(value: Any) -> bool:
    """A tidy row's yes/no cell: True only for a set, true value (None and NaN are no)."""
    return not _missing(value) and bool(value)


def compute_metrics(queries: pd.DataFrame, items: pd.DataFrame, rounds: pd.DataFrame, *,
                    floor: float, routed: bool) -> dict[str, Any]:
    """Every metric over one slice (a mode, a mode and route, ...). None where the slice cannot say."""
    labelled = items[[not _missing(g) for g in items["gold"]]] if len(items) else items
    scores = [float(s) for s in _col(labelled, "score")]
    gold = [bool(g) for g in _col(labelled, "gold")]
    floor_p, floor_r = m.floor_precision_recall(scores, gold, floor)
    predicted, expected = _col(queries, "predicted"), _col(queries, "complexity")
    n = len(queries)
    return {
        "n_queries": n,
        "graded_items": len(scores),
        "gold_items": sum(gold),
        "grader_auroc": m.auroc(scores, gold),
        "floor_precision": floor_p,
        "floor_recall": floor_r,
        "grader_ece": m.expected_calibration_error(scores, gold),
        "routing_accuracy": m.routing_accuracy(predicted, expected) if routed else None,
        "chitchat_recall": m.class_recall(predicted, expected, "chitchat") if routed else None,
        "answer_containment": m.rate(_col(queries, "contained")),
        "exact_match": m.rate(_col(queries, "exact_match")),
        "answer_f1": m.mean(_col(queries, "f1")),
        "citation_precision": m.mean(_col(queries, "citation_precision")),
        "citation_recall": m.mean(_col(queries, "citation_recall")),
        "retrieval_recall": m.mean(_col(queries, "retrieval_recall")),
        "abstention_rate": m.rate(_col(queries, "abstained_unanswerable")),
        "false_abstention_rate": m.rate(_col(queries, "abstained_answerable")),
        "calls_per_query": m.mean(_col(queries, "calls")),
        "grader_calls_per_query": m.mean(_col(queries, "grader_calls")),
        "tokens_per_query": m.mean(_col(queries, "tokens")),
        "latency_ms_per_query": m.mean(_col(queries, "latency_ms")),
        "model_latency_ms_per_query": m.mean(_col(queries, "model_latency_ms")),
        "fast_path": m.fast_path_rates(_col(rounds, "rule"), predicted if routed else []),
    }


@dataclass
class Evaluation:
    """Runs of one query set in one or more modes, as tidy tables, with metrics per mode and route.

    ``queries``: one row per (mode, query); ``items``: one row per graded item; ``rounds``: one row
    per grading round. `metrics`, `summary` and `to_json` compute from these tables only, so a
    saved set of experiments can be re-scored with `from_experiments` without running anything.
    """

    dataset: EvalSet
    experiments: dict[str, Experiment]
    configs: dict[str, CragConfig]
    queries: pd.DataFrame = field(repr=False)
    items: pd.DataFrame = field(repr=False)
    rounds: pd.DataFrame = field(repr=False)

    @property
    def modes(self) -> list[str]:
        return list(self.experiments)

    @classmethod
    def from_experiments(cls, dataset: EvalSet, experiments: Mapping[str, Experiment],
                         configs: Mapping[str, CragConfig] | None = None) -> Evaluation:
        """Score recorded experiments (``{mode: Experiment}``) against ``dataset``'s labels."""
        import pandas as pd

        by_id = {q.id: q for q in dataset.queries}
        q_rows: list[dict[str, Any]] = []
        i_rows: list[dict[str, Any]] = []
        r_rows: list[dict[str, Any]] = []
        cfgs = dict(configs or {})
        for mode, exp in experiments.items():
            cfg = cfgs.setdefault(mode, exp.config)
            for record in exp.records:
                query = by_id.get(str(record["id"]))
                if query is None:
                    raise ValueError(f"experiment {mode!r} has query {record['id']!r}, which {dataset.name} lacks")
                routed = cfg.routing and record.get("mode") == "knowledge_base"
                q_rows.append(query_row(mode, record, query, routed))
                i_rows += item_rows(mode, record, query, cfg.relevance_floor)
                r_rows += round_rows(mode, record, query)
        item_cols = ["mode", "query_id", "route", "complexity", "item_id", "path", "line", "line_end", "tool",
                     "round", "score", "source", "kept", "gold"]
        round_cols = ["mode", "query_id", "route", "complexity", "iteration", "rule", "action", "capped", "items"]
        return cls(dataset, dict(experiments), cfgs, pd.DataFrame(q_rows),
                   pd.DataFrame(i_rows, columns=item_cols), pd.DataFrame(r_rows, columns=round_cols))

    def _routed(self, mode: str) -> bool:
        return bool(self.queries.loc[self.queries["mode"] == mode, "predicted"].notna().any())

    def metrics(self, mode: str | None = None, *, by: str | None = None) -> dict[str, Any]:
        """The metrics of one mode (default: the first), overall or ``by`` a grouping (`GROUPINGS`).

        ``question_kind`` groups HotpotQA's questions into ``bridge`` and ``comparison``
        (`crag_lab.eval.datasets.hotpot_kind`); other sets have no kinds.
        """
        mode = mode or self.modes[0]
        if mode not in self.experiments:
            raise ValueError(f"no run in mode {mode!r}; this evaluation has {self.modes}")
        q = self.queries[self.queries["mode"] == mode]
        i = self.items[self.items["mode"] == mode]
        r = self.rounds[self.rounds["mode"] == mode]
        floor, routed = self.configs[mode].relevance_floor, self._routed(mode)
        if by is None:
            return compute_metrics(q, i, r, floor=floor, routed=routed)
        if by not in GROUPINGS:
            raise ValueError(f"unknown grouping {by!r}; choose one of {list(GROUPINGS)}")
        out = {}
        for key in sorted({str(v) for v in q[by].tolist() if not _missing(v)}):
            ids = set(q.loc[q[by] == key, "id"])
            out[key] = compute_metrics(q[q[by] == key], i[i["query_id"].isin(ids)], r[r["query_id"].isin(ids)],
                                       floor=floor, routed=routed)
        return out

    def confusion(self, mode: str = "knowledge_base") -> dict[str, dict[str, int]] | None:
        """Labelled complexity x predicted complexity for a routed mode (None: no routing or labels)."""
        if mode not in self.experiments or not self._routed(mode) or not self.dataset.has_complexity:
            return None
        q = self.queries[self.queries["mode"] == mode]
        return m.confusion_matrix(_col(q, "predicted"), _col(q, "complexity"))

    def calibration(self, mode: str | None = None, bins: int = 10) -> list[m.CalibrationBin]:
        """Reliability bins of the grader scores of one mode."""
        mode = mode or self.modes[0]
        i = self.items[(self.items["mode"] == mode) & self.items["gold"].notna()]
        return m.calibration_bins([float(s) for s in i["score"]], [bool(g) for g in i["gold"]], bins)

    def loss_stages(self, mode: str | None = None) -> dict[str, int]:
        """How many answerable questions (with a gold answer and gold passages) end at each of `LOSS_STAGES`."""
        mode = mode or self.modes[0]
        stages = [s for s in _col(self.queries[self.queries["mode"] == mode], "loss_stage") if not _missing(s)]
        return {stage: stages.count(stage) for stage in m.LOSS_STAGES}

    def abstentions(self, mode: str | None = None) -> dict[str, dict[str, int]]:
        """Why the runs abstained (`metrics.ABSTAIN_CAUSE_ORDER`), counted apart for unanswerable questions (the
        abstentions wanted), answerable KB questions (false abstentions) and the rest (chitchat, unlabelled)."""
        mode = mode or self.modes[0]
        counts = {cause: {"unanswerable": 0, "answerable": 0, "other": 0} for cause in m.ABSTAIN_CAUSE_ORDER}
        for row in self.queries[self.queries["mode"] == mode].to_dict("records"):
            if not row["abstained"]:
                continue
            which = ("unanswerable" if _flag(row["abstained_unanswerable"])
                     else "answerable" if _flag(row["abstained_answerable"]) else "other")
            counts[row["abstain_cause"]][which] += 1
        return counts

    def summary(self, by: str | None = None) -> pd.DataFrame:
        """Headline metrics as a DataFrame: one row per mode (and per group when ``by`` is given)."""
        import pandas as pd

        rows = []
        for mode in self.modes:
            groups = {"all": self.metrics(mode)} if by is None else self.metrics(mode, by=by)
            for key, values in groups.items():
                flat = {k: v for k, v in values.items() if k != "fast_path"}
                rows.append({"mode": mode, **({by: key} if by else {}), **flat})
        return pd.DataFrame(rows)

    def to_json(self, command: str | None = None) -> dict[str, Any]:
        """JSON-ready results: the first mode's overall metrics at the top level, every mode under ``modes``."""
        modes: dict[str, dict[str, Any]] = {}
        for mode in self.modes:
            modes[mode] = {
                "config": self.configs[mode].model_dump(),
                "overall": self.metrics(mode),
                "by_route": self.metrics(mode, by="route"),
                "by_complexity": self.metrics(mode, by="complexity") if self.dataset.has_complexity else {},
                "by_question_kind": self.metrics(mode, by="question_kind") if self.dataset.has_kinds else {},
                "routing_confusion": self.confusion(mode),
                "loss_stages": self.loss_stages(mode),
                "abstentions": self.abstentions(mode),
            }
        first = self.modes[0]
        return {
            "dataset": self.dataset.name,
            "source": str(self.dataset.source),
            "kb": str(self.dataset.kb) if self.dataset.kb else None,
            "limit": self.dataset.limit,
            "seed": self.dataset.seed,
            "command": command,
            "mode": first,
            **modes[first]["overall"],
            "modes": modes,
        }

    def to_markdown(self, command: str | None = None) -> str:
        """A Markdown report: headline table by mode, then per-route tables and the routing confusion."""
        return render_markdown(self, command=command)


def evaluate(
    lab: Lab,
    dataset: EvalSet,
    modes: Sequence[str] = ("knowledge_base",),
    *,
    config: CragConfig | None = None,
    shadow_grading: bool = True,
    progress: bool = False,
    concurrency: int = 1,
    journal_dir: str | Path | None = None,
    executor: Executor | str | None = None,
    keep_journals: bool = False,
) -> Evaluation:
    """Run ``dataset`` through ``lab`` once per mode and score every run against the labels.

    Parameters
    ----------
    lab
        The `crag_lab.Lab` to run (its knowledge base should be the one ``dataset`` is labelled on).
    dataset
        A labelled query set (`crag_lab.eval.load_dataset`).
    modes
        Evaluation modes, each one `Lab.run` of the whole set: any of `EVAL_MODES`
        (``knowledge_base``, ``normal``, ``naive_rag``, ``per_item_grading``).
    config
        The base config, default the lab's; ``per_item_grading`` derives its own from it
        (`mode_setup`).
    shadow_grading
        Record the grader's scores of rounds the pre-filter skipped (see `Lab.run`), so that the
        grader metrics see every item.
    progress
        Print each mode as it starts and show a progress bar.
    concurrency
        Questions in flight at once (`Lab.run`).
    journal_dir
        Where each mode's run journal lives while it runs (``<dataset>-<mode>.journal.jsonl``,
        `crag_lab.journal`): an interrupted evaluation started again asks only the questions it
        lacks. The journals are removed once every mode has finished (`journal_path`).
    executor
        None answers here; ``"ray"``, a Ray address or a `crag_lab.ray_executor.RayExecutor`
        shards the questions over Ray workers (`Lab.run`), with the same records in the same
        order. One actor pool serves every mode; one made here from a string is stopped at the end.
    keep_journals
        Leave the journals in ``journal_dir`` after the last mode, for a caller that removes them
        only once the results are safely written (``crag-lab eval`` does): until then, the same
        call asks nothing and only returns the results again.

    Two questions of ``dataset`` with one id are refused (`crag_lab.errors.DuplicateIdError`)
    before any question is asked.
    """
    check_unique_ids([q.id for q in dataset.queries], source=str(dataset.source))
    base = config or lab.config
    experiments: dict[str, Experiment] = {}
    configs: dict[str, CragConfig] = {}
    rows = dataset.rows()
    owned = None
    if isinstance(executor, str):
        from crag_lab.ray_executor import resolve_executor

        executor = owned = resolve_executor(executor)
    try:
        for mode in dict.fromkeys(modes):
            graph_mode, cfg = mode_setup(mode, base)
            if progress:
                print(f"{dataset.name}: {mode} ({len(rows)} queries)", flush=True)
            journal = journal_path(dataset, mode, journal_dir) if journal_dir is not None else None
            exp = lab.run(rows, config=cfg, mode=graph_mode, shadow_grading=shadow_grading, progress=progress,
                          concurrency=concurrency, journal=journal, executor=executor)
            exp.meta["eval_mode"] = mode
            experiments[mode], configs[mode] = exp, cfg
    finally:
        close = getattr(owned, "close", None)
        if close is not None:
            close()
    evaluation = Evaluation.from_experiments(dataset, experiments, configs)
    if journal_dir is not None and not keep_journals:
        for mode in experiments:
            journal_path(dataset, mode, journal_dir).unlink(missing_ok=True)
    return evaluation


def journal_path(dataset: EvalSet, mode: str, journal_dir: str | Path) -> Path:
    """Where `evaluate` journals ``mode`` of ``dataset``: ``<journal_dir>/<dataset>-<mode>.journal.jsonl``."""
    return Path(journal_dir) / f"{dataset.name}-{mode}.journal.jsonl"
