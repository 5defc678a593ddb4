"""Where should the thresholds be? A cost–quality frontier from a recorded run, and honest tuning.

`frontier` replays a labelled experiment at every setting of a grid (relevance_floor ×
generate_threshold × vector_score_threshold, optionally auto_approve_max_items, max_iterations,
aggregator) at once, without a model call, and tabulates per setting:

- cost: model calls and tokens per question, the recorded ones plus replay's ``calls_delta`` and
  ``tokens_delta``; a lower bound when some query needs a re-run (``needs_rerun`` counts them).
  Calls are exact otherwise; tokens count the recorded synthesize prompt, so a query that now stops
  at an earlier round (less evidence to synthesize from) is counted a little high;
- evidence quality on the gold labels, over the rounds replay visits: gold items kept and dropped,
  ``gold_recall`` (gold kept / gold graded), ``gold_precision`` (gold kept / labelled items kept),
  ``gold_f1`` (the default metric);
- route mix: the first grading action of complex queries, and outcomes (GENERATE, capped);
- answers, only where they are known without a re-run: a query whose every replayed decision
  (rule, action, items kept) equals the recorded one keeps its recorded answer, so its answer
  containment and citation precision carry over (``answers_known`` counts those queries; the
  others are not guessed).

`Frontier.pareto` is the non-dominated set: fewest calls per question for the most of the chosen
metric. `tune` picks a setting by k-fold cross-validation over questions and reports the quality
of that procedure on questions it was not fitted on, beside the in-sample quality.

>>> from crag_lab.replay import Experiment  # doctest: +SKIP
>>> f = frontier(Experiment.load("notebooks/recordings/kb_knowledge_base.jsonl"))  # doctest: +SKIP
>>> f.pareto()  # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from crag_lab import decisions
from crag_lab.config import CragConfig
from crag_lab.records import QueryRecord
from crag_lab.replay._frontier import FrontierRounds, Settings, item_flags

if TYPE_CHECKING:
    import pandas as pd

METRICS = ("gold_f1", "gold_recall", "gold_precision", "answer_containment", "citation_precision")
"""Quality metrics `Frontier.pareto` and `tune` can maximise (the answer metrics cover known answers only)."""
PARAMS = ("relevance_floor", "generate_threshold", "vector_score_threshold", "auto_approve_max_items",
          "max_iterations", "aggregator")
DEFAULT_FLOORS = tuple(round(x, 2) for x in np.arange(0.0, 0.701, 0.05))
DEFAULT_GENERATE = tuple(round(x, 2) for x in np.arange(0.3, 1.001, 0.05))
DEFAULT_VECTOR = tuple(round(x, 2) for x in np.arange(0.6, 1.001, 0.05))


class Recorded(Protocol):
    """What the frontier reads of an `Experiment`."""

    config: CragConfig
    records: list[QueryRecord]


def grid(config: CragConfig, *, relevance_floor: Sequence[float] = DEFAULT_FLOORS,
         generate_threshold: Sequence[float] = DEFAULT_GENERATE, vector_score_threshold: Sequence[float] = DEFAULT_VECTOR,
         auto_approve_max_items: Sequence[int] | None = None, max_iterations: Sequence[int] | None = None,
         aggregator: Sequence[str] | None = None) -> Settings:
    """Every combination (None: the recorded value), less those with the floor above the generate threshold."""
    axes: dict[str, list[Any]] = {
        "relevance_floor": [float(v) for v in relevance_floor],
        "generate_threshold": [float(v) for v in generate_threshold],
        "vector_score_threshold": [float(v) for v in vector_score_threshold],
        "auto_approve_max_items": [int(v) for v in auto_approve_max_items or [config.auto_approve_max_items]],
        "max_iterations": [int(v) for v in max_iterations or [config.max_iterations]],
        "aggregator": list(aggregator or [config.aggregator]),
    }
    for name, values in axes.items():
        if not values:
            raise ValueError(f"the grid of {name} is empty; give at least one value")
    for name in ("relevance_floor", "generate_threshold"):
        if bad := [v for v in axes[name] if not 0.0 <= v <= 1.0]:
            raise ValueError(f"{name} must lie in [0, 1], got {bad[0]}")
    if bad := [v for v in axes["vector_score_threshold"] if not -1.0 <= v <= 1.0]:
        raise ValueError(f"vector_score_threshold must lie in [-1, 1], got {bad[0]}")
    if bad := [v for v in axes["auto_approve_max_items"] if v < 0]:
        raise ValueError(f"auto_approve_max_items must be >= 0, got {bad[0]}")
    if bad := [v for v in axes["max_iterations"] if v < 1]:
        raise ValueError(f"max_iterations must be >= 1, got {bad[0]}")
    if bad := [v for v in axes["aggregator"] if v not in decisions.AGGREGATORS]:
        raise ValueError(f"unknown aggregator {bad[0]!r}; choose one of {sorted(decisions.AGGREGATORS)}")
    mesh = np.meshgrid(*(np.arange(len(v)) for v in axes.values()), indexing="ij")
    cols = {name: np.asarray(values, dtype=object if name == "aggregator" else None)[idx.ravel()]
            for (name, values), idx in zip(axes.items(), mesh, strict=True)}
    ok = cols["relevance_floor"] <= cols["generate_threshold"]
    if not ok.any():
        raise ValueError("every relevance_floor of the grid is above every generate_threshold: no valid setting")
    return Settings(**{name: col[ok] for name, col in cols.items()})


@dataclass
class Frontier:
    """Per setting and question, what replay knows; `table` and `pareto` summarise it.

    ``per_query`` holds arrays of shape (settings, questions) (see `crag_lab.replay._frontier.FIELDS`).
    """

    settings: Settings
    ids: list[str]
    per_query: dict[str, np.ndarray]
    recorded_calls: np.ndarray
    recorded_tokens: np.ndarray
    contained: np.ndarray  # per question: 1, 0, or NaN (no answer string to look for)
    citation_precision: np.ndarray  # per question, NaN when nothing is cited or no gold
    metric: str = "gold_f1"
    _table: pd.DataFrame | None = field(default=None, init=False, repr=False)

    def __len__(self) -> int:
        return len(self.settings)

    def setting(self, s: int) -> dict[str, Any]:
        st = self.settings
        return {"relevance_floor": float(st.relevance_floor[s]), "generate_threshold": float(st.generate_threshold[s]),
                "vector_score_threshold": float(st.vector_score_threshold[s]),
                "auto_approve_max_items": int(st.auto_approve_max_items[s]),
                "max_iterations": int(st.max_iterations[s]), "aggregator": str(st.aggregator[s])}

    def scores(self, questions: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Every column of `table` as arrays over settings, on these question indices (default all)."""
        q = np.arange(len(self.ids)) if questions is None else np.asarray(questions, dtype=np.int64)
        n = max(len(q), 1)
        pq = {k: v[:, q] for k, v in self.per_query.items()}
        total = {k: v.sum(1) for k, v in pq.items() if k != "first_action"}
        known = pq["known"].astype(bool)
        with np.errstate(invalid="ignore", divide="ignore"):
            recall = total["gold_kept"] / (total["gold_kept"] + total["gold_dropped"])
            precision = total["gold_kept"] / total["labelled_kept"]
            f1 = 2 * precision * recall / (precision + recall)
            f1 = np.where((precision == 0) & (recall == 0), 0.0, f1)
        out = {
            "calls_per_question": (self.recorded_calls[q].sum() + total["calls"]) / n,
            "tokens_per_question": (self.recorded_tokens[q].sum() + total["tokens"]) / n,
            "needs_rerun": total["needs_rerun"],
            "items_kept": total["kept"], "items_dropped": total["dropped"],
            "gold_kept": total["gold_kept"], "gold_dropped": total["gold_dropped"],
            "gold_recall": recall, "gold_precision": precision, "gold_f1": f1,
            "answers_known": total["known"],
            "answer_containment": _known_mean(self.contained[q], known),
            "citation_precision": _known_mean(self.citation_precision[q], known),
            "outcome_GENERATE": total["generate"], "outcome_capped": total["capped"],
        }
        for a, name in enumerate(("GENERATE", "REFINE", "RE_RETRIEVE")):
            out[f"first_{name}"] = (pq["first_action"] == a).sum(1)
        return out

    def table(self) -> pd.DataFrame:
        """One row per setting: its parameters, cost, evidence quality, route mix and known answers."""
        import pandas as pd

        if self._table is None:
            st = self.settings
            params = {name: getattr(st, name) for name in PARAMS}
            self._table = pd.DataFrame({**params, **self.scores()})
        return self._table

    def pareto(self, metric: str | None = None) -> pd.DataFrame:
        """The settings no other beats on both fewer calls per question and more ``metric``.

        One setting per distinct (calls, metric) point (the first in grid order), by calls ascending.
        Settings whose metric is undefined (NaN) are left out.
        """
        metric = _check_metric(metric or self.metric)
        table = self.table()
        return table.iloc[pareto_indices(table["calls_per_question"].to_numpy(), table[metric].to_numpy())]


def pareto_indices(cost: np.ndarray, quality: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated points (minimise cost, maximise quality), cost ascending.

    >>> pareto_indices(np.array([1.0, 2.0, 2.0, 3.0]), np.array([0.5, 0.4, 0.7, 0.7])).tolist()
    [0, 2]
    """
    ok = np.flatnonzero(~np.isnan(quality))
    order = ok[np.lexsort((ok, -quality[ok], cost[ok]))]
    keep, best = [], -math.inf
    for i in order.tolist():
        if quality[i] > best:
            keep.append(i)
            best = quality[i]
    return np.asarray(keep, dtype=np.int64)


def _known_mean(values: np.ndarray, known: np.ndarray) -> np.ndarray:
    use = known & ~np.isnan(values)[None, :]
    n = use.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, np.where(use, values[None, :], 0.0).sum(1) / n, np.nan)


def _check_metric(metric: str) -> str:
    if metric not in METRICS:
        raise ValueError(f"unknown quality metric {metric!r}; choose one of {list(METRICS)}")
    return metric


def _answer_scores(record: QueryRecord, labels: Mapping[str, Any]) -> tuple[float, float]:
    """(answer contained, citation precision) of the recorded answer; NaN where the labels cannot say."""
    from crag_lab.eval import metrics as m

    answer = str(record.get("answer", ""))
    contained = m.answer_contained(answer, labels.get("answers") or []) if labels.get("answerable") else None
    gold = [m.GoldRef.parse(str(g)) for g in labels.get("gold") or []]
    cited = [(c.get("path"), c.get("line"), c.get("line_end")) for c in record.get("citations", [])]
    precision = m.citation_precision_recall(cited, gold)[0] if gold else None
    return (math.nan if contained is None else float(contained)), (math.nan if precision is None else precision)


def frontier(experiment: Recorded, *, labels: Mapping[str, Mapping[str, Any]] | None = None,
             metric: str = "gold_f1", executor: Any = None, **axes: Any) -> Frontier:
    """Replay ``experiment`` at every setting of a grid and measure each against the gold labels.

    ``axes`` are the grid (`grid`): ``relevance_floor``, ``generate_threshold``,
    ``vector_score_threshold`` (default grids), ``auto_approve_max_items``, ``max_iterations``,
    ``aggregator`` (default: the recorded value). ``labels`` maps a question id to its labels
    (``gold``, ``answers``, ``answerable``, ``complexity``; `crag_lab.eval.EvalQuery.row`); by
    default each record's own ``labels`` (written by ``crag-lab eval --save-runs``).

    ``executor`` (None: this process) shards the settings over Ray workers: ``"ray"``, a Ray address
    or a `crag_lab.ray_executor.RayExecutor` (see its ``replay_settings``). The numbers are the
    same as a local sweep's, entry for entry; only big grids over many questions gain from it.

    Raises ``ValueError`` when no question is labelled with gold locations, or a record's id has no
    labels in ``labels``.
    """
    _check_metric(metric)
    records = list(experiment.records)
    ids = [str(r.get("id")) for r in records]
    if labels is None:
        per = [dict(r.get("labels") or {}) for r in records]
    else:
        missing = [i for i in ids if i not in labels]
        if missing:
            raise ValueError(f"no labels for {len(missing)} recorded question(s), e.g. {missing[0]!r}; "
                             "the dataset must hold every id of the recording")
        per = [dict(labels[i]) for i in ids]
    if not any("gold" in lab for lab in per):
        raise ValueError("the recording has no gold labels (record a labelled set with crag-lab eval --save-runs, "
                         "or give the labelled dataset)")
    settings = grid(experiment.config, **axes)
    rounds = FrontierRounds(experiment.config, records, [item_flags(r, lab) for r, lab in zip(records, per, strict=True)])
    answers = np.asarray([_answer_scores(r, lab) for r, lab in zip(records, per, strict=True)], dtype=np.float64)
    answers = answers.reshape(len(records), 2)
    usage = [r.get("usage", []) for r in records]
    if executor is None:
        per_query = rounds.replay(settings)
    else:
        from crag_lab.ray_executor import sweep_settings

        per_query = sweep_settings(executor, rounds, settings)
    return Frontier(
        settings, ids, per_query,
        recorded_calls=np.asarray([len(u) for u in usage], dtype=np.int64),
        recorded_tokens=np.asarray([sum(x["prompt_tokens"] + x["completion_tokens"] for x in u) for u in usage],
                                   dtype=np.int64),
        contained=answers[:, 0], citation_precision=answers[:, 1], metric=metric)
