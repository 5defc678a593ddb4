"""The persisted, incrementally updated index of a knowledge base.

A ``KnowledgeBase`` is a LlamaIndex ``VectorStoreIndex`` on a ``FaissVectorStore``
(``faiss.IndexFlatIP`` over unit vectors, so scores are cosines) plus a ``manifest.json`` that
records, per file, its sha256 and chunk ids. ``build`` re-embeds only the files whose hash
changed; ``load`` embeds nothing and loads the embedding model only when a query needs it.

On-disk layout (``cache_dir``, by default ``<root>/.crag_index/``)::

    CURRENT                 one line: the name of the live index folder
    index-<random>/         manifest.json + LlamaIndex's docstore/index store + the FAISS file
    .tmp-*                  a build in progress, or the leftovers of a killed one

A build writes a complete new ``index-*`` folder (first as ``.tmp-*``), then replaces
``CURRENT`` atomically with ``os.replace``; a killed build therefore leaves the previous index
live, and the next build removes the leftovers. Concurrent builds of one folder are not
supported.
"""

from __future__ import annotations

import bisect
import difflib
import json
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath
from typing import Any, TypedDict

import numpy as np
from llama_index.core import StorageContext, VectorStoreIndex, load_index_from_storage
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode, MetadataMode, TextNode

from crag_lab._text import encodable
from crag_lab.kb._documents import (
    INDEX_DIRNAME,
    TEXT_EXTENSIONS,
    Chunk,
    ChunkSettings,
    LineReader,
    LoadWarning,
    binary_warning,
    chunk_file,
    discover_files,
    empty_error,
    file_digest,
    is_binary,
    is_hidden,
    replacement_warning,
    resolve_root,
    skip_reason,
)
from crag_lab.kb._errors import (
    EmbeddingModelMismatchError,
    FileNotInKnowledgeBaseError,
    IndexCorruptError,
    IndexMissingError,
    PathOutsideKnowledgeBaseError,
)
from crag_lab.kb._regex import DEFAULT_TIMEOUT_S as DEFAULT_GREP_TIMEOUT_S
from crag_lab.kb._regex import Matcher

FORMAT_VERSION = 1
DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"

_CURRENT = "CURRENT"
_INDEX_PREFIX = "index-"
_TMP_PREFIX = ".tmp-"
_MANIFEST = "manifest.json"
_EMBED_BATCH = 64
_NODE_EXCLUDED_KEYS = ["line_start", "line_end"]


class BuildReport(TypedDict):
    """What ``KnowledgeBase.build`` did; ``full_rebuild_reason`` is None for an incremental build."""

    files_total: int
    files_changed: int
    files_removed: int
    chunks_total: int
    chunks_embedded: int
    chunks_reused: int
    seconds: float
    warnings: list[LoadWarning]
    full_rebuild_reason: str | None


@dataclass(frozen=True, slots=True)
class Passage:
    """Lines ``line_start``..``line_end`` of a knowledge-base file, from ``read`` or ``grep``.

    ``total_lines`` is the file's line count (``read`` only); ``match_lines`` are the lines that
    matched (``grep`` only). For an empty file ``line_end`` is ``line_start - 1``.
    """

    path: str
    text: str
    line_start: int
    line_end: int
    title: str
    total_lines: int | None = None
    match_lines: tuple[int, ...] = ()


# --- the embedding model --------------------------------------------------------------------


class _UnitEmbedding(BaseEmbedding):
    """Wraps an embedding model: creates it on first use and L2-normalises every vector.

    Normalising here makes FAISS inner products cosines whatever model is plugged in, and the
    lazy factory keeps ``KnowledgeBase.load`` from paying the seconds a model takes to load.
    """

    _factory: Callable[[], BaseEmbedding] = PrivateAttr()
    _model: BaseEmbedding | None = PrivateAttr(default=None)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, factory: Callable[[], BaseEmbedding], *, model_name: str) -> None:
        super().__init__(model_name=model_name, embed_batch_size=_EMBED_BATCH)
        self._factory = factory

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


def _model_id(model: BaseEmbedding) -> str:
    """A stable name for the manifest: the bundled MiniLM by its hub name, others by class and name."""
    from crag_lab.embeddings import model_dir

    name = str(getattr(model, "model_name", "unknown"))
    if os.path.isabs(name):
        if os.path.normpath(name) == os.path.normpath(model_dir()):
            return DEFAULT_MODEL_ID
        name = Path(name).name
    return f"{type(model).__name__}:{name}"


def _embedding(embed_model: BaseEmbedding | None) -> _UnitEmbedding:
    if isinstance(embed_model, _UnitEmbedding):
        return embed_model
    if embed_model is None:
        from crag_lab.embeddings import default_embed_model

        return _UnitEmbedding(default_embed_model, model_name=DEFAULT_MODEL_ID)
    model = embed_model
    return _UnitEmbedding(lambda: model, model_name=_model_id(model))


def _embed_texts(model: BaseEmbedding, texts: list[str]) -> np.ndarray:
    """Embed texts as unit float32 rows, in the order given (the only place a build spends model time).

    The model gets the texts longest first, so that each batch pads its texts to about the same
    length: LlamaIndex cuts the list into batches as given, and chunks in file order padded to
    their batch's longest cost the bundled MiniLM half again the tokens. Longest means most tokens
    when the model's tokenizer is at hand (``token_lengths``), else most characters (what
    ``SentenceTransformer.encode`` sorts by). Only which texts share a batch changes, not the vectors
    (beyond float rounding).
    """
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    order = np.argsort([-n for n in _text_lengths(model, texts)], kind="stable")
    vectors = np.asarray(model.get_text_embedding_batch([texts[i] for i in order]), dtype=np.float32)
    vectors = vectors.reshape(len(texts), -1)
    rows = np.empty_like(vectors)
    rows[order] = vectors
    return rows


def _text_lengths(model: BaseEmbedding, texts: list[str]) -> list[int]:
    from crag_lab.embeddings import token_lengths

    inner = model.inner if isinstance(model, _UnitEmbedding) else model
    return token_lengths(inner, texts) or [len(text) for text in texts]


# --- nodes and the manifest -----------------------------------------------------------------


def _node(chunk: Chunk) -> TextNode:
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


def _chunk(node: BaseNode) -> Chunk:
    meta = node.metadata
    return Chunk(
        id=node.node_id,
        path=str(meta["path"]),
        text=node.get_content(metadata_mode=MetadataMode.NONE),
        line_start=int(meta["line_start"]),
        line_end=int(meta["line_end"]),
        title=str(meta["title"]),
    )


def _check_manifest(data: Any) -> dict[str, Any]:
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


# --- the folder on disk ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Stored:
    """A persisted index read back from disk."""

    folder: Path
    manifest: dict[str, Any]
    index: VectorStoreIndex
    chunks: list[Chunk]

    def vectors(self) -> np.ndarray:
        faiss_index = self.index.vector_store.client  # type: ignore[attr-defined]
        return np.asarray(faiss_index.reconstruct_n(0, faiss_index.ntotal), dtype=np.float32)


def _cache_path(root: Path, cache_dir: str | os.PathLike[str] | None) -> Path:
    return Path(cache_dir).expanduser().resolve() if cache_dir is not None else root / INDEX_DIRNAME


def _read_stored(root: Path, cache: Path, embed: _UnitEmbedding) -> _Stored:
    """Read the live index; ``IndexMissingError`` or ``IndexCorruptError`` if that is impossible."""
    from llama_index.vector_stores.faiss import FaissVectorStore

    pointer = cache / _CURRENT
    if not pointer.is_file():
        raise IndexMissingError(f"no index for knowledge base {str(root)!r} in {str(cache)!r}: {_rebuild_hint(root)}")
    try:
        name = pointer.read_text(encoding="utf-8").strip()
        if not re.fullmatch(rf"{_INDEX_PREFIX}[0-9a-f]+", name):
            raise ValueError(f"{str(pointer)!r} does not name an index folder")
        folder = cache / name
        manifest_path = folder / _MANIFEST
        manifest = _check_manifest(json.loads(manifest_path.read_text(encoding="utf-8")))
        store = FaissVectorStore.from_persist_dir(str(folder))
        context = StorageContext.from_defaults(persist_dir=str(folder), vector_store=store)
        index = load_index_from_storage(context, embed_model=embed)
        if not isinstance(index, VectorStoreIndex):
            raise ValueError("the stored index is not a VectorStoreIndex")
        ids = _chunk_ids(manifest)
        faiss_index = store.client
        if faiss_index.ntotal != len(ids) or faiss_index.d != manifest["embedding"]["dim"]:
            raise ValueError(
                f"the FAISS file holds {faiss_index.ntotal} vectors of dimension {faiss_index.d}, "
                f"the manifest lists {len(ids)} chunks of dimension {manifest['embedding']['dim']}"
            )
        if index.index_struct.nodes_dict != {str(i): cid for i, cid in enumerate(ids)}:
            raise ValueError("the vector positions do not match the manifest's chunk ids")
        chunks = [_chunk(node) for node in index.docstore.get_nodes(ids)]
    except IndexMissingError:
        raise
    except Exception as exc:  # any unreadable piece means the folder cannot be trusted
        raise IndexCorruptError(
            f"the index of knowledge base {str(root)!r} in {str(cache)!r} is unreadable "
            f"({type(exc).__name__}: {exc}); {_rebuild_hint(root)} to repair it"
        ) from exc
    return _Stored(folder, manifest, index, chunks)


def _write_json(path: Path, data: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, ensure_ascii=False)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())


def _write_index(
    cache: Path, nodes: list[TextNode], manifest: dict[str, Any], embed: _UnitEmbedding
) -> tuple[Path, VectorStoreIndex]:
    """Persist a complete index folder beside the live one, then make it live atomically."""
    import faiss
    from llama_index.vector_stores.faiss import FaissVectorStore

    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=cache))
    try:
        store = FaissVectorStore(faiss_index=faiss.IndexFlatIP(manifest["embedding"]["dim"]))
        context = StorageContext.from_defaults(vector_store=store)
        index = VectorStoreIndex(nodes, storage_context=context, embed_model=embed)
        context.persist(persist_dir=str(tmp))
        _write_json(tmp / _MANIFEST, manifest)
        folder = cache / f"{_INDEX_PREFIX}{uuid.uuid4().hex[:16]}"
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _swap_current(cache, folder.name)
    return folder, index


def _swap_current(cache: Path, name: str) -> None:
    """Point ``CURRENT`` at ``name`` with one atomic rename."""
    tmp = cache / f"{_TMP_PREFIX}{_CURRENT}-{uuid.uuid4().hex[:8]}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, cache / _CURRENT)


def _cleanup(cache: Path, keep: str) -> None:
    """Remove old index folders and the leftovers of killed builds; other files are left alone."""
    if not cache.is_dir():
        return
    for entry in cache.iterdir():
        if entry.name in (_CURRENT, keep) or not entry.name.startswith((_INDEX_PREFIX, _TMP_PREFIX)):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


# --- the knowledge base ---------------------------------------------------------------------


class KnowledgeBase:
    """A folder of Markdown/text files with a persisted vector index, BM25 and file primitives.

    Create one with ``KnowledgeBase.build`` (indexes what changed) or ``KnowledgeBase.load``
    (reads the index, embeds nothing). ``chunks`` lists every chunk in file/line order and
    ``files`` the indexed relative paths.

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (root / "faq.md").write_text("# FAQ\\n\\nThe port is 8080.\\n")
    >>> kb = KnowledgeBase.build(root)
    >>> kb.files, kb.build_report["chunks_embedded"]
    (['faq.md'], 1)
    >>> kb.read("faq.md", 3, 3).text
    'The port is 8080.'
    """

    def __init__(
        self,
        *,
        root: Path,
        cache_dir: Path,
        index: VectorStoreIndex,
        manifest: dict[str, Any],
        chunks: list[Chunk],
        embed_model: _UnitEmbedding,
        build_report: BuildReport | None = None,
    ) -> None:
        """Internal: use ``KnowledgeBase.build`` or ``KnowledgeBase.load``."""
        self.root = root
        self.cache_dir = cache_dir
        self.chunks = chunks
        self.build_report = build_report
        self._index = index
        self._manifest = manifest
        self._embed_model = embed_model
        self._lock = threading.Lock()
        self._bm25: Any = None
        self._sections: dict[str, tuple[list[int], list[str]]] | None = None

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        root: str | os.PathLike[str],
        *,
        embed_model: BaseEmbedding | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> KnowledgeBase:
        """Load the persisted index of ``root`` without embedding anything.

        ``embed_model`` must be the model the index was built with (default: the bundled
        all-MiniLM-L6-v2); it is only called when a query is embedded. Raises
        ``IndexMissingError`` (never built), ``IndexCorruptError`` (unreadable; ``build``
        repairs it) or ``EmbeddingModelMismatchError``. Use ``is_stale()`` to check whether
        files changed since the build.

        >>> kb = KnowledgeBase.load("docs")  # doctest: +SKIP
        """
        base = resolve_root(root)
        cache = _cache_path(base, cache_dir)
        embed = _embedding(embed_model)
        stored = _read_stored(base, cache, embed)
        built_with = stored.manifest["embedding"]["model"]
        if built_with != embed.model_name:
            raise EmbeddingModelMismatchError(
                f"the index of {str(base)!r} was built with embedding model {built_with!r}, not "
                f"{embed.model_name!r}: pass that model as embed_model, or rebuild with "
                f"KnowledgeBase.build({str(base)!r}, embed_model=...)"
            )
        return cls(
            root=base,
            cache_dir=cache,
            index=stored.index,
            manifest=stored.manifest,
            chunks=stored.chunks,
            embed_model=embed,
        )

    @classmethod
    def build(
        cls,
        root: str | os.PathLike[str],
        *,
        embed_model: BaseEmbedding | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        chunk_settings: ChunkSettings | None = None,
    ) -> KnowledgeBase:
        """Build or update the index of ``root`` and return the knowledge base, loaded.

        Only files whose content hash changed are chunked and embedded; chunks of unchanged
        files keep their ids and vectors, deleted files disappear. Another embedding model or
        other chunk settings than the stored index's, or an unreadable index, mean a full
        rebuild. ``build_report`` says what happened. Raises ``EmptyKnowledgeBaseError`` if no
        file has any text.

        >>> kb = KnowledgeBase.build("docs")  # doctest: +SKIP
        >>> kb.build_report["chunks_embedded"], kb.build_report["chunks_reused"]  # doctest: +SKIP
        (3, 120)
        """
        started = time.perf_counter()
        base = resolve_root(root)
        cache = _cache_path(base, cache_dir)
        settings = chunk_settings or ChunkSettings()
        embed = _embedding(embed_model)

        paths, warnings = discover_files(base, exclude=cache)
        digests: dict[str, str] = {}
        for path in paths:
            try:
                sha, binary = file_digest(base / path)
            except OSError as exc:
                warnings.append(_unreadable(path, exc))
                continue
            if binary:
                warnings.append(binary_warning(path))
            else:
                digests[path] = sha
        if not digests:
            raise empty_error(base)

        previous, reason = _previous_index(base, cache, embed, settings)
        old_files: dict[str, Any] = previous.manifest["files"] if previous is not None else {}
        reusable: dict[str, Any] = old_files if reason is None else {}
        unchanged = {p for p, sha in digests.items() if p in reusable and reusable[p]["sha256"] == sha}
        removed = sorted(set(old_files) - set(digests))

        if previous is not None and reason is None and unchanged == set(digests) and not removed:
            warnings += [replacement_warning(p) for p in digests if old_files[p].get("decoded_with_replacement")]
            _cleanup(cache, keep=previous.folder.name)
            report = _report(started, digests, 0, 0, previous.chunks, 0, warnings, None)
            return cls(
                root=base,
                cache_dir=cache,
                index=previous.index,
                manifest=previous.manifest,
                chunks=previous.chunks,
                embed_model=embed,
                build_report=report,
            )

        old_chunks: dict[str, list[Chunk]] = {}
        for chunk in previous.chunks if previous is not None else []:
            old_chunks.setdefault(chunk.path, []).append(chunk)
        files: dict[str, Any] = {}
        chunks: list[Chunk] = []
        for path in sorted(digests):
            if path in unchanged:
                entry = dict(reusable[path])
                file_chunks = old_chunks.get(path, [])
            else:
                try:
                    chunked = chunk_file(base, path, settings)
                except OSError as exc:
                    warnings.append(_unreadable(path, exc))
                    continue
                file_chunks = chunked.chunks
                entry = {
                    "sha256": digests[path],
                    "title": chunked.title,
                    "chunks": [c.id for c in file_chunks],
                    "decoded_with_replacement": chunked.decoded_with_replacement,
                }
            if entry.get("decoded_with_replacement"):
                warnings.append(replacement_warning(path))
            files[path] = entry
            chunks.extend(file_chunks)
        if not chunks:
            raise empty_error(base)

        nodes = [_node(chunk) for chunk in chunks]
        fresh = [i for i, chunk in enumerate(chunks) if chunk.path not in unchanged]
        new_vectors = _embed_texts(embed, [nodes[i].get_content(metadata_mode=MetadataMode.EMBED) for i in fresh])
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

        manifest = {
            "format": FORMAT_VERSION,
            "embedding": {"model": embed.model_name, "dim": dim},
            "chunking": settings.as_dict(),
            "files": files,
        }
        folder, index = _write_index(cache, nodes, manifest, embed)
        _cleanup(cache, keep=folder.name)
        for node in nodes:  # the vectors live in FAISS now
            node.embedding = None
        warnings.sort(key=lambda w: w["path"])
        changed = len(set(files) - unchanged)
        report = _report(started, files, changed, len(removed), chunks, len(fresh), warnings, reason)
        return cls(
            root=base,
            cache_dir=cache,
            index=index,
            manifest=manifest,
            chunks=chunks,
            embed_model=embed,
            build_report=report,
        )

    # -- what is indexed -------------------------------------------------------------------

    @property
    def files(self) -> list[str]:
        """Relative POSIX paths of the indexed files, sorted."""
        return list(self._manifest["files"])

    @property
    def embed_model(self) -> BaseEmbedding:
        """The (lazily loaded, normalising) embedding model that queries go through."""
        return self._embed_model

    @property
    def index(self) -> VectorStoreIndex:
        """The LlamaIndex ``VectorStoreIndex`` (FAISS inner product over unit vectors)."""
        return self._index

    def passage_vectors(self) -> tuple[list[str], np.ndarray]:
        """Each chunk's embedded text (path, title, lines) and the vector FAISS holds for it.

        Nothing is encoded. The offline model seeds its vector cache with these, so grading or
        quoting a retrieved chunk costs no model time.
        """
        faiss_index = self._index.vector_store.client  # type: ignore[attr-defined]
        vectors = np.asarray(faiss_index.reconstruct_n(0, faiss_index.ntotal), dtype=np.float32)
        by_id = {chunk.id: chunk for chunk in self.chunks}
        positions = sorted(self._index.index_struct.nodes_dict.items(), key=lambda kv: int(kv[0]))
        keys = [_node(by_id[node_id]).get_content(metadata_mode=MetadataMode.EMBED) for _, node_id in positions]
        return keys, vectors[[int(pos) for pos, _ in positions]]

    def title(self, path: str) -> str:
        """The title of an indexed file: its first H1, else its stem."""
        entry = self._manifest["files"].get(path)
        return str(entry["title"]) if entry else Path(path).stem

    def is_stale(self) -> bool:
        """True when files were added, changed or removed since the index was built.

        Hashes every file, so it costs a read of the folder; ``build`` brings the index up to date.
        """
        paths, _ = discover_files(self.root, exclude=self.cache_dir)
        current: dict[str, str] = {}
        for path in paths:
            try:
                sha, binary = file_digest(self.root / path)
            except OSError:
                continue
            if not binary:
                current[path] = sha
        return current != {p: e["sha256"] for p, e in self._manifest["files"].items()}

    def __repr__(self) -> str:
        return f"KnowledgeBase(root={str(self.root)!r}, files={len(self.files)}, chunks={len(self.chunks)})"

    # -- retrievers ------------------------------------------------------------------------

    def vector_retriever(self, top_k: int = 5) -> BaseRetriever:
        """A LlamaIndex retriever over the FAISS index; scores are cosines (higher is better).

        >>> [n.node.metadata["path"] for n in kb.vector_retriever(3).retrieve("port")]  # doctest: +SKIP
        ['faq.md']
        """
        _check_top_k(top_k)
        return self._index.as_retriever(similarity_top_k=top_k)

    def keyword_retriever(self, top_k: int = 5) -> BaseRetriever:
        """A LlamaIndex ``BM25Retriever`` over the same nodes (path and title count as text).

        The BM25 index is built on first use and shared by every retriever of this object.
        Nodes that share no term with the query come back with score 0.
        """
        from llama_index.retrievers.bm25 import BM25Retriever

        _check_top_k(top_k)
        base = self._bm25_base()
        top_k = min(top_k, len(self.chunks))  # bm25s refuses a k above the number of documents
        return BM25Retriever(existing_bm25=base.bm25, similarity_top_k=top_k, stemmer=base.stemmer)

    def _bm25_base(self) -> Any:
        from llama_index.retrievers.bm25 import BM25Retriever

        with self._lock:
            if self._bm25 is None:
                nodes = self._index.docstore.get_nodes([c.id for c in self.chunks])
                base = BM25Retriever(nodes=nodes, similarity_top_k=1)
                base.bm25.corpus = base.corpus  # lets retrievers built on it return whole nodes
                self._bm25 = base
            return self._bm25

    # -- file primitives -------------------------------------------------------------------

    def resolve(self, path: str) -> tuple[str, Path]:
        """``(relative POSIX path, absolute path)`` of a knowledge-base file, or a clear error.

        Refuses absolute paths, ``..`` and symlinks that lead outside the root
        (``PathOutsideKnowledgeBaseError``), and hidden, missing, binary or non-text files
        (``FileNotInKnowledgeBaseError``).
        """
        if not isinstance(path, str) or not path.strip():
            raise FileNotInKnowledgeBaseError(
                f"path must be a non-empty string relative to the knowledge base, got {path!r}"
            )
        raw = path.strip().replace("\\", "/")
        if raw.startswith("/") or PureWindowsPath(raw).drive or Path(raw).is_absolute():
            raise PathOutsideKnowledgeBaseError(
                f"{path!r} is an absolute path; give a path relative to the knowledge base, e.g. {self.files[0]!r}"
            )
        parts = [p for p in raw.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise PathOutsideKnowledgeBaseError(f"{path!r} leaves the knowledge base: '..' is not allowed")
        rel = "/".join(parts)
        full = self.root / rel
        try:
            resolved = full.resolve()
        except (RuntimeError, OSError, ValueError):  # a symlink loop (before Python 3.13), a NUL byte
            resolved = full
        if not resolved.is_relative_to(self.root):
            raise PathOutsideKnowledgeBaseError(f"{path!r} is a symlink that points outside the knowledge base")
        if is_hidden(rel) or resolved.is_relative_to(self.cache_dir):
            raise FileNotInKnowledgeBaseError(
                f"{path!r} is hidden or inside the index folder, so it is not part of the knowledge base"
            )
        try:
            exists = os.path.lexists(full)
        except ValueError:
            exists = False
        if not exists:
            close = ", ".join(repr(c) for c in difflib.get_close_matches(rel, self.files, n=3))
            hint = f"did you mean {close}?" if close else f"{len(self.files)} files are indexed"
            raise FileNotInKnowledgeBaseError(f"no file {rel!r} in the knowledge base; {hint}")
        reason = skip_reason(full, self.root)
        if reason is not None:
            raise FileNotInKnowledgeBaseError(f"{rel!r} is not a knowledge-base file: {reason}")
        if not rel.lower().endswith(TEXT_EXTENSIONS) or is_binary(full):
            raise FileNotInKnowledgeBaseError(
                f"{rel!r} is not a knowledge-base text file (only non-binary {', '.join(TEXT_EXTENSIONS)} files are)"
            )
        return rel, full

    def read(
        self,
        path: str,
        start_line: int | None = None,
        end_line: int | None = None,
        *,
        max_lines: int | None = None,
    ) -> Passage:
        """Lines ``start_line``..``end_line`` (1-based, inclusive; default: the whole file).

        ``end_line`` past the end is clipped; ``max_lines`` caps how many lines come back
        (``total_lines`` tells how many there are). Raises ``ValueError`` for an impossible range.

        >>> kb.read("faq.md", 1, 1).text  # doctest: +SKIP
        '# FAQ'
        """
        rel, full = self.resolve(path)
        start = 1 if start_line is None else start_line
        if start < 1:
            raise ValueError(f"start_line must be >= 1, got {start_line}")
        if end_line is not None and end_line < start:
            raise ValueError(f"end_line ({end_line}) must be >= start_line ({start})")
        if max_lines is not None and max_lines < 1:
            raise ValueError(f"max_lines must be >= 1, got {max_lines}")
        last = end_line
        if max_lines is not None:
            last = start + max_lines - 1 if last is None else min(last, start + max_lines - 1)
        kept: list[str] = []
        total = 0
        for total, line in enumerate(LineReader(full), 1):
            if start <= total and (last is None or total <= last):
                kept.append(line)
        if total and start > total:
            raise ValueError(f"{rel!r} has {total} lines; start_line={start} is past the end")
        return Passage(rel, "\n".join(kept), start, start + len(kept) - 1, self.title(rel), total_lines=total)

    def grep(
        self,
        pattern: str | re.Pattern[str],
        context: int = 2,
        max_matches: int = 20,
        *,
        path: str | None = None,
        timeout_s: float = DEFAULT_GREP_TIMEOUT_S,
    ) -> list[Passage]:
        """Lines matching ``pattern`` with ``context`` lines around, one ``Passage`` per block.

        A string pattern is a case-insensitive regex; an invalid regex is searched as plain
        text. Blocks that touch or overlap are merged; the search stops after ``max_matches``
        matching lines. ``path`` limits the search to one file. The pattern is untrusted input:
        one that is too long, unrolls too far or takes longer than ``timeout_s`` over the whole
        search raises ``PatternTooExpensiveError`` (see ``crag_lab.kb._regex``). A file that
        became unreadable since the build is left out.

        >>> [(p.path, p.line_start, p.match_lines) for p in kb.grep("port", context=0)]  # doctest: +SKIP
        [('faq.md', 3, (3,))]
        """
        if context < 0:
            raise ValueError(f"context must be >= 0, got {context}")
        if max_matches < 1:
            raise ValueError(f"max_matches must be >= 1, got {max_matches}")
        matcher = Matcher.compile(pattern, timeout_s=timeout_s)
        targets = [self.resolve(path)] if path is not None else [(p, self.root / p) for p in self.files]
        deadline = matcher.deadline()
        passages: list[Passage] = []
        for rel, full in targets:
            budget = max_matches - sum(len(p.match_lines) for p in passages)
            if budget <= 0:
                break
            try:
                passages.extend(self._grep_file(rel, full, matcher, deadline, context, budget))
            except OSError:  # deleted or made unreadable since the build; is_stale() reports it
                continue
        return passages

    def _grep_file(
        self, rel: str, full: Path, matcher: Matcher, deadline: float, context: int, budget: int
    ) -> Iterator[Passage]:
        recent: deque[tuple[int, str]] = deque(maxlen=context + 1)
        block: list[tuple[int, str]] = []
        matches: list[int] = []
        trailing = 0
        for no, line in enumerate(LineReader(full), 1):
            recent.append((no, line))
            if len(matches) < budget and matcher.search(line, deadline):
                if block and no - context <= block[-1][0] + 1:
                    last = block[-1][0]
                    block.extend(item for item in recent if item[0] > last)
                else:
                    if block:
                        yield self._passage(rel, block, matches)
                        budget -= len(matches)
                        matches = []
                    block = [item for item in recent if item[0] >= no - context]
                matches.append(no)
                trailing = context
            elif block and trailing > 0 and no == block[-1][0] + 1:
                block.append((no, line))
                trailing -= 1
            if len(matches) >= budget and trailing == 0:
                break
        if block:
            yield self._passage(rel, block, matches)

    def _passage(self, rel: str, block: list[tuple[int, str]], matches: list[int]) -> Passage:
        text = "\n".join(line for _, line in block)
        title = self._title_at(rel, matches[0])
        return Passage(rel, text, block[0][0], block[-1][0], title, match_lines=tuple(matches))

    def _title_at(self, path: str, line: int) -> str:
        """Title of the chunk that holds ``line`` (its section), else the file's title."""
        if self._sections is None:
            sections: dict[str, tuple[list[int], list[str]]] = {}
            for chunk in self.chunks:
                starts, titles = sections.setdefault(chunk.path, ([], []))
                starts.append(chunk.line_start)
                titles.append(chunk.title)
            self._sections = sections
        starts, titles = self._sections.get(path, ([], []))
        i = bisect.bisect_right(starts, line) - 1
        return titles[i] if i >= 0 else self.title(path)


def compile_pattern(pattern: str | re.Pattern[str], *, timeout_s: float = DEFAULT_GREP_TIMEOUT_S) -> Matcher:
    """A bounded-cost, case-insensitive matcher for ``pattern``; an invalid regex becomes a literal search.

    >>> compile_pattern("a(b").compiled.pattern
    'a\\\\(b'
    """
    return Matcher.compile(pattern, timeout_s=timeout_s)


def _unreadable(path: str, exc: OSError) -> LoadWarning:
    return {"event": "file_skipped", "path": path, "reason": f"unreadable: {exc.strerror or exc}"}


def _check_top_k(top_k: int) -> None:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}")


def _previous_index(
    root: Path, cache: Path, embed: _UnitEmbedding, settings: ChunkSettings
) -> tuple[_Stored | None, str | None]:
    """The live index and why it cannot be reused (None: reusable)."""
    try:
        previous = _read_stored(root, cache, embed)
    except IndexMissingError:
        return None, "no previous index"
    except IndexCorruptError as exc:
        return None, f"previous index unreadable: {exc.__cause__}"
    if previous.manifest["embedding"]["model"] != embed.model_name:
        return previous, f"embedding model changed from {previous.manifest['embedding']['model']!r}"
    if previous.manifest["chunking"] != settings.as_dict():
        return previous, "chunk settings changed"
    return previous, None


def _report(
    started: float,
    files: dict[str, Any],
    changed: int,
    removed: int,
    chunks: list[Chunk],
    embedded: int,
    warnings: list[LoadWarning],
    reason: str | None,
) -> BuildReport:
    return {
        "files_total": len(files),
        "files_changed": changed,
        "files_removed": removed,
        "chunks_total": len(chunks),
        "chunks_embedded": embedded,
        "chunks_reused": len(chunks) - embedded,
        "seconds": round(time.perf_counter() - started, 3),
        "warnings": warnings,
        "full_rebuild_reason": reason,
    }
