"""The file primitives of a knowledge base: resolve a path safely, read lines, grep blocks of lines.

`KnowledgeBase.resolve`, ``read`` and ``grep`` are thin methods over these functions; they read the
files as they are on disk now (line by line, never whole, in NFC as the index has them), with the line
numbers that citations use. Each file is checked again at the moment it is opened (`open_inside`): a
file replaced by a symlink out of the knowledge base after ``resolve`` or after the build is refused.
"""

from __future__ import annotations

import difflib
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

from crag_lab._text import nfc
from crag_lab.kb._errors import FileNotInKnowledgeBaseError, PathOutsideKnowledgeBaseError
from crag_lab.kb._files import TEXT_EXTENSIONS, LineReader, OutsideKnowledgeBase, is_binary, is_hidden, skip_reason
from crag_lab.kb._regex import Matcher


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


def resolve_path(root: Path, cache_dir: Path, files: Sequence[str], path: str) -> tuple[str, Path]:
    """``(relative POSIX path, absolute path)`` of a file of the knowledge base at ``root``, or a clear error.

    Refuses absolute paths, ``..`` and symlinks that lead outside the root
    (``PathOutsideKnowledgeBaseError``), and hidden, missing, binary or non-text files
    (``FileNotInKnowledgeBaseError``, suggesting close names among ``files``). A path that names no
    file as given but one of ``files`` in NFC (``café.md`` typed with a combining accent) is that file.
    """
    if not isinstance(path, str) or not path.strip():
        raise FileNotInKnowledgeBaseError(
            f"path must be a non-empty string relative to the knowledge base, got {path!r}"
        )
    raw = path.strip().replace("\\", "/")
    if raw.startswith("/") or PureWindowsPath(raw).drive or Path(raw).is_absolute():
        raise PathOutsideKnowledgeBaseError(
            f"{path!r} is an absolute path; give a path relative to the knowledge base, e.g. {files[0]!r}"
        )
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise PathOutsideKnowledgeBaseError(f"{path!r} leaves the knowledge base: '..' is not allowed")
    rel = "/".join(parts)
    if rel not in files:
        rel = next((f for f in files if nfc(f) == nfc(rel)), rel)
    full = root / rel
    try:
        resolved = full.resolve()
    except (RuntimeError, OSError, ValueError):  # a symlink loop (before Python 3.13), a NUL byte
        resolved = full
    if not resolved.is_relative_to(root):
        raise PathOutsideKnowledgeBaseError(f"{path!r} is a symlink that points outside the knowledge base")
    if is_hidden(rel) or resolved.is_relative_to(cache_dir):
        raise FileNotInKnowledgeBaseError(
            f"{path!r} is hidden or inside the index folder, so it is not part of the knowledge base"
        )
    try:
        exists = os.path.lexists(full)
    except ValueError:
        exists = False
    if not exists:
        close = ", ".join(repr(c) for c in difflib.get_close_matches(rel, files, n=3))
        hint = f"did you mean {close}?" if close else f"{len(files)} files are indexed"
        raise FileNotInKnowledgeBaseError(f"no file {rel!r} in the knowledge base; {hint}")
    reason = skip_reason(full, root)
    if reason is not None:
        raise FileNotInKnowledgeBaseError(f"{rel!r} is not a knowledge-base file: {reason}")
    if not rel.lower().endswith(TEXT_EXTENSIONS) or is_binary(full, root):
        raise FileNotInKnowledgeBaseError(
            f"{rel!r} is not a knowledge-base text file (only non-binary {', '.join(TEXT_EXTENSIONS)} files are)"
        )
    return rel, full


def read_lines(
    rel: str, full: Path, title: str, start_line: int | None, end_line: int | None, max_lines: int | None,
    *, root: Path,
) -> Passage:
    """Lines ``start_line``..``end_line`` of a resolved file (see `KnowledgeBase.read`), which must still be
    inside ``root`` when it is opened (``PathOutsideKnowledgeBaseError`` otherwise)."""
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
    try:
        for total, line in enumerate(LineReader(full, root), 1):
            if start <= total and (last is None or total <= last):
                kept.append(line)
    except OutsideKnowledgeBase:
        raise PathOutsideKnowledgeBaseError(f"{rel!r} is a symlink that points outside the knowledge base") from None
    if total and start > total:
        raise ValueError(f"{rel!r} has {total} lines; start_line={start} is past the end")
    return Passage(rel, "\n".join(kept), start, start + len(kept) - 1, title, total_lines=total)


def grep_file(
    rel: str,
    full: Path,
    matcher: Matcher,
    deadline: float,
    context: int,
    budget: int,
    title_at: Callable[[str, int], str],
    *,
    root: Path,
) -> Iterator[Passage]:
    """The blocks of one file around lines ``matcher`` finds: ``context`` lines each side, blocks that
    touch or overlap merged, at most ``budget`` matching lines; ``title_at(path, line)`` titles a block.

    The file is checked as ``read_lines`` checks it, when it is opened: one that is a symlink out of
    ``root`` by then raises ``OutsideKnowledgeBase`` (an ``OSError``, so `KnowledgeBase.grep` leaves
    the file out as it does a file deleted since the build)."""
    recent: deque[tuple[int, str]] = deque(maxlen=context + 1)
    block: list[tuple[int, str]] = []
    matches: list[int] = []
    trailing = 0
    for no, line in enumerate(LineReader(full, root), 1):
        recent.append((no, line))
        if len(matches) < budget and matcher.search(line, deadline):
            if block and no - context <= block[-1][0] + 1:
                last = block[-1][0]
                block.extend(item for item in recent if item[0] > last)
            else:
                if block:
                    yield _passage(rel, block, matches, title_at)
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
        yield _passage(rel, block, matches, title_at)


def _passage(rel: str, block: list[tuple[int, str]], matches: list[int], title_at: Callable[[str, int], str]) -> Passage:
    text = "\n".join(line for _, line in block)
    return Passage(rel, text, block[0][0], block[-1][0], title_at(rel, matches[0]), match_lines=tuple(matches))
