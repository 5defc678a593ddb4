"""The Markdown report of an `Evaluation`: plain pipe tables, no extra dependency."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from crag_lab.eval.datasets import EvalSet
from crag_lab.eval.metrics import ABSTAIN_CAUSE_ORDER, LOSS_STAGES


class Scored(Protocol):
    """What the report reads of an `crag_lab.eval.Evaluation`: its dataset and the metrics it computes."""

    dataset: EvalSet

    @property
    def modes(self) -> list[str]: ...

    def metrics(self, mode: str | None = None, *, by: str | None = None) -> dict[str, Any]: ...

    def confusion(self, mode: str = "knowledge_base") -> dict[str, dict[str, int]] | None: ...

    def loss_stages(self, mode: str | None = None) -> dict[str, int]: ...

    def abstentions(self, mode: str | None = None) -> dict[str, dict[str, int]]: ...

REPORT_ROWS: tuple[tuple[str, str], ...] = (
    ("n_queries", "queries"),
    ("grader_auroc", "grader AUROC (gold vs other graded items)"),
    ("floor_precision", "relevance-floor precision"),
    ("floor_recall", "relevance-floor recall"),
    ("grader_ece", "grader ECE (10 bins)"),
    ("graded_items", "graded items (gold)"),
    ("routing_accuracy", "complexity-routing accuracy"),
    ("chitchat_recall", "chitchat recall"),
    ("retrieval_recall", "retrieval recall (gold found by any tool)"),
    ("answer_containment", "answer containment (answerable)"),
    ("exact_match", "exact match (answerable)"),
    ("answer_f1", "answer token F1 (answerable)"),
    ("citation_precision", "citation precision"),
    ("citation_recall", "citation recall"),
    ("abstention_rate", "abstention on unanswerable"),
    ("false_abstention_rate", "false abstention on answerable"),
    ("calls_per_query", "model calls / query"),
    ("grader_calls_per_query", "grader calls / query"),
    ("tokens_per_query", "tokens / query"),
    ("latency_ms_per_query", "latency ms / query (wall)"),
)
ROUTE_COLUMNS: tuple[str, ...] = ("n_queries", "grader_auroc", "floor_precision", "floor_recall",
                                  "answer_containment", "citation_precision", "citation_recall", "abstention_rate",
                                  "false_abstention_rate", "calls_per_query", "tokens_per_query")
_COUNTS = frozenset({"n_queries", "graded_items", "gold_items"})
_ROUND0 = frozenset({"tokens_per_query", "latency_ms_per_query", "model_latency_ms_per_query"})


def fmt(value: Any, key: str = "") -> str:
    """A table cell: ``—`` for None, integers plain, tokens and latency rounded, rates to 3 places.

    >>> fmt(None), fmt(0.12345), fmt(12, "n_queries"), fmt(1234.5, "tokens_per_query")
    ('—', '0.123', '12', '1234')
    """
    if value is None:
        return "—"
    if key in _COUNTS or isinstance(value, bool):
        return str(value)
    if key in _ROUND0:
        return f"{value:.0f}"
    if isinstance(value, float):
        return f"{value:.3f}" if key != "calls_per_query" and key != "grader_calls_per_query" else f"{value:.2f}"
    return str(value)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown pipe table.

    >>> print(table(["a", "b"], [["1", "2"]]))
    | a | b |
    |---|---|
    | 1 | 2 |
    """
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(metrics: Mapping[str, Any], key: str) -> str:
    if key == "graded_items":
        return f"{metrics['graded_items']} ({metrics['gold_items']})"
    return fmt(metrics.get(key), key)


def render_markdown(ev: Scored, *, command: str | None = None, title: str | None = None) -> str:
    """The report: headline metrics by mode, per-route tables, fast paths and the routing confusion."""
    ds = ev.dataset
    modes = ev.modes
    overall = {mode: ev.metrics(mode) for mode in modes}
    out = [f"### {title or ds.name}", ""]
    scope = f"{len(ds)} queries" + (f" (sample of {ds.limit}, seed {ds.seed})" if ds.limit else "")
    out.append(f"Dataset `{ds.source}`, {scope}; knowledge base `{ds.kb}`.")
    if command:
        out += ["", "```", command, "```"]
    out += ["", table(["metric", *modes], [[label, *(_cell(overall[mode], key) for mode in modes)]
                                          for key, label in REPORT_ROWS]), ""]
    fast_rows = []
    for rule in ("chitchat", "simple", "read_file", "few_context", "high_vector_score"):
        fast_rows.append([rule, *(fmt(overall[mode]["fast_path"].get(rule)) for mode in modes)])
    out += ["Fast-path hit rate (chitchat/simple: share of questions; pre-filter rules: share of grading "
            "rounds):", "", table(["fast path", *modes], fast_rows), ""]
    for mode in modes:
        by_route = ev.metrics(mode, by="route")
        if len(by_route) > 1:
            out += [f"By route, `{mode}`:", "",
                    table(["route", *ROUTE_COLUMNS],
                          [[route, *(fmt(values.get(k), k) for k in ROUTE_COLUMNS)]
                           for route, values in by_route.items()]),
                    ""]
    if ds.has_complexity:
        for mode in modes:
            by_label = ev.metrics(mode, by="complexity")
            out += [f"By labelled complexity, `{mode}`:", "",
                    table(["complexity", *ROUTE_COLUMNS],
                          [[label, *(fmt(values.get(k), k) for k in ROUTE_COLUMNS)]
                           for label, values in by_label.items()]), ""]
    if ds.has_kinds:
        kind_columns = ("n_queries", "answer_containment", "exact_match", "answer_f1", "citation_precision",
                        "citation_recall", "calls_per_query")
        rows = [[kind, mode, *(fmt(values.get(k), k) for k in kind_columns)]
                for mode in modes for kind, values in ev.metrics(mode, by="question_kind").items()]
        out += ["By question kind (bridge: the second passage is found through the first; comparison: two "
                "things compared):", "", table(["kind", "mode", *kind_columns], sorted(rows)), ""]
    losses = {mode: ev.loss_stages(mode) for mode in modes}
    if any(sum(v.values()) for v in losses.values()):
        out += ["Where answerable questions are lost (the first stage that missed; questions with a gold answer "
                "and gold passages):", "",
                table(["stage", *modes], [[stage, *(str(losses[mode][stage]) for mode in modes)]
                                          for stage in LOSS_STAGES]), ""]
    why = {mode: ev.abstentions(mode) for mode in modes}
    said = [cause for cause in ABSTAIN_CAUSE_ORDER if any(why[mode][cause]["unanswerable"] + why[mode][cause]["answerable"]
                                                        for mode in modes)]
    if said:
        out += ["Why the runs abstained (`Evaluation.abstentions`; per mode, abstentions on unanswerable / on "
                "answerable questions, the latter false abstentions; `no_evidence`: nothing reached the synthesizer):",
                "", table(["cause", *modes], [[cause, *(f"{why[mode][cause]['unanswerable']} / "
                                                        f"{why[mode][cause]['answerable']}" for mode in modes)]
                                              for cause in said]), ""]
    confusion = ev.confusion("knowledge_base")
    if confusion:
        columns = list(next(iter(confusion.values())))
        out += ["Routing confusion, `knowledge_base` (rows: label, columns: predicted):", "",
                table(["label", *columns],
                      [[label, *(str(row[c]) for c in columns)] for label, row in confusion.items()]),
                ""]
    return "\n".join(out).rstrip() + "\n"
