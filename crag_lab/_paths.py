"""Output paths checked before a run starts, so that a finished run is never lost to a path that cannot be written.

A run can take hours; a ``--json`` path whose folder is a file only fails when the results are
written. `check_output` tells, before the first question and without creating anything, whether a
file (or a folder) can be written at a path: the path is not the other kind of thing, and its
nearest existing ancestor is a folder this process can write into.

>>> check_output("results/eval.json", what="--json")
PosixPath('results/eval.json')
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from crag_lab.errors import CragLabError


class OutputPathError(CragLabError, ValueError):
    """An output path that cannot be written (a folder where a file goes, a file where a folder goes, ...)."""


class OutputWriteError(CragLabError, OSError):
    """A result could not be written after the run (disk full, permissions changed); the message says how to
    write it again without asking anything again."""


def _writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)


def check_output(path: str | Path, *, what: str, folder: bool = False) -> Path:
    """``path`` as a `Path` if a file (``folder=True``: a folder) can be written there; else `OutputPathError`.

    ``what`` names the path in the message (an option such as ``--json``). Nothing is created.
    """
    target = Path(path)
    kind = "folder" if folder else "file"
    if target.exists():
        if folder and not target.is_dir():
            raise OutputPathError(f"{what} {path}: is a file, not a folder; give a folder path, or move the file away")
        if not folder and target.is_dir():
            raise OutputPathError(f"{what} {path}: is a folder, not a file; give a file path such as {target / 'out'}")
        if not folder and _special(target):  # /dev/stdout, a pipe: written to as it is
            if not os.access(target, os.W_OK):
                raise OutputPathError(f"{what} {path}: is not writable by this user; choose another file")
            return target
        into = target if folder else target.resolve().parent  # a file is written beside it and renamed into place
        if not _writable(into):
            raise OutputPathError(f"{what} {path}: {into} is not writable by this user; fix its permissions or choose "
                                  f"another {kind}")
        return target
    for ancestor in target.absolute().parents:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise OutputPathError(f"{what} {path}: {_shown(ancestor)} is a file, not a folder; move it away or "
                                      f"choose another {kind}")
            if not _writable(ancestor):
                raise OutputPathError(f"{what} {path}: cannot create it in {_shown(ancestor)} (not writable by this "
                                      f"user); fix its permissions or choose another {kind}")
            return target
        if ancestor.is_symlink():
            raise OutputPathError(f"{what} {path}: {_shown(ancestor)} is a broken link; remove it or choose another {kind}")
    return target  # pragma: no cover - the root always exists


def check_outputs(outputs: Iterable[tuple[str, str | Path | None, bool]]) -> None:
    """Check ``(what, path, folder)`` triples (None paths are skipped); two outputs at one path are refused too."""
    seen: dict[Path, str] = {}
    for what, path, folder in outputs:
        if path is None:
            continue
        check_output(path, what=what, folder=folder)
        key = Path(path).absolute()
        if key in seen and not folder:
            raise OutputPathError(f"{what} {path}: {seen[key]} writes to the same path; give each output its own path")
        seen[key] = what


@contextmanager
def replacing(path: str | Path) -> Iterator[TextIO]:
    """A text file to write ``path``'s new content into; it appears at ``path`` whole or not at all.

    The content goes to a temporary file of a fresh random name beside ``path``, created exclusively
    (so no file of the user's is ever opened, overwritten or removed in its place), which is renamed
    over ``path`` when the block ends; if the block fails, only that temporary file is removed and an
    older file at ``path`` stays as it was. Folders are made; a link is written through (its target is
    replaced, not the link); a device or pipe such as ``/dev/stdout`` is written to directly.
    """
    target = Path(path)
    if _special(target):
        with target.open("w", encoding="utf-8") as fh:
            yield fh
        return
    if target.is_symlink():
        target = target.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as to any new file
    try:
        with open(fd, "w", encoding="utf-8") as fh:
            yield fh
        tmp.replace(target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` whole or not at all (`replacing`)."""
    with replacing(path) as fh:
        fh.write(text)
    return Path(path)


def _special(path: Path) -> bool:
    """A device, pipe or ``/proc`` entry: written to in place (a rename would replace it, not write to it)."""
    return str(path.absolute()).startswith(("/dev/", "/proc/")) or (path.exists() and not path.is_file()
                                                                    and not path.is_dir())


def _shown(path: Path) -> str:
    """``path`` relative to the working folder where it lies under it (as the user likely typed it)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


__all__ = ["OutputPathError", "OutputWriteError", "check_output", "check_outputs", "replacing", "write_text"]
