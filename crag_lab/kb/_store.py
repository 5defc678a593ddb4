"""The index on disk: a LlamaIndex ``VectorStoreIndex`` (FAISS, or Qdrant), a manifest, and atomic swaps.

Layout of the index folder (``cache_dir``, by default ``<root>/.crag_index/``)::

    CURRENT                 one line: the name of the live index folder
    index-<random>/         manifest.json + LlamaIndex's docstore/index store + the FAISS file
                            (or, for Qdrant, a ``vector_store`` entry in the manifest naming the collection)
    qdrant/                 embedded local Qdrant, when that is where the vectors are
    .tmp-*                  a build in progress, or the leftovers of a killed one
    crag-lab-owned.json     the ledger: every entry (and Qdrant collection) a build created here
    crag-lab.lock           the lock that builds of this folder take in turn

`write_index` writes a complete new ``index-*`` folder (first as ``.tmp-*``), then replaces
``CURRENT`` atomically with ``os.replace`` (`swap_current`); a killed build therefore leaves the
previous index live, and `cleanup` removes the leftovers. Every entry is recorded in the ledger
before it is created, and `cleanup` removes ledger entries only (`crag_lab.kb._owned`): files of the
user's that look like ours, and the folders of an index built before the ledger, are never removed.
The manifest records, per file, its sha256 and chunk ids, the embedding model and the chunk settings.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core import StorageContext, VectorStoreIndex, load_index_from_storage
from llama_index.core.schema import BaseNode, MetadataMode, TextNode

from crag_lab.config import VectorStoreConfig
from crag_lab.kb import _embedding
from crag_lab.kb._backends import VectorBackend, stored_backend
from crag_lab.kb._chunking import Chunk, ChunkSettings
from crag_lab.kb._embedding import UnitEmbedding
from crag_lab.kb._errors import IndexCorruptError, IndexMissingError
from crag_lab.kb._files import INDEX_DIRNAME
from crag_lab.kb._owned import Ledger

FORMAT_VERSION = 1

_CURRENT = "CURRENT"
_INDEX_PREFIX = "index-"
_TMP_PREFIX = ".tmp-"
_MANIFEST = "manifest.json"
_NODE_EXCLUDED_KEYS = ["line_start", "line_end"]


def text_node(chunk: Chunk) -> TextNode:
    """The LlamaIndex node of a chunk; path and title are part of the embedded text."""
    return TextNode(
        id_=chunk.id,
        text=chunk.text,
        metadata={
            "path": chunk.path,
            "title": chunk.title,
            "line_start": chunk.line_start,
            "line_end": chunk.line_end,
        },
        excluded_embed_metadata_keys=list(_NODE_EXCLUDED_KEYS),
        excluded_llm_metadata_keys=list(_NODE_EXCLUDED_KEYS),
    )


def chunk_of(node: BaseNode) -> Chunk:
    meta = node.metadata
    return Chunk(
        id=node.node_id,
        path=str(meta["path"]),
        text=node.get_content(metadata_mode=MetadataMode.NONE),
        line_start=int(meta["line_start"]),
        line_end=int(meta["line_end"]),
        title=str(meta["title"]),
    )


def embedded_nodes(
    embed: UnitEmbedding, chunks: list[Chunk], unchanged: set[str], previous: Stored | None,
    embedder: _embedding.Embedder | None = None,
) -> tuple[list[TextNode], int]:
    """One node per chunk with its vector: reused from ``previous`` for unchanged files, embedded
    (by ``embedder``; default `_embedding.embed_texts`, here) for the others. Also returns how many chunks were embedded."""
    nodes = [text_node(chunk) for chunk in chunks]
    fresh = [i for i, chunk in enumerate(chunks) if chunk.path not in unchanged]
    texts = [nodes[i].get_content(metadata_mode=MetadataMode.EMBED) for i in fresh]
    new_vectors = (embedder or _embedding.embed_texts)(embed, texts)
    if previous is not None and unchanged:
        old_vectors = previous.vectors()
        row = {chunk.id: i for i, chunk in enumerate(previous.chunks)}
        for node, chunk in zip(nodes, chunks, strict=True):
            if chunk.path in unchanged:
                node.embedding = old_vectors[row[chunk.id]].tolist()
    for i, vector in zip(fresh, new_vectors, strict=True):
        nodes[i].embedding = vector.tolist()
    dim = len(nodes[0].embedding or [])
    if any(len(node.embedding or []) != dim for node in nodes):
        raise ValueError(f"embedding model {embed.model_name!r} returned vectors of different sizes")
    return nodes, len(fresh)


def check_manifest(data: Any) -> dict[str, Any]:
    """The manifest if its shape is right; raises ``ValueError`` saying what is wrong."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("format") != FORMAT_VERSION:
        raise ValueError(f"format {data.get('format')!r}, this version of crag_lab reads format {FORMAT_VERSION}")
    embedding = data.get("embedding")
    if not isinstance(embedding, dict) or not isinstance(embedding.get("model"), str):
        raise ValueError("missing 'embedding.model'")
    if not isinstance(embedding.get("dim"), int) or embedding["dim"] <= 0:
        raise ValueError("missing 'embedding.dim'")
    if not isinstance(data.get("chunking"), dict):
        raise ValueError("missing 'chunking'")
    files = data.get("files")
    if not isinstance(files, dict):
        raise ValueError("missing 'files'")
    for path, entry in files.items():
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("sha256"), str)
            and isinstance(entry.get("title"), str)
            and isinstance(entry.get("chunks"), list)
            and all(isinstance(c, str) for c in entry["chunks"])
        ):
            raise ValueError(f"bad entry for file {path!r}")
    return data


def _chunk_ids(manifest: dict[str, Any]) -> list[str]:
    return [cid for entry in manifest["files"].values() for cid in entry["chunks"]]


def _rebuild_hint(root: Path) -> str:
    return f"run `crag-lab index {root}` (or KnowledgeBase.build({str(root)!r}))"


@dataclass(frozen=True)
class Stored:
    """A persisted index read back from disk."""

    folder: Path
    manifest: dict[str, Any]
    index: VectorStoreIndex
    chunks: list[Chunk]
    backend: VectorBackend

    def vectors(self) -> np.ndarray:
        """Every chunk's vector, in manifest order (``chunks`` order)."""
        return self.backend.vectors(self.index, _chunk_ids(self.manifest))


def cache_path(root: Path, cache_dir: str | os.PathLike[str] | None) -> Path:
    return Path(cache_dir).expanduser().resolve() if cache_dir is not None else root / INDEX_DIRNAME


def read_stored(root: Path, cache: Path, embed: UnitEmbedding, vector_store: VectorStoreConfig | None = None) -> Stored:
    """Read the live index; ``IndexMissingError`` or ``IndexCorruptError`` if that is impossible.

    Its manifest says where the vectors are (`crag_lab.kb._backends`); a Qdrant ``vector_store``
    config may say where that server is now. Loads take no lock: when a concurrent build swaps
    ``CURRENT`` (and removes the folder it named) while this one reads, the read starts again
    from the new ``CURRENT`` instead of reporting a damaged index.
    """
    pointer = cache / _CURRENT
    for _ in range(_READ_ATTEMPTS):
        if not pointer.is_file():
            raise IndexMissingError(f"no index for knowledge base {str(root)!r} in {str(cache)!r}: {_rebuild_hint(root)}")
        try:
            name = pointer.read_text(encoding="utf-8").strip()
            return _read_folder(pointer, name, cache, embed, vector_store)
        except (IndexMissingError, ImportError):
            raise
        except Exception as exc:  # any unreadable piece means the folder cannot be trusted
            if _current_name(pointer) not in (name, None):
                continue  # a concurrent build moved CURRENT on: read the new index
            raise IndexCorruptError(
                f"the index of knowledge base {str(root)!r} in {str(cache)!r} is unreadable "
                f"({type(exc).__name__}: {exc}); {_rebuild_hint(root)} to repair it"
            ) from exc
    raise IndexCorruptError(f"the index of knowledge base {str(root)!r} in {str(cache)!r} changed {_READ_ATTEMPTS} "
                            f"times while it was read; try again when the builds writing it have finished")


_READ_ATTEMPTS = 3


def _current_name(pointer: Path) -> str | None:
    try:
        return pointer.read_text(encoding="utf-8").strip()
    except OSError:
        return None


def _read_folder(pointer: Path, name: str, cache: Path, embed: UnitEmbedding,
                 vector_store: VectorStoreConfig | None) -> Stored:
    if not re.fullmatch(rf"{_INDEX_PREFIX}[0-9a-f]+", name):
        raise ValueError(f"{str(pointer)!r} does not name an index folder")
    folder = cache / name
    manifest_path = folder / _MANIFEST
    manifest = check_manifest(json.loads(manifest_path.read_text(encoding="utf-8")))
    backend = stored_backend(manifest.get("vector_store"), cache, vector_store)
    store = backend.load_store(folder)
    context = StorageContext.from_defaults(persist_dir=str(folder), vector_store=store)
    index = load_index_from_storage(context, embed_model=embed)
    if not isinstance(index, VectorStoreIndex):
        raise ValueError("the stored index is not a VectorStoreIndex")
    ids = _chunk_ids(manifest)
    backend.check(index, ids, manifest["embedding"]["dim"])
    chunks = [chunk_of(node) for node in index.docstore.get_nodes(ids)]
    return Stored(folder, manifest, index, chunks, backend)


def _write_json(path: Path, data: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, ensure_ascii=False)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())


def write_index(
    cache: Path, nodes: list[TextNode], manifest: dict[str, Any], embed: UnitEmbedding, backend: VectorBackend,
    ledger: Ledger,
) -> tuple[Path, VectorStoreIndex]:
    """Persist a complete index folder beside the live one (its vectors where ``backend`` keeps them),
    then make it live atomically. Each entry (and collection) goes into ``ledger`` before it is made."""
    tmp = ledger.create_dir(_TMP_PREFIX)
    folder_id = uuid.uuid4().hex[:16]
    try:
        store = backend.new_store(manifest["embedding"]["dim"], folder_id)
        collection = getattr(backend, "collection", None)
        if collection is not None:
            ledger.record_collection(collection)
        context = StorageContext.from_defaults(vector_store=store)
        # The docstore keeps every node even where the vector store holds text too (Qdrant): chunks and BM25 read it.
        index = VectorStoreIndex(nodes, storage_context=context, embed_model=embed, store_nodes_override=True)
        context.persist(persist_dir=str(tmp))
        entry = backend.entry()
        if entry is not None:
            manifest["vector_store"] = entry
        _write_json(tmp / _MANIFEST, manifest)
        folder = cache / f"{_INDEX_PREFIX}{folder_id}"
        ledger.record(folder.name)
        if os.path.lexists(folder):  # a rename would replace an empty folder that is not ours
            raise FileExistsError(f"{str(folder)!r} exists already")
        os.replace(tmp, folder)
    except BaseException:
        ledger.remove([tmp.name])
        raise
    swap_current(cache, folder.name, ledger)
    return folder, index


def swap_current(cache: Path, name: str, ledger: Ledger) -> None:
    """Point ``CURRENT`` at ``name`` with one atomic rename (of a temporary file ``ledger`` records)."""
    tmp = ledger.reserve(f"{_TMP_PREFIX}{_CURRENT}-")
    with open(tmp, "x", encoding="utf-8") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, cache / _CURRENT)


def cleanup(cache: Path, keep: str, ledger: Ledger, backend: VectorBackend | None = None) -> None:
    """Remove the old index folders and the leftovers of killed builds (and their Qdrant collections)
    that ``ledger`` records; anything else in the folder is left alone, whatever its name."""
    if backend is not None:
        ledger.forget_collections(backend.drop_others(getattr(backend, "collection", None), ledger.collections))
    ledger.remove(sorted(name for name in ledger.entries
                         if name not in (_CURRENT, keep) and name.startswith((_INDEX_PREFIX, _TMP_PREFIX))))


def previous_index(
    root: Path, cache: Path, embed: UnitEmbedding, settings: ChunkSettings, vector_store: VectorStoreConfig | None = None
) -> tuple[Stored | None, str | None]:
    """The live index and why its vectors cannot be reused (None: reusable)."""
    try:
        previous = read_stored(root, cache, embed, vector_store)
    except IndexMissingError:
        return None, "no previous index"
    except IndexCorruptError as exc:
        return None, f"previous index unreadable: {exc.__cause__}"
    if previous.manifest["embedding"]["model"] != embed.model_name:
        return previous, f"embedding model changed from {previous.manifest['embedding']['model']!r}"
    if previous.manifest["chunking"] != settings.as_dict():
        return previous, "chunk settings changed"
    return previous, None
