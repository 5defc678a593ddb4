"""The learned router: chitchat / simple / complex from a message's MiniLM vector.

A small classifier head (one hidden layer, or multinomial logistic regression) over the frozen
all-MiniLM-L6-v2 sentence vector the offline model already computes for a question
(`crag_lab.offline.vectors.VectorCache.query`) and seven counts of the message's shape
(`shape_features`: question marks, question words, "and", "or", commas, semicolons, length),
which a mean-pooled sentence vector blurs. Trained by ``python -m crag_lab.learned.train_router``
on public training data (``crag_lab/_data/router/DATA_CARD.md``). Only the head ships, as plain
numbers in ``router.json``; predicting is two numpy products, deterministic, no torch.

A message not written in English (`crag_lab.offline.spelling.other_language`: fewer than half its words in
the English dictionary) goes to a second router of the same kind in ``other_languages/``, trained with small
talk and questions in other languages (the ChatterBot corpus, Mintaka's translations); its `Route` says
``language="other"``.

>>> router = LearnedRouter.load()  # doctest: +SKIP
>>> router.route("thanks, that helped!", VectorCache())  # doctest: +SKIP
Route(complexity='chitchat', probability=0.98, probabilities={'chitchat': 0.98, 'simple': 0.01, 'complex': 0.01})
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from crag_lab.offline.vectors import VectorCache

ROUTER_DIR = Path(__file__).resolve().parent.parent / "_data" / "router"
"""Where the trained head and its data card ship."""
ROUTER_FILE = "router.json"
TUNED_FOLDER = "tuned"
"""The token reader's adapter and head, beside ``router.json`` (`TokenReader`)."""
OTHER_LANGUAGES = "other_languages"
"""A second router (head and token reader) trained with questions and small talk in other languages, beside
``router.json``: it routes the messages `crag_lab.offline.spelling.other_language` finds not written in English."""
FEATURES = "minilm+shape-v1"
"""What the head reads: the unit MiniLM vector, then `shape_features`. Stored in ``router.json``."""
N_SHAPE_FEATURES = 7
"""How many numbers `shape_features` gives."""
_WH = re.compile(r"\b(?:what|which|who|whom|whose|when|where|why|how)\b", re.IGNORECASE)
_AND = re.compile(r"\band\b", re.IGNORECASE)
_OR = re.compile(r"\bor\b", re.IGNORECASE)


def shape_features(text: str) -> np.ndarray:
    """Seven numbers in [0, 1] about a message's shape, not its topic: question marks, question
    words and "and"s (each capped at 3), whether it has an "or", commas (capped at 3), whether it
    has a semicolon, and its length in words (capped at 40). Weighed by the trained head, not by rules.

    >>> [round(float(v), 2) for v in shape_features("Who owns X, and when was it built?")]
    [0.33, 0.67, 0.33, 0.0, 0.33, 0.0, 0.2]
    """
    return np.array([min(text.count("?"), 3) / 3, min(len(_WH.findall(text)), 3) / 3,
                     min(len(_AND.findall(text)), 3) / 3, float(bool(_OR.search(text))), min(text.count(","), 3) / 3,
                     float(";" in text), min(len(text.split()), 40) / 40], dtype=np.float32)


def features(texts: Sequence[str], vectors: np.ndarray) -> np.ndarray:
    """The head's input: each text's unit MiniLM vector followed by its `shape_features`."""
    shapes = np.vstack([shape_features(t) for t in texts]) if len(texts) else np.zeros((0, N_SHAPE_FEATURES), np.float32)
    return np.hstack([np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1), shapes])


@dataclass(frozen=True)
class Route:
    """A learned routing decision: the class, its probability and every class's probability."""

    complexity: str
    probability: float
    probabilities: dict[str, float]
    votes: dict[str, dict[str, float]] = field(default_factory=dict)
    """Each reader's own probabilities (``"vector"``: the head over the sentence vector; ``"tokens"``:
    the LoRA-tuned MiniLM), when there is more than one; ``probabilities`` is then their mean."""
    language: str = "english"
    """``"other"`` when the message was read as not English (`crag_lab.offline.spelling.other_language`) and routed by the router
    trained with other languages (`OTHER_LANGUAGES`)."""


def forward(layers: Sequence[tuple[np.ndarray, np.ndarray]], x: np.ndarray) -> np.ndarray:
    """Class probabilities of the rows of ``x``: ReLU between layers, softmax at the end."""
    h = np.asarray(x, dtype=np.float32)
    for i, (w, b) in enumerate(layers):
        h = h @ w + b
        if i < len(layers) - 1:
            h = np.maximum(h, 0.0)
    return softmax(h)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax."""
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return np.asarray(e / e.sum(axis=1, keepdims=True))


class LearnedRouter:
    """One verb: ``predict(texts, vectors) -> probabilities`` (rows: messages, columns: `classes`).

    `decide` turns probabilities into routes: the most probable class, except that ``chitchat``
    (which answers without looking anything up) needs at least ``chitchat_min``; below it the
    likelier of ``simple`` and ``complex`` is taken. ``chitchat_min`` is set by the training script
    on held-out training messages, not on any evaluation set.
    """

    def __init__(self, classes: Sequence[str], layers: Sequence[tuple[np.ndarray, np.ndarray]],
                 trained: Mapping[str, Any] | None = None, chitchat_min: float = 0.0) -> None:
        self.classes = tuple(classes)
        self.chitchat_min = float(chitchat_min)
        self.layers = [(np.asarray(w, dtype=np.float32), np.asarray(b, dtype=np.float32)) for w, b in layers]
        self.trained = dict(trained or {})
        self.folder: Path | None = None

    @staticmethod
    def load(folder: str | Path | None = None) -> LearnedRouter:
        """The router in ``folder`` (default: the one that ships), read once per process."""
        return _load(str(Path(folder or ROUTER_DIR).resolve()))

    def to_json(self) -> dict[str, Any]:
        """What ``router.json`` holds (weights rounded to 7 significant digits: float32's precision)."""
        return {"classes": list(self.classes), "features": FEATURES, "chitchat_min": self.chitchat_min,
                "layers": [{"W": [[float(f"{v:.7g}") for v in row] for row in w.tolist()],
                            "b": [float(f"{v:.7g}") for v in b.tolist()]} for w, b in self.layers],
                "trained": self.trained}

    def predict(self, texts: Sequence[str], vectors: np.ndarray) -> np.ndarray:
        """Probabilities, one row per message (its text and unit MiniLM vector), rounded to 6 places."""
        return np.round(forward(self.layers, features(texts, vectors)), 6)

    def decide(self, probabilities: np.ndarray) -> np.ndarray:
        """The index of each row's route (see the class docstring)."""
        probs = np.asarray(probabilities).reshape(-1, len(self.classes))
        best = np.argmax(probs, axis=1)
        if "chitchat" in self.classes:
            chat = self.classes.index("chitchat")
            others = probs.copy()
            others[:, chat] = -1.0
            best = np.where((best == chat) & (probs[:, chat] < self.chitchat_min), np.argmax(others, axis=1), best)
        return best

    @property
    def tuned(self) -> Mapping[str, Any]:
        """The token reader's card (``router.json``'s ``tuned``; empty when the router has none)."""
        return dict(self.trained.get("tuned") or {})

    def combine(self, vector_probs: np.ndarray, token_probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The route of each message from both readers, and their mean probabilities.

        Chitchat needs the mean's chitchat probability to be the largest and at least the token
        reader's ``chitchat_min`` (set, like the head's, on held-out training messages). Otherwise the
        message is a question, and it is ``complex`` when *either* reader finds ``complex`` likelier
        than ``simple``: a multi-fact question sent down the one-fact path loses the grading it needs,
        a one-fact question sent down the full pipeline costs a grading call. The two readers err on
        different questions (one reads what a message is about, the other how it is built).

        >>> router = LearnedRouter(("chitchat", "simple", "complex"), [], {"tuned": {"chitchat_min": 0.8}})
        >>> vector = np.array([[0.9, 0.05, 0.05], [0.0, 0.7, 0.3], [0.1, 0.6, 0.3]])
        >>> tokens = np.array([[0.9, 0.1, 0.0], [0.0, 0.9, 0.1], [0.1, 0.45, 0.45001]])
        >>> [router.classes[i] for i in router.combine(vector, tokens)[0]]
        ['chitchat', 'simple', 'complex']
        """
        mean = np.round((np.asarray(vector_probs) + np.asarray(token_probs)) / 2, 6)
        threshold = self.tuned.get("chitchat_min", 0.5)
        threshold = threshold["value"] if isinstance(threshold, Mapping) else threshold
        best = LearnedRouter(self.classes, self.layers, chitchat_min=float(threshold)).decide(mean)
        simple, complex_ = self.classes.index("simple"), self.classes.index("complex")
        either = (np.asarray(vector_probs)[:, complex_] > np.asarray(vector_probs)[:, simple]) | \
                 (np.asarray(token_probs)[:, complex_] > np.asarray(token_probs)[:, simple])
        chat = self.classes.index("chitchat") if "chitchat" in self.classes else -1
        return np.where((best != chat) & either, complex_, best), mean

    def route(self, query: str, vectors: VectorCache) -> Route:
        """The route of one message, from the vector the offline model uses for it anyway (when that
        cache embeds with another model than the bundled MiniLM, from MiniLM's own vector)."""
        from crag_lab.embeddings import is_minilm
        from crag_lab.offline.spelling import other_language

        other = self.other_languages
        if other is not None and other_language(query):
            return dataclasses.replace(other.route(query, vectors), language="other")
        cache = vectors if is_minilm(vectors.embed_model) else _minilm_vectors()
        vector = np.asarray(cache.query(query), dtype=np.float32).reshape(-1)
        wanted = self.layers[0][0].shape[0] - N_SHAPE_FEATURES
        if vector.size != wanted:
            raise ValueError(f"the learned router reads {wanted}-dimensional all-MiniLM-L6-v2 vectors; the embedding "
                             f"model gives {vector.size}: use CRAG_OFFLINE_ROUTER=rules, or the bundled MiniLM")
        probs = self.predict([query], vector)
        named = lambda row: {c: float(p) for c, p in zip(self.classes, row, strict=True)}  # noqa: E731
        if not self.tuned:
            best = int(self.decide(probs)[0])
            return Route(self.classes[best], float(probs[0][best]), named(probs[0]))
        tokens = self.token_reader.predict([query])
        chosen, mean = self.combine(probs, tokens)
        best = int(chosen[0])
        return Route(self.classes[best], float(mean[0][best]), named(mean[0]),
                     {"vector": named(probs[0]), "tokens": named(tokens[0])})

    @functools.cached_property
    def other_languages(self) -> LearnedRouter | None:
        """The router for messages in other languages, shipped beside this one (None when absent); looked up once,
        since every message asks."""
        if self.folder is None or not (self.folder / OTHER_LANGUAGES / ROUTER_FILE).is_file():
            return None
        return _load(str(self.folder / OTHER_LANGUAGES))

    @property
    def token_reader(self) -> TokenReader:
        """The LoRA-tuned MiniLM beside ``router.json`` (loaded on first use, once per process)."""
        if self.folder is None:
            raise FileNotFoundError("this router was not loaded from a folder, so it has no token reader")
        return TokenReader.load(self.folder / str(self.tuned.get("folder", TUNED_FOLDER)),
                                int(self.tuned.get("max_length", 64)), len(self.classes))


class TokenReader:
    """The bundled MiniLM with a LoRA adapter and a head over the router's classes, merged, on CPU:
    it reads a message's own tokens, where the head reads a frozen mean of them (the sentence vector).
    Trained by ``crag_lab/learned/fit_router.py`` (the data card says how)."""

    def __init__(self, model: Any, tokenizer: Any, max_length: int) -> None:
        self._model, self._tokenizer, self.max_length = model, tokenizer, max_length
        self._memo: dict[str, np.ndarray] = {}

    @staticmethod
    def load(folder: str | Path, max_length: int = 64, classes: int = 3) -> TokenReader:
        """The adapter and head in ``folder`` (written by ``fit_router.py``) on the bundled MiniLM, merged,
        on CPU; loaded once per process and folder."""
        return _token_reader(str(Path(folder).resolve()), max_length, classes)

    def forget(self) -> None:
        """Forget the messages read so far (the next read of each runs the model again)."""
        self._memo.clear()

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        """Probabilities, one row per message, rounded to 6 places; each message read alone (no padding)."""
        import torch

        rows = []
        for text in texts:
            if text not in self._memo:
                if len(self._memo) > 4096:
                    self._memo.clear()
                enc = self._tokenizer([text], truncation=True, max_length=self.max_length, return_tensors="pt")
                with torch.inference_mode():
                    self._memo[text] = np.round(torch.softmax(self._model(**enc).logits.float(), dim=-1)[0].numpy(), 6)
            rows.append(self._memo[text])
        return np.vstack(rows) if rows else np.zeros((0, 3), np.float32)


@functools.lru_cache(maxsize=2)
def _token_reader(folder: str, max_length: int, classes: int) -> TokenReader:
    import torch

    from crag_lab.learned.scorer import base_model, merged

    if not (Path(folder) / "adapter_model.safetensors").is_file():
        raise FileNotFoundError(f"{folder}: the router's token reader is missing; reinstall crag_lab, or train it "
                                "with crag_lab/learned/fit_router.py (crag_lab/_data/router/DATA_CARD.md)")
    torch.manual_seed(0)
    model, tokenizer = base_model(num_labels=classes)
    return TokenReader(merged(model, folder), tokenizer, max_length)


@functools.lru_cache(maxsize=1)
def _minilm_vectors() -> VectorCache:
    from crag_lab.embeddings import minilm
    from crag_lab.offline.vectors import VectorCache

    return VectorCache(minilm(), model_name="minilm")


@functools.lru_cache(maxsize=4)
def _load(folder: str) -> LearnedRouter:
    path = Path(folder) / ROUTER_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no trained router here; train one with "
                                "python -m crag_lab.learned.train_router --train-dir DIR")
    raw = json.loads(path.read_text(encoding="utf-8"))
    if raw.get("features") != FEATURES:
        raise ValueError(f"{path}: made for features {raw.get('features')!r}, this crag_lab reads {FEATURES!r}; "
                         "train it again with python -m crag_lab.learned.train_router --train-dir DIR")
    router = LearnedRouter(raw["classes"], [(layer["W"], layer["b"]) for layer in raw["layers"]], raw.get("trained"),
                           float(raw.get("chitchat_min", 0.0)))
    router.folder = Path(folder)
    return router


def fingerprint(folder: str | Path | None = None) -> str:
    """A short hash of a router's head and token reader, and of the router for other languages beside them
    (default: the one that ships), read without loading a model: replies routed by another router are told
    apart by it (`OfflineModel.cache_identity`)."""
    digest = hashlib.sha256()
    root = Path(folder or ROUTER_DIR)
    for base in (root, root / OTHER_LANGUAGES):
        for path in (base / ROUTER_FILE, base / TUNED_FOLDER / "adapter_model.safetensors"):
            if path.is_file():
                digest.update(path.read_bytes())
    return digest.hexdigest()[:12]
