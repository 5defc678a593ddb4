"""`KnowledgeBase`: a folder of text files, its persisted vector index, BM25 and the file primitives.

A ``KnowledgeBase`` is a LlamaIndex ``VectorStoreIndex`` on a ``FaissVectorStore``
(``faiss.IndexFlatIP`` over unit vectors, so scores are cosines) plus a ``manifest.json`` that
records, per file, its sha256 and chunk ids. ``build`` re-embeds only the files whose hash
changed; ``load`` embeds nothing and loads the embedding model only when a query needs it.

The parts: ``_files`` (finding and reading files), ``_chunking`` (line-exact chunks),
``_embedding`` (the unit-vector model wrapper), ``_store`` (the index folder on disk, its layout
and atomic swaps), ``_lines`` (resolve, read and grep).
"""

from __future__ import annotations

import bisect
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import MetadataMode

from crag_lab.config import VectorStoreConfig
from crag_lab.kb._backends import FaissVectors, VectorBackend, build_backend, same_place
from crag_lab.kb._chunking import Chunk, ChunkSettings
from crag_lab.kb._documents import chunk_changed, file_digests, not_nfc, replacement_warning
from crag_lab.kb._embedding import Embedder, UnitEmbedding, unit_embedding
from crag_lab.kb._errors import EmbeddingModelMismatchError
from crag_lab.kb._files import LoadWarning, discover_files, file_digest, resolve_root
from crag_lab.kb._lines import Passage, grep_file, read_lines, resolve_path
from crag_lab.kb._owned import Ledger, build_lock, check_folder
from crag_lab.kb._regex import DEFAULT_TIMEOUT_S as DEFAULT_GREP_TIMEOUT_S
from crag_lab.kb._regex import Matcher
from crag_lab.kb._store import (
    FORMAT_VERSION,
    cache_path,
    cleanup,
    embedded_nodes,
    previous_index,
    read_stored,
    text_node,
    write_index,
)

__all__ = ["BuildReport", "KnowledgeBase", "Passage", "compile_pattern"]


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
        embed_model: UnitEmbedding,
        build_report: BuildReport | None = None,
        vector_store: VectorStoreConfig | None = None,
        backend: VectorBackend | None = None,
    ) -> None:
        """Internal: use ``KnowledgeBase.build`` or ``KnowledgeBase.load``."""
        self.vector_store = vector_store
        self._backend: VectorBackend = backend or FaissVectors()
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
        vector_store: VectorStoreConfig | None = None,
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
        cache = cache_path(base, cache_dir)
        embed = unit_embedding(embed_model)
        stored = read_stored(base, cache, embed)
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
            vector_store=vector_store,
            backend=stored.backend,
        )

    @classmethod
    def build(
        cls,
        root: str | os.PathLike[str],
        *,
        embed_model: BaseEmbedding | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        chunk_settings: ChunkSettings | None = None,
        vector_store: VectorStoreConfig | None = None,
        embed_with: str | Embedder = "local",
    ) -> KnowledgeBase:
        """Build or update the index of ``root`` and return the knowledge base, loaded.

        Only files whose content hash changed are chunked and embedded; chunks of unchanged
        files keep their ids and vectors, deleted files disappear. Another embedding model or
        other chunk settings than the stored index's, or an unreadable index, mean a full
        rebuild. ``build_report`` says what happened. Raises ``EmptyKnowledgeBaseError`` if no
        file has any text.

        ``cache_dir`` (default ``<root>/.crag_index``) must be new, empty or an index folder: one that
        is the knowledge base, holds it, or holds files crag_lab did not write raises
        ``IndexFolderError`` before anything is read. A build removes only what the folder's ledger
        (``crag-lab-owned.json``) says it created, and builds of one folder take turns (a lock): the
        second waits, then reuses what the first built.

        ``vector_store`` says where the vectors go (`crag_lab.config.VectorStoreConfig`: FAISS in
        the index folder, or a Qdrant collection; default from the environment). Moving an index
        from one to the other re-embeds nothing: the stored vectors are copied.

        ``embed_with`` says where the chunks to embed are embedded: ``"local"`` (this process),
        ``"ray"`` (a Ray Data stage on the cluster in ``RAY_ADDRESS``, else a local Ray), a Ray
        address, or a `crag_lab.ray_index.RayDataEmbedder`; the index, its manifest and its vectors
        (byte for byte, on CPU) are the local build's.

        >>> kb = KnowledgeBase.build("docs")  # doctest: +SKIP
        >>> kb.build_report["chunks_embedded"], kb.build_report["chunks_reused"]  # doctest: +SKIP
        (3, 120)
        """
        started = time.perf_counter()
        embedder = _embedder(embed_with)
        base = resolve_root(root)
        cache = cache_path(base, cache_dir)
        check_folder(base, cache)  # before anything is read or embedded: the index never mixes with the user's files
        with build_lock(cache) as ledger:  # a second build of this folder waits here, then reuses what this one built
            return cls._build(base, cache, ledger, started, embedder, embed_model, chunk_settings, vector_store)

    @classmethod
    def _build(
        cls, base: Path, cache: Path, ledger: Ledger, started: float, embedder: Embedder | None,
        embed_model: BaseEmbedding | None, chunk_settings: ChunkSettings | None, vector_store: VectorStoreConfig | None,
    ) -> KnowledgeBase:
        """`build` under the build lock of ``cache``; what it creates or removes there goes through ``ledger``."""
        settings = chunk_settings or ChunkSettings()
        embed = unit_embedding(embed_model)

        backend = build_backend(vector_store, cache)
        digests, warnings = file_digests(base, cache)
        previous, reason = previous_index(base, cache, embed, settings, vector_store)
        old_files: dict[str, Any] = previous.manifest["files"] if previous is not None else {}
        reusable: dict[str, Any] = old_files if reason is None else {}
        unchanged = {p for p, sha in digests.items() if p in reusable and reusable[p]["sha256"] == sha}
        unchanged -= not_nfc(previous.chunks) if previous is not None else set()
        removed = sorted(set(old_files) - set(digests))

        if (previous is not None and reason is None and unchanged == set(digests) and not removed
                and same_place(previous.backend, backend)):
            warnings += [replacement_warning(p) for p in digests if old_files[p].get("decoded_with_replacement")]
            cleanup(cache, keep=previous.folder.name, ledger=ledger, backend=previous.backend)
            report = _report(started, digests, 0, 0, previous.chunks, 0, warnings, None)
            return cls(root=base, cache_dir=cache, index=previous.index, manifest=previous.manifest,
                       chunks=previous.chunks, embed_model=embed, build_report=report, vector_store=vector_store,
                       backend=previous.backend)

        old_chunks = previous.chunks if previous is not None else []
        files, chunks = chunk_changed(base, digests, unchanged, reusable, old_chunks, settings, warnings)
        nodes, embedded = embedded_nodes(embed, chunks, unchanged, previous, embedder)
        manifest = {
            "format": FORMAT_VERSION,
            "embedding": {"model": embed.model_name, "dim": len(nodes[0].embedding or [])},
            "chunking": settings.as_dict(),
            "files": files,
        }
        folder, index = write_index(cache, nodes, manifest, embed, backend, ledger)
        cleanup(cache, keep=folder.name, ledger=ledger, backend=backend)
        if previous is not None and not same_place(previous.backend, backend):
            # moved to another store: the old one holds nothing live
            ledger.forget_collections(previous.backend.drop_others(None, ledger.collections))
        for node in nodes:  # the vectors live in FAISS now
            node.embedding = None
        warnings.sort(key=lambda w: w["path"])
        changed = len(set(files) - unchanged)
        report = _report(started, files, changed, len(removed), chunks, embedded, warnings, reason)
        return cls(root=base, cache_dir=cache, index=index, manifest=manifest, chunks=chunks, embed_model=embed,
                   build_report=report, vector_store=vector_store, backend=backend)

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
        """Each chunk's embedded text (path, title, lines) and the vector the index holds for it (FAISS or Qdrant).

        Nothing is encoded. The offline model seeds its vector cache with these, so grading or
        quoting a retrieved chunk costs no model time.
        """
        vectors = self._backend.vectors(self._index, [chunk.id for chunk in self.chunks])
        keys = [text_node(chunk).get_content(metadata_mode=MetadataMode.EMBED) for chunk in self.chunks]
        return keys, vectors

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
        return resolve_path(self.root, self.cache_dir, self.files, path)

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
        return read_lines(rel, full, self.title(rel), start_line, end_line, max_lines, root=self.root)

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
                passages.extend(grep_file(rel, full, matcher, deadline, context, budget, self._title_at,
                                          root=self.root))
            except OSError:  # deleted or made unreadable since the build; is_stale() reports it
                continue
        return passages

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


def _embedder(embed_with: str | Embedder) -> Embedder | None:
    """None for a local build (`_store.embedded_nodes` calls `_embedding.embed_texts`), else the embedder named."""
    if embed_with == "local":
        return None
    from crag_lab.ray_index import resolve_embedder  # Ray itself loads only if a build has chunks to embed

    return resolve_embedder(embed_with)


def _check_top_k(top_k: int) -> None:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}")


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
