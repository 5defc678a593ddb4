"""Thresholds with a guarantee: Learn-then-Test over the frontier's grid (Angelopoulos et al., 2021).

`frontier` and `tune` say which setting scored best on the recorded questions. `risk_controlled`
answers the next question: which settings keep a chosen risk at or below ``alpha`` on *new*
questions, with probability at least ``1 - delta`` over the draw of the recorded (calibration)
questions. The procedure, its assumptions and how replay's unknowns are counted are in
``docs/dev/guarantee.md``; in short:

1. Each question ``i`` and setting ``s`` get a loss ``L_i(s)`` in [0, 1] (`LOSSES`): the share of
   its gold items the setting drops, whether it abstains although answerable, or its model calls
   divided by a stated cap. Where replay cannot know the loss (the run leaves the recording,
   ``needs_rerun``, or the answer would change), it counts as the worst value, 1 (or, with
   ``needs_rerun="exclude"``, the question is left out of that setting's test, with a warning).
2. For every setting, the null hypothesis "its risk ``E[L(s)]`` exceeds ``alpha``" gets a valid
   p-value from the mean loss over the ``n`` calibration questions: Hoeffding–Bentkus (`hb_p_value`,
   default) or Hoeffding (`hoeffding_p_value`).
3. The family-wise error over the grid is controlled at ``delta``: by fixed-sequence testing along an
   order fixed before the data is seen (default: the safest end of the grid first, `DEFAULT_ORDER`),
   or by Bonferroni (every p-value against ``delta / settings``). Every rejected hypothesis is a
   setting whose risk is at most ``alpha``, all of them at once with probability ``1 - delta``.
4. Among those settings, the pick is the one with the most ``metric`` (ties to fewer calls), as in
   `tune`; any choice among them keeps the guarantee.

>>> from crag_lab.replay import Experiment  # doctest: +SKIP
>>> exp = Experiment.load("notebooks/recordings/kb_knowledge_base.jsonl")  # doctest: +SKIP
>>> g = exp.tune(guarantee="gold_dropped<=0.10", delta=0.1)  # doctest: +SKIP
>>> g.setting, g.n, int(g.valid.sum())  # doctest: +SKIP
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
from scipy.special import rel_entr
from scipy.stats import binom

from crag_lab.records import QueryRecord
from crag_lab.replay.frontier import PARAMS, Frontier, Recorded, _check_metric, frontier

if TYPE_CHECKING:
    import pandas as pd

LOSSES = ("gold_dropped", "gold_dropped_first", "false_abstention", "calls")
"""The risks a guarantee can bound (`Guarantee.parse`):

- ``gold_dropped``: per question with a gold item among its graded items, the share of the gold
  items graded in the rounds replay visits that the setting drops (unknown where the run leaves
  the recording: its later rounds are not recorded);
- ``gold_dropped_first``: the same over the question's first grading round only, per question with
  a gold item in it. That round's items do not depend on the thresholds, so replay knows this loss
  at every setting (except where the pre-filter skipped the round and no shadow grades were kept);
- ``false_abstention``: per answerable (non-chitchat) question, 1 when the run abstains;
- ``calls``: per question, the model calls of the run divided by ``calls_cap`` (clipped at 1).
"""
Procedure = Literal["fixed_sequence", "bonferroni"]
PROCEDURES: tuple[Procedure, ...] = ("fixed_sequence", "bonferroni")
PValue = Literal["hb", "hoeffding"]
P_VALUES: tuple[PValue, ...] = ("hb", "hoeffding")
Unknown = Literal["worst", "exclude"]

DEFAULT_ORDER: dict[str, tuple[str, ...]] = {
    "gold_dropped": ("distance", "relevance_floor"),
    "gold_dropped_first": ("relevance_floor", "-vector_score_threshold", "generate_threshold"),
    "false_abstention": ("distance", "relevance_floor"),
    "calls": ("generate_threshold", "vector_score_threshold", "relevance_floor"),
}
"""The fixed-sequence order per loss, fixed before any data is seen. For the evidence and answer
losses: the recorded setting first (the one whose every loss replay knows), then outward by distance
from it (the sum of the absolute differences of the parameters), ties to the lower floor (it drops
fewer items). For the first round's gold: the floor from 0 up (a lower floor drops fewer items; the
loss is known everywhere). For calls: the cheapest end of the grid first (a lower generate threshold answers
sooner; a lower vector-score threshold skips the grader more often). An order that suits the data
badly costs power (fewer settings guaranteed), never validity."""


def calls_bound(max_iterations: int) -> int:
    """The most model calls a run makes under batch grading: analyze, then per round plan and grade
    (and analyze again before a RE_RETRIEVE round), then synthesize: ``3 * max_iterations + 1``.

    >>> calls_bound(3)
    10
    """
    return 3 * int(max_iterations) + 1


@dataclass(frozen=True)
class Guarantee:
    """One bound: ``loss <= alpha`` (``alpha`` in the loss's own unit: calls per question for ``calls``).

    >>> Guarantee.parse("gold_dropped<=0.10")
    Guarantee(loss='gold_dropped', alpha=0.1)
    >>> Guarantee.parse("calls <= 3.5")
    Guarantee(loss='calls', alpha=3.5)
    """

    loss: str
    alpha: float

    @classmethod
    def parse(cls, text: str | Guarantee) -> Guarantee:
        if isinstance(text, Guarantee):
            return text
        m = re.fullmatch(r"\s*([a-z_]+)\s*<=\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*", str(text))
        if not m:
            raise ValueError(f"a guarantee reads LOSS<=VALUE, e.g. 'gold_dropped<=0.10'; got {text!r}; "
                             f"losses: {list(LOSSES)}")
        loss, alpha = m.group(1), float(m.group(2))
        if loss not in LOSSES:
            raise ValueError(f"unknown loss {loss!r} in guarantee {text!r}; choose one of {list(LOSSES)}")
        if loss != "calls" and not 0.0 < alpha < 1.0:
            raise ValueError(f"the bound of {loss} is a rate and must lie in (0, 1), got {alpha}")
        if loss == "calls" and alpha <= 0:
            raise ValueError(f"the bound of calls is calls per question and must be > 0, got {alpha}")
        return cls(loss, alpha)


def parse_guarantees(guarantee: str | Guarantee | Sequence[str | Guarantee]) -> list[Guarantee]:
    """One or several bounds: a `Guarantee`, ``"a<=x"``, ``"a<=x, b<=y"`` or a list of them."""
    items = guarantee.split(",") if isinstance(guarantee, str) else (
        [guarantee] if isinstance(guarantee, Guarantee) else list(guarantee))
    out = [Guarantee.parse(g) for g in items]
    if not out:
        raise ValueError("give at least one guarantee, e.g. 'gold_dropped<=0.10'")
    if len({g.loss for g in out}) < len(out):
        raise ValueError(f"each loss may be bounded once; got {[g.loss for g in out]}")
    return out


# ---- p-values ---------------------------------------------------------------------------------

def hoeffding_p_value(risk: np.ndarray | float, n: np.ndarray | int, alpha: float) -> np.ndarray:
    """Hoeffding's p-value for "risk > alpha" from a mean ``risk`` of ``n`` losses in [0, 1].

    >>> round(float(hoeffding_p_value(0.0, 100, 0.1)), 4)
    0.1353
    """
    risk, n = np.asarray(risk, dtype=np.float64), np.asarray(n, dtype=np.float64)
    return np.minimum(1.0, np.exp(-2.0 * n * np.clip(alpha - risk, 0.0, None) ** 2))


def hb_p_value(risk: np.ndarray | float, n: np.ndarray | int, alpha: float) -> np.ndarray:
    """The Hoeffding–Bentkus p-value (Bates et al. 2021, eq. 4; Angelopoulos et al. 2021, LTT) for
    "risk > alpha" from the mean ``risk`` of ``n`` losses in [0, 1]:
    ``min(exp(-n h1(min(risk, alpha), alpha)), e * P[Binomial(n, alpha) <= ceil(n risk)])``,
    with ``h1(a, b) = a log(a/b) + (1-a) log((1-a)/(1-b))``. ``n == 0`` gives 1.

    >>> round(float(hb_p_value(0.0, 100, 0.1)), 6)  # 0.9 ** 100: no loss in 100 questions
    2.7e-05
    >>> float(hb_p_value(0.2, 100, 0.1))
    1.0
    """
    risk, n = np.broadcast_arrays(np.asarray(risk, dtype=np.float64), np.asarray(n, dtype=np.float64))
    a = np.minimum(risk, alpha)
    h1 = rel_entr(a, alpha) + rel_entr(1.0 - a, 1.0 - alpha)
    hoeffding = np.exp(-n * h1)
    bentkus = math.e * binom.cdf(np.ceil(n * risk - 1e-9), n, alpha)
    p = np.minimum(1.0, np.minimum(hoeffding, bentkus))
    return np.where(n > 0, p, 1.0)


P_VALUE_FUNCTIONS = {"hb": hb_p_value, "hoeffding": hoeffding_p_value}


def family_wise(p: np.ndarray, delta: float, procedure: Procedure, order: np.ndarray) -> np.ndarray:
    """Which hypotheses are rejected with family-wise error at most ``delta``.

    ``fixed_sequence`` tests along ``order`` at level ``delta`` and stops at the first p-value above
    it; ``bonferroni`` rejects every p-value at most ``delta / len(p)`` (``order`` unused).

    >>> family_wise(np.array([0.01, 0.5, 0.02]), 0.1, "fixed_sequence", np.array([0, 1, 2])).tolist()
    [True, False, False]
    >>> family_wise(np.array([0.01, 0.5, 0.02]), 0.1, "bonferroni", np.array([0, 1, 2])).tolist()
    [True, False, True]
    """
    rejected = np.zeros(len(p), dtype=bool)
    if procedure == "bonferroni":
        return p <= delta / max(len(p), 1)
    if procedure != "fixed_sequence":
        raise ValueError(f"unknown procedure {procedure!r}; choose one of {list(PROCEDURES)}")
    for s in order.tolist():
        if p[s] > delta:
            break
        rejected[s] = True
    return rejected


# ---- per-question losses ------------------------------------------------------------------------

@dataclass
class QuestionLosses:
    """One loss per (setting, question) in [0, 1]; ``eligible`` questions are the ones it is defined on;
    ``unknown`` marks where replay cannot know it (already counted as 1); ``scale`` turns 1 into the
    loss's own unit (calls: the cap)."""

    name: str
    values: np.ndarray
    eligible: np.ndarray
    unknown: np.ndarray
    scale: float = 1.0


def question_losses(experiment: Recorded, front: Frontier, name: str, *,
                    labels: Mapping[str, Mapping[str, Any]] | None = None, calls_cap: int | None = None) -> QuestionLosses:
    """The per-question loss ``name`` (one of `LOSSES`) at every setting of ``front``."""
    from crag_lab.citations import is_abstention

    pq = front.per_query
    rerun = pq["needs_rerun"] > 0
    if name == "gold_dropped":
        graded = pq["gold_kept"] + pq["gold_dropped"]
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(graded > 0, pq["gold_dropped"] / np.maximum(graded, 1), 0.0)
        return QuestionLosses(name, np.where(rerun, 1.0, share), graded.max(axis=0) > 0, rerun)
    if name == "gold_dropped_first":
        from crag_lab.replay._frontier import FrontierRounds, item_flags

        records = list(experiment.records)
        first: list[QueryRecord] = [cast(QueryRecord, {**r, "rounds": list(r.get("rounds", []))[:1]}) for r in records]
        per = [dict((labels or {}).get(str(r.get("id")), r.get("labels") or {})) for r in records]
        flags = [item_flags(r, lab) for r, lab in zip(first, per, strict=True)]
        one = FrontierRounds(experiment.config, first, flags).replay(front.settings)
        graded = one["gold_kept"] + one["gold_dropped"]
        has_items = np.asarray([bool(r["rounds"] and r["rounds"][0]["items"]) for r in first])
        unknown = has_items[None, :] & (one["kept"] + one["dropped"] == 0)  # skipped by a rule, no shadow grades
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(graded > 0, one["gold_dropped"] / np.maximum(graded, 1), 0.0)
        eligible = np.asarray([any(g for g, _ in f[0]) if f else False for f in flags])
        return QuestionLosses(name, np.where(unknown, 1.0, share), eligible, unknown)
    if name == "calls":
        cap = calls_cap or calls_bound(int(max(front.settings.max_iterations.max(), experiment.config.max_iterations)))
        calls = front.recorded_calls[None, :] + pq["calls"]
        return QuestionLosses(name, np.where(rerun, 1.0, np.minimum(calls / cap, 1.0)),
                              np.ones(len(front.ids), dtype=bool), rerun, float(cap))
    if name == "false_abstention":
        records = list(experiment.records)
        per = [dict((labels or {}).get(str(r.get("id")), r.get("labels") or {})) for r in records]
        eligible = np.asarray([lab.get("answerable") is True and lab.get("complexity") != "chitchat" for lab in per])
        abstained = np.asarray([is_abstention(str(r.get("answer", ""))) for r in records], dtype=np.float64)
        unknown = rerun | (pq["known"] == 0)
        return QuestionLosses(name, np.where(unknown, 1.0, abstained[None, :]), eligible, unknown)
    raise ValueError(f"unknown loss {name!r}; choose one of {list(LOSSES)}")


def setting_order(front: Frontier, keys: Sequence[str], recorded: Mapping[str, Any]) -> np.ndarray:
    """Settings sorted by ``keys`` (column names of `PARAMS`, ``-name`` for descending, ``distance``
    for the distance from the ``recorded`` setting), ties in grid order."""
    st = front.settings
    columns: list[np.ndarray] = []
    for key in keys:
        name = key.lstrip("-")
        if name == "distance":
            d = sum(np.abs(getattr(st, p).astype(np.float64) - float(recorded[p]))
                    for p in ("relevance_floor", "generate_threshold", "vector_score_threshold",
                              "auto_approve_max_items", "max_iterations"))
            d = d + (st.aggregator != recorded["aggregator"])
            columns.append(np.asarray(d, dtype=np.float64))
        elif name in PARAMS and name != "aggregator":
            col = getattr(st, name).astype(np.float64)
            columns.append(-col if key.startswith("-") else col)
        else:
            raise ValueError(f"cannot order settings by {key!r}; use one of {[p for p in PARAMS if p != 'aggregator']} "
                             "(prefix '-' for descending) or 'distance'")
    index = np.arange(len(st))
    return np.lexsort((index, *reversed(columns))) if columns else index


# ---- the procedure --------------------------------------------------------------------------

@dataclass
class GuaranteeResult:
    """What `risk_controlled` found: the guaranteed settings (``valid``) and the pick among them.

    ``setting`` is None when no setting of the grid can be guaranteed (too few questions for this
    ``alpha`` and ``delta``, or every setting's risk is too high). ``risk`` and ``p_values`` hold,
    per bound, the calibration mean loss (in the loss's unit) and the p-value of every setting;
    ``p_value`` is the largest over bounds (what was tested); ``n`` the calibration questions per
    bound.
    """

    guarantees: list[Guarantee]
    delta: float
    procedure: Procedure
    p_value_method: PValue
    needs_rerun: Unknown
    valid: np.ndarray
    p_value: np.ndarray
    risk: dict[str, np.ndarray]
    p_values: dict[str, np.ndarray]
    n: dict[str, int]
    tested: dict[str, np.ndarray]
    index: int | None
    setting: dict[str, Any] | None
    metric: str
    budget_calls: float | None
    frontier: Frontier
    order: np.ndarray
    scales: dict[str, float] = field(default_factory=dict)

    @property
    def guarantee(self) -> str:
        return ", ".join(f"{g.loss}<={g.alpha:g}" for g in self.guarantees)

    def table(self) -> pd.DataFrame:
        """One row per guaranteed setting: its parameters, calibration risks, p-value, cost and ``metric``."""
        front = self.frontier.table()
        rows = front.loc[self.valid, [*PARAMS[:3], "calls_per_question", self.metric]].copy()
        for g in self.guarantees:
            rows[f"{g.loss}_risk"] = self.risk[g.loss][self.valid]
        rows["p_value"] = self.p_value[self.valid]
        return rows

    def summary(self) -> dict[str, Any]:
        """The procedure, its numbers and the pick, as plain values (what the CLI prints)."""
        pick = self.index
        return {
            "guarantee": self.guarantee, "delta": self.delta, "procedure": self.procedure,
            "p_value": self.p_value_method, "needs_rerun": self.needs_rerun, "n": dict(self.n),
            "settings": len(self.valid), "guaranteed": int(self.valid.sum()), "setting": self.setting,
            "pick_p_value": None if pick is None else float(self.p_value[pick]),
            "pick_risk": None if pick is None else {g.loss: float(self.risk[g.loss][pick]) for g in self.guarantees},
            "pick_" + self.metric: None if pick is None else float(self.frontier.table()[self.metric].iloc[pick]),
            "pick_calls_per_question": None if pick is None else float(
                self.frontier.table()["calls_per_question"].iloc[pick]),
        }


def risk_controlled(experiment: Recorded, guarantee: str | Guarantee | Sequence[str | Guarantee], *,
                    delta: float = 0.1, procedure: Procedure = "fixed_sequence", p_value: PValue = "hb",
                    metric: str = "gold_f1", budget_calls: float | None = None, needs_rerun: Unknown = "worst",
                    calls_cap: int | None = None, order: Sequence[str] | None = None,
                    questions: Sequence[int] | np.ndarray | None = None, front: Frontier | None = None,
                    labels: Mapping[str, Mapping[str, Any]] | None = None,
                    losses: Mapping[str, QuestionLosses] | None = None, **axes: Any) -> GuaranteeResult:
    """Learn-then-Test over the frontier's grid: every setting whose risk is at most each bound with
    probability ``1 - delta``, and the best of them by ``metric``; see the module docstring.

    Parameters
    ----------
    experiment
        A labelled `Experiment` (its questions are the calibration set).
    guarantee
        ``"gold_dropped<=0.10"``, several joined by commas, or `Guarantee` values (`LOSSES`).
    delta
        The chance, over the draw of the calibration questions, that any guaranteed setting's risk
        exceeds its bound.
    procedure
        ``"fixed_sequence"`` (default; along ``order``) or ``"bonferroni"``.
    p_value
        ``"hb"`` (Hoeffding–Bentkus, default) or ``"hoeffding"``.
    needs_rerun
        ``"worst"`` (default): a loss replay cannot know counts as 1; ``"exclude"``: such questions
        are left out of that setting's test (valid only if leaving the recording is unrelated to the
        loss; a warning says how many).
    calls_cap
        The calls bound's normaliser (default `calls_bound` of the grid's largest ``max_iterations``).
    order
        The fixed-sequence order (`setting_order` keys); default `DEFAULT_ORDER` of the first bound.
    questions
        Calibration question indices (default: all); the other arguments as for `frontier`.
    front, losses
        A frontier (and its `question_losses`) already computed, to test many calibration sets fast.
    """
    bounds = parse_guarantees(guarantee)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
    if procedure not in PROCEDURES:
        raise ValueError(f"unknown procedure {procedure!r}; choose one of {list(PROCEDURES)}")
    if p_value not in P_VALUES:
        raise ValueError(f"unknown p-value {p_value!r}; choose one of {list(P_VALUES)}")
    if needs_rerun not in ("worst", "exclude"):
        raise ValueError(f"needs_rerun must be 'worst' or 'exclude', got {needs_rerun!r}")
    _check_metric(metric)
    if front is None:
        front = frontier(experiment, labels=labels, metric=metric, **axes)
    q = np.arange(len(front.ids)) if questions is None else np.asarray(questions, dtype=np.int64)
    pfun = P_VALUE_FUNCTIONS[p_value]
    worst = np.zeros(len(front), dtype=np.float64)
    risk, pvals, ns, tested, scales = {}, {}, {}, {}, {}
    for g in bounds:
        ql = (losses or {}).get(g.loss) or question_losses(experiment, front, g.loss, labels=labels,
                                                           calls_cap=calls_cap)
        cols = q[ql.eligible[q]]
        values = ql.values[:, cols]
        use = np.ones(values.shape, dtype=bool)
        if needs_rerun == "exclude":
            use = ~ql.unknown[:, cols]
            if (left := int((~use).any(axis=0).sum())):
                warnings.warn(f"{g.loss}: {left} of {len(cols)} calibration questions leave the recording at some "
                              "setting and are left out of those settings' tests; the guarantee then assumes that "
                              "leaving the recording is unrelated to the loss", UserWarning, stacklevel=2)
        n_s = use.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(n_s > 0, np.where(use, values, 0.0).sum(axis=1) / np.maximum(n_s, 1), np.nan)
        alpha = g.alpha / ql.scale
        if g.loss == "calls" and alpha >= 1.0:
            raise ValueError(f"calls<={g.alpha:g} is no bound: no run makes more than {ql.scale:g} calls "
                             f"(calls_cap); choose a smaller value")
        p = pfun(np.nan_to_num(mean, nan=1.0), n_s, alpha)
        risk[g.loss], pvals[g.loss], ns[g.loss], tested[g.loss] = mean * ql.scale, p, len(cols), n_s
        scales[g.loss] = ql.scale
        worst = np.maximum(worst, p)
    recorded = {p: getattr(experiment.config, p) for p in PARAMS}
    seq = setting_order(front, order or DEFAULT_ORDER[bounds[0].loss], recorded)
    valid = family_wise(worst, delta, procedure, seq)
    index = _pick(front, q, valid, metric, budget_calls)
    return GuaranteeResult(bounds, delta, procedure, p_value, needs_rerun, valid, worst, risk, pvals, ns, tested,
                           index, None if index is None else front.setting(index), metric, budget_calls, front, seq,
                           scales)



def tightest_bound(experiment: Recorded, guarantee: str | Guarantee, *, front: Frontier | None = None,
                   labels: Mapping[str, Mapping[str, Any]] | None = None, calls_cap: int | None = None,
                   steps: int = 24, **kwargs: Any) -> Guarantee | None:
    """The smallest bound of ``guarantee``'s loss that `risk_controlled` can guarantee for some setting.

    Same ``delta``, procedure, p-value and calibration questions (``kwargs`` as for `risk_controlled`);
    only the bound's value moves, by bisection (guaranteed settings only grow as the bound loosens),
    rounded up to three decimals. None when not even the loosest bound of that loss can be guaranteed.
    What a user with too few questions asks next: "then what *can* these questions promise?"
    """
    (wanted,) = parse_guarantees(guarantee)
    if front is None:
        front = frontier(experiment, labels=labels, metric=kwargs.get("metric", "gold_f1"))
    losses = {wanted.loss: question_losses(experiment, front, wanted.loss, labels=labels, calls_cap=calls_cap)}
    scale = losses[wanted.loss].scale

    def guaranteed(alpha: float) -> bool:
        return risk_controlled(experiment, Guarantee(wanted.loss, alpha), front=front, labels=labels,
                               losses=losses, calls_cap=calls_cap, **kwargs).setting is not None

    low, high = 0.0, scale * (1.0 - 1e-9)
    if not guaranteed(high):
        return None
    for _ in range(steps):
        mid = (low + high) / 2
        low, high = (low, mid) if guaranteed(mid) else (mid, high)
    return Guarantee(wanted.loss, math.ceil(high * 1000 - 1e-6) / 1000)

def _pick(front: Frontier, questions: np.ndarray, valid: np.ndarray, metric: str,
          budget_calls: float | None) -> int | None:
    """The valid setting with the most ``metric`` on ``questions`` (within the budget), ties to fewer calls.
    A metric undefined everywhere picks the cheapest valid setting."""
    idx = np.flatnonzero(valid)
    if not len(idx):
        return None
    scores = front.scores(questions)
    cost, quality = scores["calls_per_question"][idx], scores[metric][idx]
    if budget_calls is not None:
        keep = cost <= budget_calls + 1e-9
        if not keep.any():
            return None
        idx, cost, quality = idx[keep], cost[keep], quality[keep]
    quality = np.where(np.isnan(quality), -np.inf, quality)
    return int(idx[np.lexsort((idx, cost, -quality))[0]])


__all__ = ["DEFAULT_ORDER", "LOSSES", "PROCEDURES", "P_VALUES", "Guarantee", "GuaranteeResult", "QuestionLosses",
           "calls_bound", "family_wise", "hb_p_value", "hoeffding_p_value", "parse_guarantees", "question_losses",
           "risk_controlled", "setting_order"]
