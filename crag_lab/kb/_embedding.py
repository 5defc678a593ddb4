"""The embedding model of a knowledge base: loaded on first use, every vector of unit length.

`UnitEmbedding` wraps any LlamaIndex embedding model so that FAISS inner products are cosines;
`embed_texts` is the only place a build spends model time.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import PrivateAttr

from crag_lab._text import encodable

DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
# What embeds a build's texts: ``(model, texts) -> float32 rows`` in the texts' order (`embed_texts`, or
# `crag_lab.ray_index.RayDataEmbedder`).
Embedder = Callable[[BaseEmbedding, list[str]], np.ndarray]
_EMBED_BATCH = 64


class UnitEmbedding(BaseEmbedding):
    """Wraps an embedding model: creates it on first use and L2-normalises every vector.

    Normalising here makes FAISS inner products cosines whatever model is plugged in, and the
    lazy factory keeps ``KnowledgeBase.load`` from paying the seconds a model takes to load.
    """

    _factory: Callable[[], BaseEmbedding] = PrivateAttr()
    _model: BaseEmbedding | None = PrivateAttr(default=None)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, factory: Callable[[], BaseEmbedding], *, model_name: str,
                 embed_batch_size: int = _EMBED_BATCH) -> None:
        super().__init__(model_name=model_name, embed_batch_size=embed_batch_size)
        self._factory = factory

    @property
    def factory(self) -> Callable[[], BaseEmbedding]:
        """What creates the wrapped model: a Ray Data worker calls it to load its own copy."""
        return self._factory

    @property
    def inner(self) -> BaseEmbedding:
        """The wrapped model, created now if it was not yet."""
        with self._lock:
            if self._model is None:
                self._model = self._factory()
            return self._model

    @property
    def loaded(self) -> bool:
        return self._model is not None

    # Lone surrogates (a model's plan can hold them) make tokenizers raise, and LlamaIndex then
    # retries for seconds: ``encodable`` replaces them first.
    def _get_query_embedding(self, query: str) -> Embedding:
        return _unit(self.inner.get_query_embedding(encodable(query)))

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> Embedding:
        return _unit(self.inner.get_text_embedding(encodable(text)))

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return [_unit(v) for v in self.inner.get_text_embedding_batch([encodable(t) for t in texts])]


def _unit(vector: Sequence[float]) -> list[float]:
    array = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    return (array / norm if norm > 0 else array).tolist()


def model_id(model: BaseEmbedding) -> str:
    """A stable name for the manifest: the bundled MiniLM by its hub name, others by class and name."""
    from crag_lab.embeddings import model_dir

    name = str(getattr(model, "model_name", "unknown"))
    if os.path.isabs(name):
        if os.path.normpath(name) == os.path.normpath(model_dir()):
            return DEFAULT_MODEL_ID
        name = Path(name).name
    return f"{type(model).__name__}:{name}"


def unit_embedding(embed_model: BaseEmbedding | None) -> UnitEmbedding:
    if isinstance(embed_model, UnitEmbedding):
        return embed_model
    if embed_model is None:
        from crag_lab.embeddings import default_embed_model

        return UnitEmbedding(default_embed_model, model_name=DEFAULT_MODEL_ID)
    model = embed_model
    return UnitEmbedding(lambda: model, model_name=model_id(model))


def embed_texts(model: BaseEmbedding, texts: list[str]) -> np.ndarray:
    """Embed texts as unit float32 rows, in the order given (the only place a local build spends model time).

    The model gets the texts in the batches `embedding_batches` cuts: longest first, so that each
    batch pads its texts to about the same length (chunks in file order padded to their batch's
    longest cost the bundled MiniLM half again the tokens). `crag_lab.ray_index` embeds the same
    batches on Ray Data workers, which is why its vectors are byte-equal to these.
    """
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    order, batches = embedding_batches(model, texts)
    return in_text_order(order, [embed_batch(model, batch) for batch in batches])


def embedding_batches(model: BaseEmbedding, texts: list[str]) -> tuple[np.ndarray, list[list[str]]]:
    """The batches a build hands the model, and ``order`` (the position in ``texts`` of each text they hold).

    Longest first, cut every ``model.embed_batch_size`` texts (how LlamaIndex's
    ``get_text_embedding_batch`` cuts a list). Longest means most tokens when the model's tokenizer is
    at hand (``token_lengths``), else most characters (what ``SentenceTransformer.encode`` sorts by).
    Which texts share a batch changes their vectors in the last float digits (padding), so every path
    that must give the same vectors embeds exactly these batches.
    """
    order = np.argsort([-n for n in _text_lengths(model, texts)], kind="stable")
    ordered = [texts[i] for i in order]
    size = max(1, int(model.embed_batch_size))
    return order, [ordered[i:i + size] for i in range(0, len(ordered), size)]


def embed_batch(model: BaseEmbedding, texts: list[str]) -> np.ndarray:
    """One batch of `embedding_batches` through the model: a float32 row per text (one model call)."""
    vectors = np.asarray(model.get_text_embedding_batch(texts), dtype=np.float32)
    return vectors.reshape(len(texts), -1)


def in_text_order(order: np.ndarray, batch_vectors: Sequence[np.ndarray]) -> np.ndarray:
    """The vectors of `embedding_batches`' batches, each in its text's row: the inverse of its ``order``."""
    vectors = np.concatenate(list(batch_vectors))
    rows = np.empty_like(vectors)
    rows[order] = vectors
    return rows


def _text_lengths(model: BaseEmbedding, texts: list[str]) -> list[int]:
    from crag_lab.embeddings import token_lengths

    inner = model.inner if isinstance(model, UnitEmbedding) else model
    return token_lengths(inner, texts) or [len(text) for text in texts]
