"""`VectorCache`: MiniLM vectors for the offline model, seeded with what the index holds, kept on disk.

The offline grader and synthesizer compare the question with whole evidence items and with their
units (sentences, list items, table rows). Encoding text with MiniLM is almost all of the offline
model's time (about 11 ms a sentence on two CPU cores), so the cache:

- starts with the knowledge base's stored chunk vectors (keyed by the same text the index embedded,
  `passage_key`): a retrieved chunk is never re-encoded;
- encodes everything else in **groups** — one item's units, one question, the router's prototypes —
  each always as one batch of exactly its own texts. MiniLM's floats depend (in the 8th digit) on
  what else is in a batch, so a vector that depends only on its own group is the same whatever was
  asked before: a warm cache and a cold one give identical answers;
- keeps each group in a SQLite file beside the index when one is given (`GroupStore`), keyed by
  the embedding model and the group's texts, so a second session, an evaluation re-run or another
  process reads instead of encoding; a question (`query`) also keeps its vector as the model
  gave it, handed back to the model in a later session (`VectorCache._recall`), so that the
  retriever's search for the same question does not run the model either.

>>> import numpy as np
>>> cache = VectorCache(embed_model=None)
>>> cache.add(["port 8443"], np.array([[3.0, 4.0]]))
>>> [round(float(x), 2) for x in cache.one("port 8443")]
[0.6, 0.8]
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from llama_index.core.base.embeddings.base import BaseEmbedding

DEFAULT_MAX_ROWS = 200_000
"""About 300 MB of float32 MiniLM vectors in memory at most; the least recently used groups go first."""
STORE_FILE = "reading-vectors.sqlite"
"""The group store's file name in a knowledge base's cache folder."""
_GROUP_FORMAT = "group-v1"
_ALONE = "alone:"
"""Prefix of the store's key for a one-text group's vector as the model gave it (`VectorCache._recall`)."""


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


def group_key(model: str, texts: Sequence[str]) -> str:
    """The store's key of a group: the embedding model and the texts, in order.

    >>> group_key("m", ["a", "b"]) == group_key("m", ["a", "b"]) != group_key("m", ["b", "a"])
    True
    """
    digest = hashlib.sha256(f"{_GROUP_FORMAT}\x1e{model}\x1e".encode())
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass") + b"\x1f")
    return digest.hexdigest()


class GroupStore:
    """Encoded groups in a SQLite file, shared by threads and processes.

    A store that cannot be opened or written (a read-only folder, a full disk) warns once and
    stops storing; the cache then works from memory, with the same vectors.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        try:
            self._db = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS groups (key TEXT PRIMARY KEY, rows INTEGER, data BLOB)")
        except sqlite3.Error as exc:
            self._give_up(exc)

    def _give_up(self, exc: Exception) -> None:
        warnings.warn(f"reading-vector store {self.path} unusable ({exc}); vectors are kept in memory only",
                      RuntimeWarning, stacklevel=3)
        if self._db is not None:
            self._db.close()
        self._db = None

    def get(self, key: str, rows: int) -> np.ndarray | None:
        with self._lock:
            if self._db is None:
                return None
            try:
                row = self._db.execute("SELECT rows, data FROM groups WHERE key = ?", (key,)).fetchone()
            except sqlite3.Error as exc:
                self._give_up(exc)
                return None
        if row is None or row[0] != rows:
            return None
        return np.frombuffer(row[1], dtype=np.float32).reshape(rows, -1).copy()

    def put(self, key: str, matrix: np.ndarray) -> None:
        with self._lock:
            if self._db is None:
                return
            try:
                self._db.execute("INSERT OR IGNORE INTO groups VALUES (?, ?, ?)",
                                 (key, int(matrix.shape[0]), np.ascontiguousarray(matrix, np.float32).tobytes()))
            except sqlite3.Error as exc:
                self._give_up(exc)

    def __len__(self) -> int:
        with self._lock:
            if self._db is None:
                return 0
            return int(self._db.execute("SELECT COUNT(*) FROM groups").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


class VectorCache:
    """Unit-length vectors: seeded ones by text, encoded ones by group (MiniLM by default).

    Thread-safe: ``Lab.ask_many`` grades several questions at once through one model.
    ``store`` (a `GroupStore` or the path of its file) keeps encoded groups across sessions.
    """

    def __init__(self, embed_model: BaseEmbedding | None = None, *, max_rows: int = DEFAULT_MAX_ROWS,
                 store: GroupStore | str | Path | None = None, model_name: str = "default") -> None:
        self._embed_model = embed_model
        self._seeded: dict[str, np.ndarray] = {}
        self._groups: OrderedDict[str, np.ndarray] = OrderedDict()
        self._rows = 0
        self._max = max_rows
        self._lock = threading.Lock()
        self.store = store if isinstance(store, GroupStore) or store is None else GroupStore(store)
        self.model_name = model_name
        self.encoded = 0
        """How many texts this cache has sent to the embedding model (the rest were hits)."""
        self.read_from_store = 0
        """How many texts came from the store instead of the model."""

    @property
    def embed_model(self) -> BaseEmbedding:
        if self._embed_model is None:
            from crag_lab.embeddings import default_embed_model

            self._embed_model = default_embed_model()
        return self._embed_model

    def __len__(self) -> int:
        return len(self._seeded) + self._rows

    def add(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Remember ``vectors`` (one row per text; normalised here) for ``texts``: the index's own."""
        rows = _unit_rows(np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1))
        with self._lock:
            self._seeded.update(zip(texts, rows, strict=True))

    def group(self, texts: Sequence[str], *, searched: bool = False) -> np.ndarray:
        """A ``(len(texts), dim)`` matrix of unit vectors, encoded together as one batch if unseen.

        ``searched``: the one text is also what the retriever searches with (`query`): the store keeps its
        vector as the model gave it too, and hands it back to a later session's model (`_recall`)."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        searched = searched and len(texts) == 1
        key = group_key(self.model_name, texts)
        with self._lock:
            found = self._groups.get(key)
            if found is not None:
                self._groups.move_to_end(key)
                return found
        matrix = self.store.get(key, len(texts)) if self.store is not None else None
        if matrix is not None:
            self.read_from_store += len(texts)
            if searched:
                self._recall(texts[0], key)
        else:
            encoded = np.asarray(self.embed_model.get_text_embedding_batch(list(texts)), dtype=np.float32)
            matrix = _unit_rows(encoded)
            self.encoded += len(texts)
            if self.store is not None:
                self.store.put(key, matrix)
                if searched and callable(getattr(self._embed_model, "remember", None)):
                    self.store.put(_ALONE + key, encoded)
        with self._lock:
            if key not in self._groups:
                self._groups[key] = matrix
                self._rows += len(texts)
            while self._rows > self._max and len(self._groups) > 1:
                _, dropped = self._groups.popitem(last=False)
                self._rows -= len(dropped)
        return matrix

    def _recall(self, text: str, key: str) -> None:
        """Hand the model a text's vector as it gave it (before this cache normalised it again), when the store
        kept it: a model that remembers texts embedded alone (`crag_lab._minilm.MemoEmbedding`) then answers the
        retriever's search for the same question without running its weights. Equal to the last bit: float32
        values stored as float32."""
        remember = getattr(self._embed_model, "remember", None)
        if self.store is not None and callable(remember):
            alone = self.store.get(_ALONE + key, 1)
            if alone is not None:
                remember(text, alone[0].tolist())

    def one(self, text: str, *, searched: bool = False) -> np.ndarray:
        """The vector the index holds for ``text``, else ``text`` encoded on its own (``searched``: see `group`)."""
        with self._lock:
            seeded = self._seeded.get(text)
        return seeded if seeded is not None else self.group([text], searched=searched)[0]

    def texts(self, texts: Sequence[str]) -> np.ndarray:
        """One row per text, each as `one` gives it."""
        return np.vstack([self.one(t) for t in texts]) if texts else np.zeros((0, 0), dtype=np.float32)

    def query(self, text: str) -> np.ndarray:
        """The unit vector of a question (MiniLM embeds queries and passages alike), kept for the retriever's
        search of it in a later session too."""
        return self.one(text, searched=True)
