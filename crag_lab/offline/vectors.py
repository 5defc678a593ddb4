"""`VectorCache`: MiniLM vectors by text, seeded with what the index already holds.

The offline grader and synthesizer compare the question with whole evidence items and with their
units (sentences, list items, table rows). Re-encoding text FAISS already holds was most of the
offline model's time, so the cache starts with the knowledge base's stored chunk vectors (keyed by
the same text the index embedded, `passage_key`) and encodes only what it has not seen — grep
blocks, file excerpts, units — once, in one batch per call, remembering each vector afterwards.

>>> import numpy as np
>>> cache = VectorCache(embed_model=None)
>>> cache.add(["port 8443"], np.array([[3.0, 4.0]]))
>>> [round(float(x), 2) for x in cache.texts(["port 8443"])[0]]
[0.6, 0.8]
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from llama_index.core.base.embeddings.base import BaseEmbedding

DEFAULT_MAX_ENTRIES = 200_000
"""About 300 MB of float32 MiniLM vectors at most; the least recently used go first."""


def passage_key(text: str, path: str | None, title: str | None) -> str:
    """The text the knowledge-base index embeds for a passage: its path and title, then its lines.

    Built with LlamaIndex's own metadata template, so a chunk's key is exactly the string whose
    vector FAISS holds, and a grep block or file excerpt is embedded the same way.

    >>> passage_key("Port 8443.", "gw.md", "Gateway")
    'path: gw.md\\ntitle: Gateway\\n\\nPort 8443.'
    """
    from llama_index.core.schema import MetadataMode, TextNode

    metadata = {k: v for k, v in (("path", path), ("title", title)) if v}
    return TextNode(text=text, metadata=metadata).get_content(metadata_mode=MetadataMode.EMBED)


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    return matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)


class VectorCache:
    """Unit-length vectors by text; misses are encoded with ``embed_model`` (MiniLM by default).

    Thread-safe: ``Lab.ask_many`` grades several questions at once through one model.
    """

    def __init__(self, embed_model: BaseEmbedding | None = None, *, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self._embed_model = embed_model
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._max = max_entries
        self._lock = threading.Lock()
        self.encoded = 0
        """How many texts this cache has sent to the embedding model (the rest were hits)."""

    @property
    def embed_model(self) -> BaseEmbedding:
        if self._embed_model is None:
            from crag_lab.embeddings import default_embed_model

            self._embed_model = default_embed_model()
        return self._embed_model

    def __len__(self) -> int:
        return len(self._vectors)

    def add(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Remember ``vectors`` (one row per text; normalised here) for ``texts``."""
        rows = _unit_rows(np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1))
        with self._lock:
            for text, row in zip(texts, rows, strict=True):
                self._vectors[text] = row
                self._vectors.move_to_end(text)
            while len(self._vectors) > self._max:
                self._vectors.popitem(last=False)

    def texts(self, texts: Sequence[str]) -> np.ndarray:
        """A ``(len(texts), dim)`` matrix of unit vectors; unseen texts are encoded in one batch."""
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if missing:
            encoded = np.asarray(self.embed_model.get_text_embedding_batch(missing), dtype=np.float32)
            self.encoded += len(missing)
            self.add(missing, encoded)
        with self._lock:
            rows = [self._vectors[t] for t in texts]
        return np.vstack(rows) if rows else np.zeros((0, 0), dtype=np.float32)

    def query(self, text: str) -> np.ndarray:
        """The unit vector of a question (MiniLM embeds queries and passages alike)."""
        return self.texts([text])[0]
