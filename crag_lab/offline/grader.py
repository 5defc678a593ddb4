"""The offline relevance grader: the probability that an item helps answer the question.

No LLM and no download: the features of `crag_lab.offline.reading` (MiniLM cosines of the question
with the item and with its best unit, the share of the question's words they hold, whether the item
holds the kind of answer asked for, its length), the learned answer scorer's reading of the
item's best units (`SCORER_FEATURE`, `crag_lab.learned.AnswerScorer`) and the bridge — how well the
question matches another item that names this one (`BRIDGE_FEATURE`, `bridge_scores`) — go through a logistic
regression fitted by ``bench/fit_grader.py`` on labelled items of four training domains — the
knowledge base's tuning questions (items retrieved for them, gold when they overlap a labelled
answer location), SQuAD v1.1 train articles the scorer never saw, public README files the
scorer never saw, and HotpotQA and MuSiQue train questions with their paragraphs — and committed
in ``crag_lab/_data/grader_calibration.json``. Evaluation sets (HotpotQA dev, the knowledge base's
test split) are only measured, never fitted.

So a score reads as the spec means it: ≥ 0.7, this item is likely enough to answer; < 0.3, it
is probably noise. Grades are fitted at even odds (helpful and unhelpful items weighted equally),
so an item's grade does not depend on how many other items the retriever returned. A score depends
on (question, item) and, through the bridge only, on whether another item graded in the same call
names the item's title: batch and per-item grading agree on every item no other item names.

>>> grader = CalibratedGrader()  # doctest: +SKIP
>>> grader.score("Which port does the gateway use?", ["The gateway listens on port 8443.", "Cats purr."])
... # doctest: +SKIP
[0.83, 0.02]
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from crag_lab.offline.reading import GRADER_FEATURES, Reading, features, read, unit_key, unit_support
from crag_lab.offline.units import question_parts
from crag_lab.offline.vectors import VectorCache

__all__ = ["BRIDGE_FEATURE", "GRADER_FEATURES", "SCORER_FEATURE", "CalibratedGrader", "bridge_scores",
           "calibration_fingerprint", "load_calibration", "scorer_logits"]

CALIBRATION_RESOURCE = "grader_calibration.json"
SCORER_FEATURE = "scorer_logit"
"""The optional eighth feature: the logit of the answer scorer's best probability over an item's units."""
BRIDGE_FEATURE = "bridge"
"""The optional ninth feature: how well the question matches another item that names this one (`bridge_scores`)."""
OPTIONAL_FEATURES = (SCORER_FEATURE, BRIDGE_FEATURE)
"""What a calibration may add after `GRADER_FEATURES`, in this order."""
SCORER_UNITS = 4
"""The scorer reads this many units of each item: its best by the offline reading's support."""
_P_FLOOR = 1e-4


def scorer_logits(reading: Reading, scorer: Any) -> np.ndarray:
    """One logit per item of ``reading``: the answer scorer's best probability over the item's
    `SCORER_UNITS` best-supported units (keyed ``"Title: unit"``), clipped to [1e-4, 1 - 1e-4];
    an item without units gets the floor. All items' pairs go to the scorer in one call."""
    pairs: list[tuple[str, str]] = []
    owners: list[int] = []
    for i, item in enumerate(reading.items):
        for u in sorted(item.units, key=unit_support, reverse=True)[:SCORER_UNITS]:
            pairs.append((reading.query, unit_key(item.title, u.unit)))
            owners.append(i)
    best = np.full(len(reading.items), _P_FLOOR)
    if pairs:
        np.maximum.at(best, np.asarray(owners), np.asarray(scorer.predict(pairs), dtype=np.float64))
    p = np.clip(best, _P_FLOOR, 1 - _P_FLOOR)
    return np.asarray(np.log(p / (1 - p)), dtype=np.float64)


def _words(text: str) -> str:
    return " " + " ".join(re.findall(r"\w+", text.lower())) + " "


def bridge_scores(reading: Reading) -> np.ndarray:
    """One value per item of ``reading``: the highest cosine with the question among the *other* items
    whose text names this item's title, 0 when none does (or the title is under 4 characters).

    Multi-hop evidence is linked by names: the passage that matches the question names the entity the
    second hop is about, and the passage about that entity carries its name as its title (HotpotQA's
    bridge paragraphs; a runbook naming the service whose page holds the answer). Such an item may
    share few words with the question and still be needed. Items are compared within one grading
    call, so an item graded alone (per-item grading) has 0 here.
    """
    titles = [_words(item.title) for item in reading.items]
    texts = [_words(" ".join(u.unit.text for u in item.units)) for item in reading.items]
    out = np.zeros(len(reading.items))
    for i, title in enumerate(titles):
        if len(title.strip()) < 4:
            continue
        named_by = [reading.items[j].cos for j in range(len(titles)) if j != i and titles[j] != title and title in texts[j]]
        out[i] = max(named_by, default=0.0)
    return out


@dataclass(frozen=True)
class _LogisticModel:
    features: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    low: np.ndarray
    high: np.ndarray

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> _LogisticModel:
        try:
            names = tuple(data["features"])
            arrays = [np.asarray(data[key], dtype=np.float64) for key in ("mean", "scale", "coef", "low", "high")]
            intercept = float(data["intercept"])
        except KeyError as exc:
            raise ValueError(f"grader calibration lacks key {exc.args[0]!r}") from None
        extra = names[len(GRADER_FEATURES):]
        if names[:len(GRADER_FEATURES)] != GRADER_FEATURES or extra != tuple(f for f in OPTIONAL_FEATURES if f in extra):
            raise ValueError(f"grader calibration features {list(names)} are not this grader's {list(GRADER_FEATURES)} "
                             f"(optionally followed by {', '.join(map(repr, OPTIONAL_FEATURES))}, in that order); "
                             "refit with bench/fit_grader.py")
        if any(arr.shape != (len(names),) for arr in arrays) or np.any(arrays[3] > arrays[4]):
            raise ValueError(f"grader calibration needs mean/scale/coef/low/high of {len(names)} values, low <= high")
        mean, scale, coef, low, high = arrays
        return cls(names, mean, scale, coef, intercept, low, high)

    def probability(self, x: np.ndarray) -> np.ndarray:
        x = np.clip(x, self.low, self.high)  # no extrapolation beyond the training range
        logit = ((x - self.mean) / self.scale) @ self.coef + self.intercept
        return np.asarray(1.0 / (1.0 + np.exp(-logit)), dtype=np.float64)


@functools.lru_cache(maxsize=1)
def calibration_fingerprint() -> str:
    """A short hash of the committed grader parameters, and of the answer scorer when they read with it
    (`crag_lab.learned.scorer.fingerprint`): a response cache or run journal written with another
    calibration or scorer never hands its grades to this one (`OfflineModel.cache_identity`)."""
    model = load_calibration().get("model", {})
    text = json.dumps(model, sort_keys=True)
    if SCORER_FEATURE in model.get("features", ()):
        from crag_lab.learned.scorer import fingerprint

        text += fingerprint()
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def load_calibration() -> dict[str, Any]:
    """The committed grader parameters (``crag_lab/_data/grader_calibration.json``)."""
    text = resources.files("crag_lab").joinpath("_data").joinpath(CALIBRATION_RESOURCE).read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


class CalibratedGrader:
    """Scores evidence items for a question with probabilities fitted on labelled training domains.

    ``cache`` holds the vectors (by default a fresh `VectorCache` over the bundled MiniLM);
    ``params`` defaults to the committed calibration. When its features include `SCORER_FEATURE`,
    ``scorer`` reads the items' units (default: the answer scorer that ships, loaded on first use).
    """

    def __init__(self, cache: VectorCache | None = None, params: Mapping[str, Any] | None = None,
                 scorer: Any = None) -> None:
        self.cache = cache if cache is not None else VectorCache()
        self.params: Mapping[str, Any] = params if params is not None else load_calibration()
        self._model = _LogisticModel.from_json(self.params.get("model", {}))
        self._scorer = scorer

    @property
    def feature_names(self) -> tuple[str, ...]:
        """The columns of `features`: `GRADER_FEATURES`, and `SCORER_FEATURE` when the calibration uses it."""
        return self._model.features

    @property
    def scorer(self) -> Any:
        """The answer scorer the `SCORER_FEATURE` column reads with (loaded on first use)."""
        if self._scorer is None:
            from crag_lab.learned import AnswerScorer

            self._scorer = AnswerScorer.load()
        return self._scorer

    def features(self, reading: Reading) -> np.ndarray:
        """The ``(items, features)`` matrix of a reading, columns named by `feature_names`."""
        x = np.asarray([features(item, reading.kind) for item in reading.items], dtype=np.float64).reshape(
            len(reading.items), len(GRADER_FEATURES))
        if SCORER_FEATURE in self.feature_names:
            x = np.column_stack([x, scorer_logits(reading, self.scorer) if len(x) else np.zeros(0)])
        if BRIDGE_FEATURE in self.feature_names:
            x = np.column_stack([x, bridge_scores(reading)])
        return x

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        """Unrounded probabilities for a feature matrix from `features`."""
        return self._model.probability(x) if len(x) else np.zeros(0)

    def score_items(self, query: str, items: Sequence[Mapping[str, Any]]) -> list[float]:
        """One probability per item (``text`` and optional ``title``/``path``).

        A multi-part question ("which team owns X, and where do I reach them?") is graded per part
        as well: an item that fully answers one part helps answer the question, so its grade is its
        best over the whole question and each part (`question_parts`).
        """
        if not items:
            return []
        best = self.probabilities(self.features(read(query, items, self.cache)))
        for part in question_parts(query):
            best = np.maximum(best, self.probabilities(self.features(read(part, items, self.cache))))
        return [round(float(p), 3) for p in best]

    def score(self, query: str, texts: Sequence[str], titles: Sequence[str | None] | None = None) -> list[float]:
        """One probability per text; ``titles`` (optional) one per text."""
        titles = list(titles) if titles is not None else [None] * len(texts)
        if len(titles) != len(texts):
            raise ValueError(f"got {len(texts)} texts but {len(titles)} titles; pass one title (or None) per text")
        return self.score_items(query, [{"text": t, "title": h} for t, h in zip(texts, titles, strict=True)])
