"""A knowledge-base folder, loaded: every usable file found (`_files`) and cut into chunks (`_chunking`).

`load_documents` needs no index and no model; `KnowledgeBase.build` does the same walk, and
chunks only the files that changed.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crag_lab.kb._chunking import Chunk, ChunkedFile, ChunkSettings, chunk_file
from crag_lab.kb._errors import EmptyKnowledgeBaseError
from crag_lab.kb._files import (
    INDEX_DIRNAME,
    TEXT_EXTENSIONS,
    LoadWarning,
    discover_files,
    file_digest,
    is_binary,
    os_error_reason,
    resolve_root,
    skipped,
)


@dataclass(frozen=True, slots=True)
class Documents:
    """What ``load_documents`` found: chunked files (sorted by path), all chunks and the warnings."""

    files: list[ChunkedFile]
    warnings: list[LoadWarning] = field(default_factory=list)

    @property
    def chunks(self) -> list[Chunk]:
        return [chunk for f in self.files for chunk in f.chunks]


def replacement_warning(path: str) -> LoadWarning:
    return {
        "event": "file_decoded_with_replacement",
        "path": path,
        "reason": "not valid UTF-8; undecodable bytes were replaced with U+FFFD",
    }


def binary_warning(path: str) -> LoadWarning:
    return {"event": "file_skipped", "path": path, "reason": "binary file (NUL byte in the first 8 KiB)"}


def load_documents(
    root: str | os.PathLike[str],
    *,
    settings: ChunkSettings | None = None,
    exclude: Path | None = None,
) -> Documents:
    """Walk a knowledge-base folder and chunk every usable file, without any index.

    Raises ``EmptyKnowledgeBaseError`` when no file yields a chunk.

    >>> import tempfile, pathlib
    >>> kb = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (kb / "a.md").write_text("# A\\n\\nHello.\\n")
    >>> [(c.path, c.line_start, c.line_end) for c in load_documents(kb).chunks]
    [('a.md', 1, 3)]
    """
    base = resolve_root(root)
    paths, warnings = discover_files(base, exclude=exclude if exclude is not None else base / INDEX_DIRNAME)
    files: list[ChunkedFile] = []
    for path in paths:
        try:
            if is_binary(base / path, base):
                warnings.append(binary_warning(path))
                continue
            chunked = chunk_file(base, path, settings)
        except OSError as exc:
            warnings.append(skipped(path, f"unreadable: {os_error_reason(exc)}"))
            continue
        if chunked.decoded_with_replacement:
            warnings.append(replacement_warning(path))
        files.append(chunked)
    warnings.sort(key=lambda w: w["path"])
    documents = Documents(files, warnings)
    if not documents.chunks:
        raise empty_error(base)
    return documents


def check_folder(root: str | os.PathLike[str], *, exclude: Path | None = None) -> Path:
    """The resolved folder, after the checks that need no file read and no model: it exists, is a
    folder, can be listed and holds at least one candidate text file. Raises as ``load_documents`` does.
    """
    base = resolve_root(root)
    paths, _ = discover_files(base, exclude=exclude if exclude is not None else base / INDEX_DIRNAME)
    if not paths:
        raise empty_error(base)
    return base


def empty_error(root: Path) -> EmptyKnowledgeBaseError:
    """The error for a folder without any usable text."""
    return EmptyKnowledgeBaseError(
        f"knowledge base {str(root)!r} has no usable text: add non-empty {', '.join(TEXT_EXTENSIONS)} files "
        "(hidden files, binary files and the index folder are skipped)"
    )


# --- for an incremental build (`KnowledgeBase.build`) -------------------------------------


def file_digests(base: Path, cache: Path) -> tuple[dict[str, str], list[LoadWarning]]:
    """The sha256 of every text file of the folder (``cache``, the index folder, left out), and warnings
    for the files left out. Raises ``EmptyKnowledgeBaseError`` when no file has any text."""
    paths, warnings = discover_files(base, exclude=cache)
    digests: dict[str, str] = {}
    for path in paths:
        try:
            sha, binary = file_digest(base / path, base)
        except OSError as exc:
            warnings.append(unreadable_warning(path, exc))
            continue
        if binary:
            warnings.append(binary_warning(path))
        else:
            digests[path] = sha
    if not digests:
        raise empty_error(base)
    return digests, warnings


def not_nfc(chunks: Sequence[Chunk]) -> set[str]:
    """Paths of files whose stored chunks hold text that is not NFC: indexed before lines were made NFC
    where they are read, so an incremental build chunks them again even though their bytes did not change."""
    return {c.path for c in chunks if not (unicodedata.is_normalized("NFC", c.text)
                                           and unicodedata.is_normalized("NFC", c.title))}


def chunk_changed(
    base: Path,
    digests: dict[str, str],
    unchanged: set[str],
    reusable: dict[str, Any],
    old_chunks: Sequence[Chunk],
    settings: ChunkSettings,
    warnings: list[LoadWarning],
) -> tuple[dict[str, Any], list[Chunk]]:
    """For an incremental build: the manifest's file entries and every chunk, in path order. Unchanged
    files keep their entry (from ``reusable``) and chunks (from ``old_chunks``), the others are chunked
    again. Unreadable files are left out with a warning (added to ``warnings``)."""
    by_path: dict[str, list[Chunk]] = {}
    for chunk in old_chunks:
        by_path.setdefault(chunk.path, []).append(chunk)
    files: dict[str, Any] = {}
    chunks: list[Chunk] = []
    for path in sorted(digests):
        if path in unchanged:
            entry = dict(reusable[path])
            file_chunks = by_path.get(path, [])
        else:
            try:
                chunked = chunk_file(base, path, settings)
            except OSError as exc:
                warnings.append(unreadable_warning(path, exc))
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
    return files, chunks


def unreadable_warning(path: str, exc: OSError) -> LoadWarning:
    return {"event": "file_skipped", "path": path, "reason": f"unreadable: {exc.strerror or exc}"}
