"""Honest threshold tuning: pick a setting of the frontier by k-fold cross-validation over questions.

Choosing the best of thousands of settings on the questions it is then scored on flatters it.
`tune` splits the questions into ``folds`` (seeded, so the same split every time); for each fold it
picks the best setting on the other folds (the most of the metric, at most ``budget_calls`` calls
per question, ties to the cheaper setting) and scores that pick on the held-out fold only. The
out-of-fold quality pools every held-out question under the setting chosen without it; the
in-sample quality is the best setting's on all questions, as a plain search reports it. Their gap
is how much of the gain is fitted noise. The setting to use is the in-sample pick (fitted on all
questions), and its out-of-fold quality is the honest estimate of what it is worth.

>>> result = tune(exp, folds=5, budget_calls=4.0)  # doctest: +SKIP
>>> result.setting, result.in_sample["gold_f1"], result.out_of_fold["gold_f1"]  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from crag_lab.replay.frontier import Frontier, Recorded, _check_metric, frontier

if TYPE_CHECKING:
    import pandas as pd

    from crag_lab.replay.guarantee import Guarantee, GuaranteeResult


@dataclass
class TuneResult:
    """The cross-validated pick of `tune`; ``folds`` has one row per fold, ``fold_of`` each question's fold."""

    setting: dict[str, Any]
    in_sample: dict[str, float]
    out_of_fold: dict[str, float]
    metric: str
    budget_calls: float | None
    folds: pd.DataFrame
    fold_of: np.ndarray
    frontier: Frontier

    @property
    def gap(self) -> float:
        """In-sample minus out-of-fold quality: how much the search flatters its own pick."""
        return self.in_sample[self.metric] - self.out_of_fold[self.metric]


def fold_assignment(n: int, folds: int, seed: int = 0) -> np.ndarray:
    """Each of ``n`` questions' fold, 0..folds-1: a seeded shuffle cut into near-equal parts.

    >>> fold_assignment(5, 2).tolist()
    [1, 1, 0, 0, 0]
    """
    if not 2 <= folds <= n:
        raise ValueError(f"folds must be between 2 and the number of questions ({n}), got {folds}")
    fold_of = np.empty(n, dtype=np.int64)
    for f, part in enumerate(np.array_split(np.random.default_rng(seed).permutation(n), folds)):
        fold_of[part] = f
    return fold_of


def best_setting(front: Frontier, questions: np.ndarray, metric: str, budget_calls: float | None = None) -> int:
    """The setting with the most ``metric`` on ``questions`` (within the budget), ties to the cheapest, then the first."""
    scores = front.scores(questions)
    quality, cost = scores[metric], scores["calls_per_question"]
    ok = ~np.isnan(quality)
    if not ok.any():
        raise ValueError(f"{metric} is undefined on these {len(questions)} questions (none has a labelled item it "
                         "needs); use fewer folds or more labelled questions")
    if budget_calls is not None:
        ok &= cost <= budget_calls + 1e-9
    idx = np.flatnonzero(ok)
    if not len(idx):
        cheapest = float(np.nanmin(cost)) if len(cost) else float("nan")
        raise ValueError(f"no setting of the grid reaches a {metric} within {budget_calls} calls per question "
                         f"(the cheapest needs {cheapest:.2f}); raise the budget or widen the grid")
    return int(idx[np.lexsort((idx, cost[idx], -quality[idx]))[0]])


def _summary(scores: dict[str, np.ndarray], s: int, metric: str) -> dict[str, float]:
    keys = dict.fromkeys((metric, "gold_f1", "gold_recall", "gold_precision", "calls_per_question",
                          "tokens_per_question", "needs_rerun", "answers_known"))
    return {k: float(scores[k][s]) for k in keys}


@overload
def tune(experiment: Recorded | Frontier, *, folds: int = ..., budget_calls: float | None = ..., metric: str = ...,
         seed: int = ..., guarantee: None = ..., delta: float = ..., **frontier_args: Any) -> TuneResult: ...


@overload
def tune(experiment: Recorded | Frontier, *, folds: int = ..., budget_calls: float | None = ..., metric: str = ...,
         seed: int = ..., guarantee: str | Guarantee | Sequence[str | Guarantee], delta: float = ...,
         **frontier_args: Any) -> GuaranteeResult: ...


def tune(experiment: Recorded | Frontier, *, folds: int = 5, budget_calls: float | None = None,
         metric: str = "gold_f1", seed: int = 0, guarantee: str | Guarantee | Sequence[str | Guarantee] | None = None,
         delta: float = 0.1, **frontier_args: Any) -> TuneResult | GuaranteeResult:
    """Pick thresholds by ``folds``-fold cross-validation over questions; see the module docstring.

    ``experiment`` is a labelled `Experiment` (its `frontier` is computed with ``frontier_args``:
    the grid and ``labels``) or a `Frontier` already computed.

    With ``guarantee`` (``"gold_dropped<=0.10"``; an `Experiment` only), the pick is risk-controlled
    instead: the settings whose risk is at most the bound with probability ``1 - delta`` and the best
    of them (`crag_lab.replay.guarantee.risk_controlled`, which takes the other keyword arguments:
    ``procedure``, ``p_value``, ``needs_rerun``, ``calls_cap``, ``order``, the grid).
    """
    import pandas as pd

    if guarantee is not None:
        from crag_lab.replay.guarantee import risk_controlled

        if isinstance(experiment, Frontier):
            raise TypeError("a guarantee needs the Experiment (its labels and answers), not only its Frontier")
        return risk_controlled(experiment, guarantee, delta=delta, metric=metric, budget_calls=budget_calls,
                               **frontier_args)
    _check_metric(metric)
    front = experiment if isinstance(experiment, Frontier) else frontier(experiment, metric=metric, **frontier_args)
    n = len(front.ids)
    fold_of = fold_assignment(n, folds, seed)
    everyone = np.arange(n)
    choice = np.empty(n, dtype=np.int64)
    rows = []
    for f in range(folds):
        train, test = everyone[fold_of != f], everyone[fold_of == f]
        s = best_setting(front, train, metric, budget_calls)
        choice[test] = s
        held = front.scores(test)
        rows.append({"fold": f, "train_questions": len(train), "test_questions": len(test), **front.setting(s),
                     f"train_{metric}": float(front.scores(train)[metric][s]), f"test_{metric}": float(held[metric][s]),
                     "test_calls_per_question": float(held["calls_per_question"][s])})
    # Out of fold: every question under the setting chosen without it, pooled as one setting.
    pooled = Frontier(front.settings, front.ids, {k: v[choice, everyone][None, :] for k, v in front.per_query.items()},
                      front.recorded_calls, front.recorded_tokens, front.contained, front.citation_precision, metric)
    best = best_setting(front, everyone, metric, budget_calls)
    return TuneResult(setting=front.setting(best), in_sample=_summary(front.scores(), best, metric),
                      out_of_fold=_summary(pooled.scores(), 0, metric), metric=metric, budget_calls=budget_calls,
                      folds=pd.DataFrame(rows), fold_of=fold_of, frontier=front)
