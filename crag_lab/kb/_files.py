"""Finding the files of a knowledge base and reading them safely, line by line.

Files are walked in sorted order and named by relative POSIX paths; hidden entries, the index
folder, symlinks that leave the root or loop, FIFOs, sockets, devices and undecodable names are
skipped with a warning, and a file is opened without blocking (`open_regular`). A file is checked
again when it is opened (`open_inside`): one replaced by a symlink to a file outside the root after
the folder was listed or indexed is refused then. `LineReader` yields a file's lines one at a time,
in Unicode NFC, so a 50 MB file is never held whole.
"""

from __future__ import annotations

import codecs
import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Literal, TypedDict

from crag_lab._text import encodable, nfc

TEXT_EXTENSIONS: tuple[str, ...] = (".md", ".markdown", ".txt", ".rst")
"""File types a knowledge base is made of; other files are ignored silently."""

INDEX_DIRNAME = ".crag_index"
"""Default index folder inside the knowledge-base root (hidden, so never indexed itself)."""

_SNIFF_BYTES = 8192


class LoadWarning(TypedDict):
    """A file that was skipped or only partly readable; collected in build reports, never printed."""

    event: Literal["file_skipped", "file_decoded_with_replacement"]
    path: str
    reason: str


# --- walking the folder ---------------------------------------------------------------------


def resolve_root(root: str | os.PathLike[str]) -> Path:
    """The absolute, symlink-free knowledge-base folder; raises ``FileNotFoundError`` if it is not a folder."""
    try:
        path = Path(root).expanduser().resolve()
        is_dir = path.is_dir()
    except (RuntimeError, OSError, ValueError) as exc:  # a symlink loop, a NUL byte in the name
        raise FileNotFoundError(f"knowledge-base folder {str(root)!r} cannot be opened: {os_error_reason(exc)}") from None
    if not is_dir:
        raise FileNotFoundError(f"knowledge-base folder {str(root)!r} does not exist or is not a folder")
    return path


def is_hidden(rel_path: str) -> bool:
    """True when any component of the relative path starts with a dot."""
    return any(part.startswith(".") for part in rel_path.split("/"))


def skipped(path: str, reason: str) -> LoadWarning:
    """The warning for a file or folder left out of the knowledge base."""
    return {"event": "file_skipped", "path": _printable(path), "reason": reason}


def _printable(path: str) -> str:
    """``path`` with the undecodable bytes of a file name (held as lone surrogates) shown as U+FFFD."""
    try:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:
        return encodable(path)


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def os_error_reason(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        if exc.errno == errno.ELOOP:
            return "symlink loop"
        return str(exc.strerror or exc)
    if isinstance(exc, RuntimeError):  # Path.resolve on a loop before Python 3.13
        return "symlink loop"
    return str(exc)


_FILE_TYPES = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def file_type(mode: int) -> str:
    """What a non-regular file is, in words ("a FIFO", "a socket", ...)."""
    return next((name for test, name in _FILE_TYPES if test(mode)), "not a regular file")


def skip_reason(full: Path, root: Path) -> str | None:
    """Why the entry ``full`` of ``root`` cannot be a knowledge-base file, or None if it can.

    Every oddity of a file system gets a reason instead of an exception: a symlink loop, a dangling
    symlink, a symlink leaving ``root``, a FIFO, socket, device or folder with a text extension, a
    file that cannot be examined. (A file that cannot be *read* is found out when it is opened.)
    """
    try:
        status = os.stat(full)  # follows symlinks
    except OSError as exc:
        if exc.errno == errno.ENOENT and os.path.islink(full):
            return "dangling symlink: its target does not exist"
        return os_error_reason(exc) if exc.errno == errno.ELOOP else f"unreadable: {os_error_reason(exc)}"
    except ValueError as exc:
        return f"unreadable: {exc}"
    if os.path.islink(full) and not Path(os.path.realpath(full)).is_relative_to(root):
        return "symlink to a file outside the knowledge base"
    if not stat.S_ISREG(status.st_mode):
        return f"not a regular file ({file_type(status.st_mode)})"
    return None


def discover_files(root: Path, *, exclude: Path | None = None) -> tuple[list[str], list[LoadWarning]]:
    """Relative POSIX paths of the candidate text files under ``root``, sorted.

    Skips hidden files and folders, ``exclude`` (the index folder) and files of other types
    silently. Text-named entries that cannot be knowledge-base files (``skip_reason``: symlink
    loops, dangling symlinks, symlinks leading outside ``root``, FIFOs, sockets, devices), entries
    whose name is not valid UTF-8 and folders that cannot be listed are skipped with a warning.
    Symlinked folders are not followed. Raises ``OSError`` only when ``root`` itself cannot be listed.
    """
    try:
        excluded = exclude.resolve() if exclude is not None else None
    except (RuntimeError, OSError):
        excluded = exclude
    found: list[str] = []
    warnings: list[LoadWarning] = []
    folders: list[tuple[Path, str]] = [(root, "")]
    while folders:
        folder, prefix = folders.pop()
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as exc:
            if not prefix:
                raise OSError(exc.errno, f"cannot list knowledge-base folder {str(root)!r}: {os_error_reason(exc)}") from None
            warnings.append(skipped(prefix.rstrip("/"), f"folder cannot be listed: {os_error_reason(exc)}"))
            continue
        for entry in entries:
            name, rel = entry.name, prefix + entry.name
            if name.startswith("."):
                continue
            try:
                is_folder = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_folder = False
            if is_folder:
                if excluded is not None and Path(entry.path) == excluded:
                    continue
                if not _utf8(name):
                    warnings.append(skipped(rel, "folder name is not valid UTF-8"))
                    continue
                folders.append((Path(entry.path), rel + "/"))
                continue
            if not name.lower().endswith(TEXT_EXTENSIONS):
                continue
            if not _utf8(name):
                warnings.append(skipped(rel, "file name is not valid UTF-8"))
                continue
            reason = skip_reason(Path(entry.path), root)
            if reason is not None:
                warnings.append(skipped(rel, reason))
                continue
            found.append(rel)
    found.sort()
    warnings.sort(key=lambda w: w["path"])
    return found, warnings


def open_regular(path: Path) -> BinaryIO:
    """``open(path, "rb")`` that refuses, instead of blocking on, anything but a regular file.

    A FIFO opened for reading waits for a writer, forever; opening without blocking and checking
    the type of what was opened means a FIFO (or device) put in place of a file since the folder
    was listed raises ``OSError`` at once.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"not a regular file ({file_type(mode)})", str(path))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class OutsideKnowledgeBase(PermissionError):
    """A file that, at the moment it was opened, was a symlink to a file outside the knowledge base."""


def open_inside(path: Path, root: Path | None) -> BinaryIO:
    """``open_regular(path)``, refused with ``OutsideKnowledgeBase`` (an ``OSError``) unless what was
    opened is a file inside ``root`` (resolved); no check when ``root`` is None.

    The check is made on the open file, not on the name before it: the path is resolved after the
    open and the file it resolves to must be the one opened (same device and inode). A file swapped
    for a symlink to ``/etc/passwd`` after the folder was listed, after the index was built, or
    between a check and the open, is refused.
    """
    f = open_regular(path)
    if root is None:
        return f
    try:
        opened = os.fstat(f.fileno())
        real = Path(os.path.realpath(path))
        if real.is_relative_to(root):
            now = os.stat(real)
            if (now.st_dev, now.st_ino) == (opened.st_dev, opened.st_ino):
                return f
        raise OutsideKnowledgeBase(errno.EACCES, "symlink to a file outside the knowledge base", str(path))
    except BaseException:
        f.close()
        raise


def file_digest(path: Path, root: Path | None = None) -> tuple[str, bool]:
    """``(sha256 hex of the bytes, is_binary)``; binary means a NUL byte in the first 8 KiB.

    With ``root``, the file must be inside it when it is opened (`open_inside`).
    """
    digest = hashlib.sha256()
    with open_inside(path, root) as f:
        head = f.read(_SNIFF_BYTES)
        digest.update(head)
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest(), b"\0" in head


def is_binary(path: Path, root: Path | None = None) -> bool:
    """True when the first 8 KiB of the file contain a NUL byte (``root``: as in `file_digest`)."""
    with open_inside(path, root) as f:
        return b"\0" in f.read(_SNIFF_BYTES)


# --- reading lines --------------------------------------------------------------------------


class LineReader:
    """The lines of a file as UTF-8 text in Unicode NFC, without their terminators, read one at a time.

    Lines end at ``\\n`` (a trailing ``\\r`` is dropped too, and a UTF-8 byte-order mark at the
    start). A line that is not valid UTF-8 is decoded with ``errors="replace"`` and
    ``decoded_with_replacement`` becomes True. Each line is made NFC here, where it is read, so the
    chunks, ``read``, ``grep`` and the titles all see the same text (NFC never joins lines: line
    numbers are the file's). With ``root``, the file must be inside it when it is opened
    (`open_inside`). Iterating again re-reads the file.
    """

    def __init__(self, path: Path, root: Path | None = None) -> None:
        self.path = path
        self.root = root
        self.decoded_with_replacement = False

    def __iter__(self) -> Iterator[str]:
        with open_inside(self.path, self.root) as f:
            first = True
            for raw in f:
                if raw.endswith(b"\n"):
                    raw = raw[:-1]
                if raw.endswith(b"\r"):
                    raw = raw[:-1]
                if first:
                    raw = raw.removeprefix(codecs.BOM_UTF8)
                    first = False
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    self.decoded_with_replacement = True
                    line = raw.decode("utf-8", errors="replace")
                yield nfc(line)
