"""An offline relevance grader: a calibrated probability that a passage helps answer a query.

No LLM and no model download: a few hand-made features (MiniLM cosines, content-word overlap,
numbers, an exact title match) go through a logistic regression whose coefficients were fitted on
HotpotQA distractor paragraphs by ``bench/fit_grader.py`` and are committed in
``crag_lab/_data/grader_calibration.json``. Applying them needs only numpy.

Each score depends only on (query, passage text, passage title), never on the other passages in the
batch, so grading in one batch or one item at a time gives the same scores.

>>> grader = CalibratedGrader()  # doctest: +SKIP
>>> grader.score("Which river flows through Vienna?", ["The Danube flows through Vienna.", "Cats purr."])
... # doctest: +SKIP
[0.58, 0.012]
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from llama_index.core.base.embeddings.base import BaseEmbedding

__all__ = [
    "FEATURE_NAMES",
    "CalibratedGrader",
    "GraderFeatures",
    "content_terms",
    "describe_feature",
    "load_calibration",
    "relation_query",
    "split_sentences",
]

EmbedTexts = Callable[[list[str]], np.ndarray]
EmbedQuery = Callable[[str], np.ndarray]

CALIBRATION_RESOURCE = "grader_calibration.json"

# English function words plus the words of typical questions. Kept small on purpose: a word missing
# here only adds a little noise to the overlap features.
_STOPWORD_TEXT = """
    a about above after again against all also am an and any are as at be because been before being
    below between both but by can could did do does doing done down during each either else ever few
    for from further had has have having he her here hers herself him himself his how however i if in
    into is it its itself just least less many may me might more most much must my myself neither no
    nor not now of off often on once one only or other our ours ourselves out over own per same shall
    she should since so some such than that the their theirs them themselves then there these they
    this those though through thus to too under until up upon us very was we were what whatever when
    whenever where whereas wherever whether which while who whoever whom whose why will with within
    without would yet you your yours yourself yourselves s t d ll m re ve name named known called
    """
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

_TOKEN = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")
_NUMBER = re.compile(r"^\d+(?:[.,]\d+)*$")
_QUOTED = re.compile(r"[\"\u201c]([^\"\u201c\u201d]{2,80})[\"\u201d]")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"')\]])\s+|\n\s*\n|\n(?=\s*[-*#|\d])")
_MAX_SENTENCES = 12
_MIN_SENTENCE_TOKENS = 4


def _stem(word: str) -> str:
    """A deliberately light suffix stripper (plural, -ing, -ed): consistent, not linguistic."""
    if word.endswith(("'s", "\u2019s")):
        word = word[:-2]
    if word.isdigit() or len(word) <= 3:
        return word
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("sses", "ches", "shes", "xes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    if len(word) > 5 and word.endswith("ing"):
        return word[:-3]
    if len(word) > 4 and word.endswith("ed"):
        return word[:-2]
    return word


def _raw_tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def _is_entity_like(token: str, position: int) -> bool:
    """Capitalised (but not the first word) or containing a digit, and not a stopword."""
    if token.lower() in STOPWORDS:
        return False
    return any(ch.isdigit() for ch in token) or (position > 0 and token[:1].isupper())


def content_terms(text: str) -> list[str]:
    """Lower-cased, lightly stemmed words of ``text`` without stopwords, in order.

    >>> content_terms("What cities were the Olympics held in?")
    ['city', 'olympic', 'held']
    """
    return [_stem(t.lower()) for t in _raw_tokens(text) if t.lower() not in STOPWORDS]


def relation_query(query: str) -> str:
    """``query`` without its entity-like words and quoted titles: what is asked about them.

    >>> relation_query('What government position was held by the star of "Kiss and Tell"?')
    'What government position was held by the star of'
    """
    tokens = _raw_tokens(_QUOTED.sub(" ", query))
    return " ".join(t for i, t in enumerate(tokens) if not _is_entity_like(t, i))


def split_sentences(text: str) -> list[str]:
    """Sentences (or paragraphs / list items) of ``text``; very short pieces join the next one.

    At most ``_MAX_SENTENCES`` (12) are returned, from the start of the text, to bound grading time.

    >>> split_sentences("Paris is the capital of France. It has 2 million people. Ok.")
    ['Paris is the capital of France.', 'It has 2 million people. Ok.']
    """
    out: list[str] = []
    pending = ""
    for piece in (p.strip() for p in _SENTENCE_END.split(text)):
        if not piece:
            continue
        pending = f"{pending} {piece}" if pending else piece
        if len(_raw_tokens(pending)) >= _MIN_SENTENCE_TOKENS:
            out.append(pending)
            pending = ""
            if len(out) == _MAX_SENTENCES:
                return out
    if pending:
        if out:
            out[-1] = f"{out[-1]} {pending}"
        else:
            out.append(pending)
    return out


def _norm(text: str) -> str:
    return " ".join(t.lower() for t in _raw_tokens(text))


def _bigrams(terms: Sequence[str]) -> frozenset[tuple[str, str]]:
    return frozenset(itertools.pairwise(terms))


def _frac(found: frozenset[Any], wanted: frozenset[Any]) -> float:
    """Share of ``wanted`` that is in ``found`` (0 when nothing is wanted)."""
    return len(found & wanted) / len(wanted) if wanted else 0.0


@dataclass(frozen=True)
class _Query:
    terms: frozenset[str]
    bigrams: frozenset[tuple[str, str]]
    entities: frozenset[str]
    numbers: frozenset[str]
    norm: str


@dataclass(frozen=True)
class _Passage:
    terms: frozenset[str]  # of the text and the title together
    bigrams: frozenset[tuple[str, str]]
    numbers: frozenset[str]
    n_tokens: int
    title_terms: frozenset[str] | None  # None: no title
    title_norm: str | None
    cos_text: float
    cos_title: float
    cos_sentences: tuple[float, ...]
    cos_relation: float


def _query_view(query: str) -> _Query:
    terms = content_terms(query)
    tokens = _raw_tokens(query)
    return _Query(
        terms=frozenset(terms),
        bigrams=_bigrams(terms),
        entities=frozenset(_stem(t.lower()) for i, t in enumerate(tokens) if _is_entity_like(t, i)),
        numbers=frozenset(t for t in tokens if _NUMBER.match(t)),
        norm=_norm(query),
    )


def _title_exact(q: _Query, p: _Passage) -> float:
    if p.title_norm is None:
        return math.nan
    return 1.0 if p.title_norm and f" {p.title_norm} " in f" {q.norm} " else 0.0


# name -> (what it measures, function). Higher means more relevant for every feature except
# log_length; the fit constrains all other coefficients to be >= 0.
_FEATURES: dict[str, tuple[str, Callable[[_Query, _Passage], float]]] = {
    "cos_text": ("MiniLM cosine of query and passage", lambda q, p: p.cos_text),
    "cos_best_sentence": (
        "highest cosine of the query and one sentence of the passage",
        lambda q, p: max(p.cos_sentences) if p.cos_sentences else p.cos_text,
    ),
    "cos_relation": (
        "cosine of the passage and the query without its names (what is asked)",
        lambda q, p: p.cos_relation,
    ),
    "query_coverage": (
        "share of the query's content words in the passage or title",
        lambda q, p: _frac(p.terms, q.terms),
    ),
    "bigram_coverage": (
        "share of the query's content-word pairs in the passage",
        lambda q, p: _frac(p.bigrams, q.bigrams),
    ),
    "entity_coverage": (
        "share of the query's capitalised words and numbers in the passage or title",
        lambda q, p: _frac(p.terms, q.entities),
    ),
    "number_match": (
        "share of the query's numbers (years...) in the passage",
        lambda q, p: _frac(p.numbers, q.numbers),
    ),
    "log_length": ("log(1 + words in the passage)", lambda q, p: math.log1p(p.n_tokens)),
    "cos_title": ("MiniLM cosine of query and title", lambda q, p: p.cos_title),
    "title_in_query": (
        "share of the title's content words found in the query",
        lambda q, p: math.nan if p.title_terms is None else _frac(q.terms, p.title_terms),
    ),
    "title_exact": ("1 if the whole title appears in the query", _title_exact),
}
_TITLE_FEATURES = frozenset({"cos_title", "title_in_query", "title_exact"})
FEATURE_NAMES: tuple[str, ...] = tuple(_FEATURES)
"""Base features by name. Derived names are valid too: ``"a*b"`` (a product; ``"a*a"`` squares)
and ``"a>t"`` (a hinge, ``max(0, a - t)``: extra credit above ``t``)."""

_HINGE = re.compile(r"^(\w+)>(\d*\.?\d+)$")


@dataclass(frozen=True)
class _Term:
    parts: tuple[str, ...]
    threshold: float | None = None

    def value(self, base: Mapping[str, float]) -> float:
        if self.threshold is not None:
            return max(0.0, base[self.parts[0]] - self.threshold)
        return math.prod(base[part] for part in self.parts)


def _parse(name: str) -> _Term:
    hinge = _HINGE.match(name.replace(" ", ""))
    if hinge and hinge.group(1) in _FEATURES:
        return _Term((hinge.group(1),), float(hinge.group(2)))
    parts = tuple(part.strip() for part in name.split("*"))
    if len(parts) > 2 or any(part not in _FEATURES for part in parts):
        raise ValueError(
            f"unknown grader feature {name!r}; valid: {', '.join(FEATURE_NAMES)}, a product of two "
            "of them such as 'cos_text*cos_title', or a hinge such as 'query_coverage>0.5'"
        )
    return _Term(parts)


def describe_feature(name: str) -> str:
    """What a (possibly derived) feature measures, for tables of coefficients.

    >>> describe_feature("query_coverage>0.4")
    "max(0, share of the query's content words in the passage or title - 0.4)"
    """
    term = _parse(name)
    texts = [_FEATURES[part][0] for part in term.parts]
    if term.threshold is not None:
        return f"max(0, {texts[0]} - {term.threshold:g})"
    return " × ".join(texts)


class GraderFeatures:
    """Feature extraction for the grader, shared by the runtime and the fitting script.

    Title features are NaN for an item without a title; :class:`CalibratedGrader` then uses its
    title-free model for that item.

    >>> GraderFeatures(["cos_text", "query_coverage>0.4"]).names
    ('cos_text', 'query_coverage>0.4')
    """

    def __init__(self, names: Sequence[str] = FEATURE_NAMES) -> None:
        self.names = tuple(names)
        self._terms = tuple(_parse(name) for name in self.names)
        self._base = tuple(dict.fromkeys(part for term in self._terms for part in term.parts))
        self.uses_title_embedding = "cos_title" in self._base
        self.uses_sentences = "cos_best_sentence" in self._base
        self.uses_relation = "cos_relation" in self._base

    def extract(
        self,
        query: str,
        texts: Sequence[str],
        titles: Sequence[str | None] | None,
        embed_texts: EmbedTexts,
        embed_query: EmbedQuery,
    ) -> np.ndarray:
        """A ``(len(texts), len(names))`` float matrix.

        ``embed_texts`` is called once, with the texts, then (as needed) their titles and
        sentences; ``embed_query`` once for the query and once for :func:`relation_query`.
        """
        n = len(texts)
        if titles is None:
            titles = [None] * n
        if len(titles) != n:
            raise ValueError(f"got {n} texts but {len(titles)} titles; pass one title (or None) per text")
        if n == 0:
            return np.zeros((0, len(self.names)))
        clean_titles = [t.strip() if t and t.strip() else None for t in titles]

        batch = list(texts)
        title_at: list[int | None] = []
        for title in clean_titles:
            use = title is not None and self.uses_title_embedding
            title_at.append(len(batch) if use else None)
            batch.extend([title] if use and title is not None else [])
        sent_at: list[tuple[int, int]] = []
        for text in texts:
            sents = split_sentences(text) if self.uses_sentences else []
            sents = sents if len(sents) > 1 else []  # one sentence: the full-text cosine stands
            sent_at.append((len(batch), len(batch) + len(sents)))
            batch.extend(sents)

        vecs = _unit_rows(np.asarray(embed_texts(batch), dtype=np.float64))
        cos = vecs @ _unit(np.asarray(embed_query(query), dtype=np.float64))
        if self.uses_relation:
            cos_rel = vecs @ _unit(np.asarray(embed_query(relation_query(query) or query), dtype=np.float64))
        else:
            cos_rel = np.full(len(batch), math.nan)

        qv = _query_view(query)
        rows = []
        for i, text in enumerate(texts):
            title = clean_titles[i]
            title_terms = frozenset(content_terms(title)) if title is not None else None
            terms = content_terms(text)
            at, (lo, hi) = title_at[i], sent_at[i]
            pv = _Passage(
                terms=frozenset(terms) | (title_terms or frozenset()),
                bigrams=_bigrams(terms),
                numbers=frozenset(t for t in _raw_tokens(text) if _NUMBER.match(t)),
                n_tokens=len(_raw_tokens(text)),
                title_terms=title_terms,
                title_norm=_norm(title) if title is not None else None,
                cos_text=float(cos[i]),
                cos_title=float(cos[at]) if at is not None else math.nan,
                cos_sentences=tuple(float(c) for c in cos[lo:hi]),
                cos_relation=float(cos_rel[i]),
            )
            base = {name: _FEATURES[name][1](qv, pv) for name in self._base}
            rows.append([term.value(base) for term in self._terms])
        return np.asarray(rows, dtype=np.float64)


def _unit(vec: np.ndarray) -> np.ndarray:
    return vec / max(float(np.linalg.norm(vec)), 1e-12)


def _unit_rows(mat: np.ndarray) -> np.ndarray:
    return mat / np.maximum(np.linalg.norm(mat, axis=1, keepdims=True), 1e-12)


@dataclass(frozen=True)
class _LogisticModel:
    features: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    low: np.ndarray | None = None
    high: np.ndarray | None = None
    cal_x: np.ndarray | None = None
    cal_y: np.ndarray | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str) -> _LogisticModel:
        try:
            features = tuple(data["features"])
            arrays = [np.asarray(data[key], dtype=np.float64) for key in ("mean", "scale", "coef")]
            intercept = float(data["intercept"])
        except KeyError as exc:
            raise ValueError(f"grader calibration {where} lacks key {exc.args[0]!r}") from None
        for key, arr in zip(("mean", "scale", "coef"), arrays, strict=True):
            if arr.shape != (len(features),):
                raise ValueError(f"grader calibration {where}.{key} must have {len(features)} values")
        for name in features:
            _parse(name)
        low = high = None
        if "low" in data or "high" in data:
            low, high = (np.asarray(data.get(key, []), dtype=np.float64) for key in ("low", "high"))
            if low.shape != (len(features),) or high.shape != (len(features),) or np.any(low > high):
                raise ValueError(f"grader calibration {where}.low/high need {len(features)} values each, low <= high")
        cal = data.get("calibration")
        cal_x = cal_y = None
        if cal:
            cal_x, cal_y = (np.asarray(cal[key], dtype=np.float64) for key in ("x", "y"))
            if cal_x.ndim != 1 or cal_x.shape != cal_y.shape or np.any(np.diff(cal_x) < 0):
                raise ValueError(f"grader calibration {where}.calibration needs increasing 'x' and as many 'y'")
        return cls(features, arrays[0], arrays[1], arrays[2], intercept, low, high, cal_x, cal_y)

    def probability(self, x: np.ndarray) -> np.ndarray:
        if self.low is not None and self.high is not None:
            x = np.clip(x, self.low, self.high)  # no extrapolation beyond the training range
        logit = ((x - self.mean) / self.scale) @ self.coef + self.intercept
        prob = 1.0 / (1.0 + np.exp(-logit))
        if self.cal_x is not None and self.cal_y is not None:
            prob = np.interp(prob, self.cal_x, self.cal_y)
        return np.asarray(np.clip(prob, 0.0, 1.0), dtype=np.float64)


def load_calibration() -> dict[str, Any]:
    """The committed grader parameters (``crag_lab/_data/grader_calibration.json``)."""
    text = resources.files("crag_lab").joinpath("_data").joinpath(CALIBRATION_RESOURCE).read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


class CalibratedGrader:
    """Scores passages for a query with probabilities calibrated on HotpotQA distractor paragraphs.

    ``params`` defaults to the committed ``grader_calibration.json``: a ``"titled"`` logistic model
    for items with a title, an ``"untitled"`` one for items without. Each model clips its features to
    ``low``/``high`` (the training range), standardises them with ``mean``/``scale``, applies
    ``coef`` and ``intercept``, and optionally a ``"calibration"`` map (isotonic breakpoints applied
    with ``np.interp``). The embedding model is
    loaded on first use (``default_embed_model()``) unless given.

    >>> grader = CalibratedGrader()  # doctest: +SKIP
    >>> grader.score("Which river flows through Vienna?", ["The Danube flows through Vienna."], ["Danube"])
    ... # doctest: +SKIP
    [0.58]
    """

    def __init__(self, embed_model: BaseEmbedding | None = None, params: Mapping[str, Any] | None = None) -> None:
        self._embed_model = embed_model
        self.params: Mapping[str, Any] = params if params is not None else load_calibration()
        models = self.params.get("models")
        if not isinstance(models, Mapping) or "untitled" not in models:
            raise ValueError("grader calibration needs a 'models' mapping with at least an 'untitled' model")
        self._untitled = _LogisticModel.from_json(models["untitled"], "models.untitled")
        if any(_parse(f).parts[0] in _TITLE_FEATURES for f in self._untitled.features):
            raise ValueError("grader calibration models.untitled must not use title features")
        self._titled = _LogisticModel.from_json(models["titled"], "models.titled") if "titled" in models else None
        names = [*(self._titled.features if self._titled else ()), *self._untitled.features]
        self.extractor = GraderFeatures(list(dict.fromkeys(names)))

    @property
    def embed_model(self) -> BaseEmbedding:
        if self._embed_model is None:
            from crag_lab.embeddings import default_embed_model

            self._embed_model = default_embed_model()
        return self._embed_model

    def _embed_texts(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.embed_model.get_text_embedding_batch(texts), dtype=np.float64)

    def _embed_query(self, query: str) -> np.ndarray:
        return np.asarray(self.embed_model.get_query_embedding(query), dtype=np.float64)

    def features(self, query: str, texts: Sequence[str], titles: Sequence[str | None] | None = None) -> np.ndarray:
        """The feature matrix, one row per text, columns named by ``self.extractor.names``."""
        return self.extractor.extract(query, texts, titles, self._embed_texts, self._embed_query)

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        """Calibrated probabilities (unrounded) for a feature matrix from :meth:`features`."""
        if len(x) == 0:
            return np.zeros(0)
        names = self.extractor.names
        prob = self._untitled.probability(x[:, [names.index(f) for f in self._untitled.features]])
        if self._titled is not None:
            xt = x[:, [names.index(f) for f in self._titled.features]]
            has_title = ~np.isnan(xt).any(axis=1)
            if has_title.any():
                prob[has_title] = self._titled.probability(xt[has_title])
        return prob

    def score(self, query: str, texts: Sequence[str], titles: Sequence[str | None] | None = None) -> list[float]:
        """One calibrated relevance probability per text, in [0, 1], rounded to 3 decimals."""
        if len(texts) == 0:
            return []
        return [round(float(p), 3) for p in self.probabilities(self.features(query, texts, titles))]
