"""Where the chunk vectors of an index live: a FAISS file in the index folder, or a Qdrant collection.

Both are LlamaIndex vector stores under the same ``VectorStoreIndex``, docstore and manifest; only
the vectors move. `FaissVectors` is the default (``IndexFlatIP`` over unit vectors). `QdrantVectors`
keeps them in a Qdrant collection (cosine distance) through ``llama-index-vector-stores-qdrant``:
a server or cluster by URL, or Qdrant's embedded local mode in a folder. Each build writes a new
collection, named ``<prefix>-<knowledge base>-<index folder id>``, so that the ``CURRENT`` swap stays
atomic; `QdrantVectors.drop_others` removes the collections of older builds of the same
knowledge base that the index folder's ledger records (`crag_lab.kb._owned`), and no others. The
manifest's ``vector_store`` entry says which one an index uses (none: FAISS).

Qdrant takes UUIDs or integers as point ids and a chunk id is a sha1 digest, so a point's id is the
digest's first 128 bits as a UUID (`point_id`); the node in its payload keeps the chunk id.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import hashlib
import threading
import uuid
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core import VectorStoreIndex

from crag_lab.config import VectorStoreConfig

INSTALL_HINT = "pip install 'crag-lab[scale]' (or: pip install qdrant-client llama-index-vector-stores-qdrant)"
_RETRIEVE_BATCH = 256


def point_id(chunk_id: str) -> str:
    """The Qdrant point id of a chunk: its sha1 id's first 128 bits, as a UUID.

    >>> point_id("a94a8fe5ccb19ba61c4c0873d391e987982fbbd3")
    'a94a8fe5-ccb1-9ba6-1c4c-0873d391e987'
    """
    return str(uuid.UUID(hex=chunk_id[:32]))


class FaissVectors:
    """Vectors in a flat FAISS inner-product index, persisted in the index folder."""

    kind = "faiss"

    def entry(self) -> dict[str, Any] | None:
        return None  # the manifests of FAISS indexes stay as they always were

    def new_store(self, dim: int, folder_id: str) -> Any:
        import faiss
        from llama_index.vector_stores.faiss import FaissVectorStore

        return FaissVectorStore(faiss_index=faiss.IndexFlatIP(dim))

    def load_store(self, folder: Path) -> Any:
        from llama_index.vector_stores.faiss import FaissVectorStore

        return FaissVectorStore.from_persist_dir(str(folder))

    def check(self, index: VectorStoreIndex, ids: list[str], dim: int) -> None:
        faiss_index = index.vector_store.client  # type: ignore[attr-defined]
        if faiss_index.ntotal != len(ids) or faiss_index.d != dim:
            raise ValueError(f"the FAISS file holds {faiss_index.ntotal} vectors of dimension {faiss_index.d}, "
                             f"the manifest lists {len(ids)} chunks of dimension {dim}")
        if index.index_struct.nodes_dict != {str(i): cid for i, cid in enumerate(ids)}:
            raise ValueError("the vector positions do not match the manifest's chunk ids")

    def vectors(self, index: VectorStoreIndex, ids: list[str]) -> np.ndarray:
        faiss_index = index.vector_store.client  # type: ignore[attr-defined]
        return np.asarray(faiss_index.reconstruct_n(0, faiss_index.ntotal), dtype=np.float32)

    def drop_others(self, keep: str | None, owned: Collection[str] = ()) -> set[str]:
        return set()


# Embedded Qdrant allows one client per folder per process (it locks the folder), and a ":memory:"
# client holds its own data: a process shares one client per location.
_LOCAL_CLIENTS: dict[str, Any] = {}
_LOCAL_LOCK = threading.Lock()


@atexit.register
def _close_local_clients() -> None:
    """Close embedded clients while the interpreter can still run their clean-up."""
    with _LOCAL_LOCK:
        for client in _LOCAL_CLIENTS.values():
            client.close()
        _LOCAL_CLIENTS.clear()


def _qdrant() -> Any:
    try:
        import qdrant_client
    except ImportError as exc:
        raise ImportError(f"vector_store='qdrant' needs the Qdrant client: {INSTALL_HINT}") from exc
    return qdrant_client


@functools.cache
def _store_class() -> type:
    """``QdrantVectorStore`` with chunk ids turned into point ids (see the module docstring)."""
    try:
        from llama_index.vector_stores.qdrant import QdrantVectorStore
    except ImportError as exc:
        raise ImportError(f"vector_store='qdrant' needs LlamaIndex's Qdrant store: {INSTALL_HINT}") from exc

    class ChunkQdrantStore(QdrantVectorStore):
        def _build_points(self, nodes: Any, sparse_vector_name: str) -> tuple[list[Any], list[str]]:
            points, ids = super()._build_points(nodes, sparse_vector_name)
            for point in points:
                point.id = point_id(str(point.id))
            return points, ids

        def query(self, query: Any, **kwargs: Any) -> Any:
            # The index's retriever asks for "any of the index's node ids": the whole collection. As a
            # Qdrant filter that list would be the size of the corpus (and its ids are not point ids).
            return super().query(dataclasses.replace(query, node_ids=None), **kwargs)

    return ChunkQdrantStore


class QdrantVectors:
    """Vectors in Qdrant collections: a server at ``url``, or the embedded local mode at ``path``."""

    kind = "qdrant"

    def __init__(self, *, url: str | None, path: str | None, api_key: str | None, prefix: str, cache: Path,
                 collection: str | None = None) -> None:
        self.url, self.path, self.api_key = url, path, api_key
        self.prefix, self.cache, self.collection = prefix, cache, collection
        self.kb_key = hashlib.sha1(str(cache).encode("utf-8")).hexdigest()[:10]

    @classmethod
    def configured(cls, config: VectorStoreConfig, cache: Path, entry: dict[str, Any] | None = None) -> QdrantVectors:
        """From a config (where to connect) and, for an existing index, its manifest entry (which collection)."""
        entry = entry or {}
        url = config.qdrant_url if config.vector_store == "qdrant" and config.qdrant_url else entry.get("url")
        path = None if url else (config.qdrant_path or entry.get("path") or "qdrant")
        if path not in (None, ":memory:") and not Path(path).is_absolute():
            path = str(cache / path)
        key = config.qdrant_api_key.get_secret_value() if config.qdrant_api_key else None
        return cls(url=url, path=path, api_key=key, prefix=entry.get("prefix", config.collection_prefix), cache=cache,
                   collection=entry.get("collection"))

    @property
    def client(self) -> Any:
        qdrant_client = _qdrant()
        if self.url:
            return _server_client(qdrant_client, self.url, self.api_key)
        location = str(self.path)
        with _LOCAL_LOCK:
            if location not in _LOCAL_CLIENTS:
                _LOCAL_CLIENTS[location] = (qdrant_client.QdrantClient(location=":memory:") if location == ":memory:"
                                            else qdrant_client.QdrantClient(path=location))
            return _LOCAL_CLIENTS[location]

    def entry(self) -> dict[str, Any]:
        path = self.path
        if path is not None and path != ":memory:" and Path(path).is_relative_to(self.cache):
            path = Path(path).relative_to(self.cache).as_posix()  # the folder may move with its knowledge base
        where: dict[str, Any] = {"url": self.url} if self.url else {"path": path}
        return {"kind": "qdrant", "collection": self.collection, "prefix": self.prefix, **where}

    def new_store(self, dim: int, folder_id: str) -> Any:
        self.collection = f"{self.prefix}-{self.kb_key}-{folder_id}"
        return _store_class()(collection_name=self.collection, client=self.client, index_doc_id=False)

    def load_store(self, folder: Path) -> Any:
        if not self.collection or not self.client.collection_exists(self.collection):
            raise ValueError(f"Qdrant collection {self.collection!r} is missing at {self.url or self.path}")
        return _store_class()(collection_name=self.collection, client=self.client, index_doc_id=False)

    def check(self, index: VectorStoreIndex, ids: list[str], dim: int) -> None:
        info = self.client.get_collection(self.collection)
        size = info.config.params.vectors.size
        count = self.client.count(self.collection, exact=True).count
        if count != len(ids) or size != dim:
            raise ValueError(f"Qdrant collection {self.collection!r} holds {count} vectors of dimension {size}, "
                             f"the manifest lists {len(ids)} chunks of dimension {dim}")
        if index.index_struct.nodes_dict != {cid: cid for cid in ids}:
            raise ValueError("the stored nodes do not match the manifest's chunk ids")

    def vectors(self, index: VectorStoreIndex, ids: list[str]) -> np.ndarray:
        """The vectors of ``ids``, in that order (as Qdrant holds them: unit length, float32)."""
        rows: dict[str, list[float]] = {}
        for start in range(0, len(ids), _RETRIEVE_BATCH):
            wanted = [point_id(cid) for cid in ids[start:start + _RETRIEVE_BATCH]]
            for point in self.client.retrieve(self.collection, ids=wanted, with_vectors=True, with_payload=False):
                vector = point.vector
                rows[str(point.id)] = next(iter(vector.values())) if isinstance(vector, dict) else vector
        missing = [cid for cid in ids if point_id(cid) not in rows]
        if missing:
            raise ValueError(f"Qdrant collection {self.collection!r} lacks {len(missing)} chunk(s), e.g. {missing[0]}")
        return np.asarray([rows[point_id(cid)] for cid in ids], dtype=np.float32)

    def drop_others(self, keep: str | None, owned: Collection[str] = ()) -> set[str]:
        """Drop the collections of this knowledge base in ``owned`` (the ledger's: older builds, killed
        builds) other than ``keep``; returns those dropped. A collection no ledger records is never dropped."""
        mine = f"{self.prefix}-{self.kb_key}-"
        dropped = set()
        for found in self.client.get_collections().collections:
            if found.name in owned and found.name.startswith(mine) and found.name != keep:
                self.client.delete_collection(found.name)
                dropped.add(found.name)
        return dropped


@functools.lru_cache(maxsize=8)
def _server_client(qdrant_client: Any, url: str, api_key: str | None) -> Any:
    return qdrant_client.QdrantClient(url=url, api_key=api_key)


VectorBackend = FaissVectors | QdrantVectors


def build_backend(config: VectorStoreConfig | None, cache: Path) -> VectorBackend:
    """Where a build writes its vectors: ``config`` (default: `VectorStoreConfig` from the environment)."""
    config = config or VectorStoreConfig()
    return QdrantVectors.configured(config, cache) if config.vector_store == "qdrant" else FaissVectors()


def stored_backend(entry: Any, cache: Path, config: VectorStoreConfig | None = None) -> VectorBackend:
    """Where an index's vectors are: its manifest's ``vector_store`` entry (None: FAISS). A Qdrant
    ``config`` (or ``CRAG_QDRANT_URL``) may say where the server is now."""
    if entry is None:
        return FaissVectors()
    if not isinstance(entry, dict) or entry.get("kind") != "qdrant":
        raise ValueError(f"unknown vector store {entry!r} in the manifest; this crag_lab reads FAISS and 'qdrant'")
    if config is None or config.vector_store != "qdrant":
        config = VectorStoreConfig(vector_store="qdrant")
    return QdrantVectors.configured(config, cache, entry)


def same_place(a: VectorBackend, b: VectorBackend) -> bool:
    """Whether two backends keep vectors in the same store (a build may then keep an index as it is)."""
    if isinstance(a, FaissVectors) or isinstance(b, FaissVectors):
        return type(a) is type(b)
    return (a.url, a.path, a.prefix) == (b.url, b.path, b.prefix)
