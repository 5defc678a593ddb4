"""What a build may write and remove in an index folder: a ledger of its own entries, a lock, a check.

An index folder (``cache_dir``) may be one the user chose, so a build removes nothing it cannot
prove it wrote. The folder's ledger, ``crag-lab-owned.json``, is both the marker that crag_lab
writes there and the list of the entries (and Qdrant collections) its builds created. A name is
recorded before its entry is created, and the entry is created exclusively (never over something
that exists), so whatever a killed build leaves behind is named by the ledger; clean-up
(`crag_lab.kb._store.cleanup`) removes ledger names and nothing else. A user's ``index-notes.md`` or
``.tmp-draft`` beside them is never touched, and neither are the folders of an index built before
the ledger existed: nothing names them.

`check_folder` refuses, before anything is read or embedded, a folder that a build would share with
the user's files: the knowledge base itself (or a folder holding it), a file, or a folder that holds
anything but an index of crag_lab's. Builds of one folder hold `build_lock` (``crag-lab.lock``, an
OS file lock through ``filelock``, released even when the process is killed): a second build waits
for the first, then finds its index and reuses what did not change.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock

from crag_lab.kb._errors import IndexFolderError
from crag_lab.kb._files import INDEX_DIRNAME

LEDGER_FILE = "crag-lab-owned.json"
"""The marker and ledger of an index folder: what crag_lab created there (and may therefore remove)."""

LOCK_FILE = "crag-lab.lock"
"""The OS file lock that builds of one index folder take in turn."""

_LEDGER_TMP = LEDGER_FILE + ".tmp"
_OWN_NAMES = frozenset({LEDGER_FILE, _LEDGER_TMP, LOCK_FILE})
# What an index folder held before ledgers: `_store`'s layout and the offline model's vector store.
_EARLIER_LAYOUT = re.compile(r"CURRENT|index-[0-9a-f]+|\.tmp-.+|qdrant|reading-vectors\.sqlite(-wal|-shm|-journal)?")
_FORMAT = 1
_NOTE = "what crag_lab created in this folder; it removes these and nothing else"


def _hint(root: Path, cache: Path) -> str:
    if cache == root / INDEX_DIRNAME:
        return "move those files out of it, or pass a new or empty folder as --cache-dir (cache_dir=)"
    return (f"pass a new or empty folder as --cache-dir (cache_dir=), or leave it out for the default "
            f"{str(root / INDEX_DIRNAME)!r}")


def check_folder(root: Path, cache: Path) -> None:
    """Raise ``IndexFolderError`` unless a build of ``root`` may write its index in ``cache``.

    It may where ``cache`` does not exist yet, is empty, holds crag_lab's ledger (files of the user's
    beside it are then left alone), or holds an index of an earlier crag_lab and nothing else (its
    ``CURRENT``, ``index-*`` and ``.tmp-*`` entries). It may not where ``cache`` is the knowledge base
    or holds it, is a file, or holds anything else. Reads the folder's listing only; writes nothing.
    """
    try:
        where = cache.resolve()
    except (OSError, RuntimeError):  # a symlink loop: listing it fails below with that reason
        where = cache
    if root.is_relative_to(where):
        what = "is the knowledge-base folder" if where == root else f"holds the knowledge-base folder {str(root)!r}"
        raise IndexFolderError(f"index folder {str(cache)!r} {what}: the index would mix its files with your "
                               f"documents; {_hint(root, where)}")
    try:
        names = os.listdir(where)
    except FileNotFoundError:
        return
    except NotADirectoryError:
        raise IndexFolderError(f"index folder {str(cache)!r} is a file, not a folder; {_hint(root, where)}") from None
    if LEDGER_FILE in names:
        _read(where)
        return
    foreign = sorted(n for n in names if n not in _OWN_NAMES)
    if not foreign or ("CURRENT" in foreign and all(_EARLIER_LAYOUT.fullmatch(n) for n in foreign)):
        return
    shown = ", ".join(repr(n) for n in foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
    raise IndexFolderError(f"index folder {str(cache)!r} holds files crag_lab did not write ({shown}) and no "
                           f"{LEDGER_FILE}: the index would mix its files with yours; {_hint(root, where)}")


def _read(cache: Path) -> dict[str, Any] | None:
    """The ledger of ``cache`` (None: there is none); ``IndexFolderError`` if it cannot be read."""
    path = cache / LEDGER_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if (isinstance(data, dict) and data.get("written_by") == "crag_lab"
            and all(isinstance(data.get(key), list) and all(isinstance(n, str) for n in data[key])
                    for key in ("entries", "collections"))):
        return data
    raise IndexFolderError(f"{str(path)!r} is not a ledger crag_lab can read, so nothing in {str(cache)!r} can be "
                           "proved to be crag_lab's: delete that file if the folder holds only an index of crag_lab's "
                           "(its present entries are then never removed), or pass a new or empty folder as "
                           "--cache-dir (cache_dir=)")


class Ledger:
    """The entries and Qdrant collections that builds created in one index folder; use it under `build_lock`.

    ``entries`` are names in the folder, ``collections`` Qdrant collection names. Every change is
    saved at once (a temporary file renamed over ``crag-lab-owned.json``).
    """

    def __init__(self, cache: Path, entries: Iterable[str] = (), collections: Iterable[str] = ()) -> None:
        self.cache = cache
        self.entries = set(entries)
        self.collections = set(collections)

    @classmethod
    def open(cls, cache: Path) -> Ledger:
        """The ledger of ``cache``, written now if the folder has none (from then on it is an index folder)."""
        data = _read(cache)
        if data is not None:
            return cls(cache, data["entries"], data["collections"])
        ledger = cls(cache)
        ledger.save()
        return ledger

    def reserve(self, prefix: str) -> Path:
        """A new entry name (``prefix`` + 16 random hex digits), recorded; the caller creates it exclusively."""
        name = f"{prefix}{secrets.token_hex(8)}"
        self.record(name)
        return self.cache / name

    def record(self, name: str) -> None:
        """Record the entry ``name`` before creating it."""
        self.entries.add(name)
        self.save()

    def create_dir(self, prefix: str) -> Path:
        """A new, empty folder whose name starts with ``prefix``, recorded before it is made."""
        path = self.reserve(prefix)
        path.mkdir()  # exclusive: FileExistsError rather than adopting a folder that was there
        return path

    def record_collection(self, name: str) -> None:
        """Record the Qdrant collection ``name`` before creating it."""
        self.collections.add(name)
        self.save()

    def remove(self, names: Iterable[str]) -> None:
        """Remove the entries ``names`` that this ledger records (others are not touched), then forget
        every recorded entry that no longer exists (removed, renamed, or never created by a killed build)."""
        for name in names:
            if name not in self.entries:
                continue
            path = self.cache / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        gone = {name for name in self.entries if not os.path.lexists(self.cache / name)}
        if gone:
            self.entries -= gone
            self.save()

    def forget_collections(self, names: Iterable[str]) -> None:
        """Forget Qdrant collections that were dropped."""
        gone = self.collections & set(names)
        if gone:
            self.collections -= gone
            self.save()

    def save(self) -> None:
        data = {"written_by": "crag_lab", "format": _FORMAT, "note": _NOTE,
                "entries": sorted(self.entries), "collections": sorted(self.collections)}
        tmp = self.cache / _LEDGER_TMP
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, ensure_ascii=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.cache / LEDGER_FILE)


@contextmanager
def build_lock(cache: Path) -> Iterator[Ledger]:
    """Hold the build lock of ``cache`` (made if missing) and yield its ledger; waits while another build holds it.

    Call `check_folder` first: this writes into ``cache``.
    """
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache / LOCK_FILE)):
        yield Ledger.open(cache)
