"""A persistent response cache: re-running an experiment with a real model makes no call twice.

`ResponseCache` is one SQLite file (standard library; safe across threads, and across processes
by SQLite's own locking). `CachedModel` wraps any `CragModel`: a reply is looked up by the model's identity, the
task, the rendered prompt and the generation parameters (`cache_identity`), and only a successful
reply is stored, so a failed or timed-out call is asked again next time. A cached reply comes back
with ``cached=True``; the usage records and the stats block count those hits apart from real calls.

>>> from crag_lab.testing import ScriptedLLM
>>> cache = ResponseCache(":memory:")
>>> model = CachedModel(ScriptedLLM({"plan": "[]"}), cache)
>>> model.complete("plan", "Plan: q", {}).cached, model.complete("plan", "Plan: q", {}).cached
(False, True)
>>> cache.stats()
{'entries': 1, 'hits': 1, 'misses': 1}
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

from crag_lab.errors import CragLabError
from crag_lab.models import CragModel, ModelReply, Task, model_identity

SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    task TEXT NOT NULL,
    text TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    created REAL NOT NULL DEFAULT (julianday('now'))
)
"""


COLUMNS = ("key", "model", "task", "text", "prompt_tokens", "completion_tokens")
"""The columns a response cache's ``responses`` table must have."""
_HEADER = b"SQLite format 3\x00"
_FIX = "delete or move it (a cache only saves calls: the replies are asked again) or choose another path"


class CacheFileError(CragLabError, ValueError):
    """A response-cache file that is not one: a folder, not SQLite, damaged, or another program's database.

    The message names the file and what to do; crag_lab never deletes or changes such a file itself.
    """


def check_cache_file(path: str | Path, *, what: str = "response cache") -> None:
    """Raise unless ``path`` can be a response cache: a crag_lab cache that SQLite reads whole, an empty
    file, or no file yet in an existing folder this user can write to (``":memory:"`` always can).

    Reads only: nothing is created, changed or removed. ``what`` starts the message (``--cache``).
    A folder that does not exist is a ``FileNotFoundError``; anything else is a `CacheFileError`
    naming the file.

    >>> check_cache_file(":memory:")
    """
    if str(path) == ":memory:":
        return
    target = Path(path)
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        parent = target.parent
        if not parent.is_dir():
            raise FileNotFoundError(f"{what} {path}: the folder {parent} does not exist; create it or choose another "
                                    "path") from None
        if not os.access(parent, os.W_OK | os.X_OK):
            raise CacheFileError(f"{what} {path}: cannot be created in {parent} (not writable by this user); fix its "
                                 "permissions or choose another path") from None
        return
    except OSError as exc:  # a parent that is a file, a loop of links, permissions
        raise CacheFileError(f"{what} {path}: cannot be used ({exc.strerror or exc}); choose another path") from None
    if stat.S_ISDIR(mode):
        raise CacheFileError(f"{what} {path}: is a folder, not a file; give a file path such as "
                             f"{target / 'responses.sqlite'}")
    if not stat.S_ISREG(mode):  # SQLite would block on a FIFO
        raise CacheFileError(f"{what} {path}: is not a regular file (a FIFO, socket or device); choose another path")
    try:
        with target.open("rb") as fh:
            head = fh.read(len(_HEADER))
    except OSError as exc:
        raise CacheFileError(f"{what} {path}: cannot be read ({exc.strerror or exc}); fix its permissions or choose "
                             "another path") from None
    if not head:
        return  # an empty file: SQLite makes it a new database
    if head != _HEADER:
        raise CacheFileError(f"{what} {path}: is not a SQLite database, so not a response cache; {_FIX}")
    _check_database(target, what)


def _check_database(target: Path, what: str) -> None:
    writable = os.access(target, os.W_OK)
    # ``rw`` (never ``rwc``): nothing is created, and a journal a killed writer left is rolled back as any open would.
    uri = f"file:{quote(str(target.absolute()))}?mode={'rw' if writable else 'ro'}"
    try:
        db = sqlite3.connect(uri, uri=True, timeout=30.0)
    except sqlite3.Error as exc:
        raise CacheFileError(f"{what} {target}: cannot be opened ({exc}); {_FIX}") from None
    try:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        if tables and "responses" not in tables:
            raise CacheFileError(f"{what} {target}: is a SQLite database of another program (tables: "
                                 f"{', '.join(tables[:5])}), not a response cache; choose another path")
        if tables:
            columns = {row[1] for row in db.execute("PRAGMA table_info(responses)")}
            missing = [c for c in COLUMNS if c not in columns]
            if missing:
                raise CacheFileError(f"{what} {target}: its responses table lacks {', '.join(missing)}, so it is not a "
                                     "crag_lab response cache; choose another path")
        verdict = [row[0] for row in db.execute("PRAGMA quick_check")]
        if verdict != ["ok"]:
            raise CacheFileError(f"{what} {target}: is damaged (SQLite: {str(verdict[0])[:120]}); {_FIX}")
    except sqlite3.DatabaseError as exc:
        raise CacheFileError(f"{what} {target}: is not a readable SQLite database ({exc}); {_FIX}") from None
    finally:
        db.close()


def cache_identity(model: CragModel) -> dict[str, Any]:
    """What makes two models' replies interchangeable: ``model.cache_identity()`` (less the endpoint) or its name."""
    out = model_identity(model)
    out.pop("api_base", None)
    return out


def cache_key(identity: Mapping[str, Any], task: str, prompt: str) -> str:
    """SHA-256 over the identity, the task and the prompt, as canonical JSON.

    >>> cache_key({"name": "m"}, "plan", "p") == cache_key({"name": "m"}, "plan", "p")
    True
    >>> cache_key({"name": "m"}, "plan", "p") == cache_key({"name": "m", "temperature": 0.7}, "plan", "p")
    False
    """
    blob = json.dumps({"model": identity, "task": task, "prompt": prompt}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """Model replies in one SQLite file (``":memory:"`` for a throwaway one).

    The file is checked when the cache is made (`check_cache_file`): a file that is not a response
    cache, or is damaged, raises `CacheFileError` naming it, and is left as it is. An SQLite error
    later (the file damaged or locked mid-run) is a `CacheFileError` naming the file too.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        check_cache_file(self.path)
        self._lock = threading.Lock()
        # The default rollback journal: a cache that is only read (a recording's) is never modified.
        with self._named():
            self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30.0)
            self._db.execute(SCHEMA)
            self._db.commit()
        self.hits = 0
        self.misses = 0

    def _named(self) -> AbstractContextManager[None]:
        return _named_errors(self.path)

    def get(self, key: str) -> ModelReply | None:
        with self._lock, self._named():
            row = self._db.execute("SELECT text, prompt_tokens, completion_tokens FROM responses WHERE key = ?",
                                   (key,)).fetchone()
            if row is None:
                self.misses += 1
                return None
            self.hits += 1
        return ModelReply(text=row[0], prompt_tokens=int(row[1]), completion_tokens=int(row[2]), cached=True)

    def put(self, key: str, model: str, task: str, reply: ModelReply) -> None:
        with self._lock, self._named():
            self._db.execute(
                "INSERT OR REPLACE INTO responses (key, model, task, text, prompt_tokens, completion_tokens) "
                "VALUES (?, ?, ?, ?, ?, ?)", (key, model, task, reply.text, reply.prompt_tokens, reply.completion_tokens))
            self._db.commit()

    def __len__(self) -> int:
        with self._lock, self._named():
            return int(self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def stats(self) -> dict[str, int]:
        """Entries stored, and this process's hits and misses."""
        return {"entries": len(self), "hits": self.hits, "misses": self.misses}

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __repr__(self) -> str:
        return f"ResponseCache({self.path!r}, entries={len(self)})"


@contextmanager
def _named_errors(path: str) -> Iterator[None]:
    """An ``sqlite3.DatabaseError`` (damaged, locked, read-only, disk full) as a `CacheFileError` naming the file."""
    try:
        yield
    except sqlite3.ProgrammingError:  # a bug of the caller (a closed cache), not the file's
        raise
    except sqlite3.DatabaseError as exc:
        raise CacheFileError(f"response cache {path}: {exc}; if it is damaged, {_FIX}") from exc


class CachedModel:
    """Any `CragModel` behind a `ResponseCache`: a hit returns the stored reply, a miss calls and stores it."""

    def __init__(self, model: CragModel, cache: ResponseCache) -> None:
        self.model = model
        self.cache = cache
        self.name = model.name
        self._identity = cache_identity(model)
        self._endpoint = model_identity(model).get("api_base")

    def cache_identity(self) -> dict[str, Any]:
        return {**self._identity, **({"api_base": self._endpoint} if self._endpoint else {})}

    def complete(self, task: Task, prompt: str, inputs: Mapping[str, Any]) -> ModelReply:
        key = cache_key(self._identity, task, prompt)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        reply = self.model.complete(task, prompt, inputs)
        if isinstance(reply, ModelReply) and isinstance(reply.text, str):  # call_model rejects anything else
            self.cache.put(key, self.name, task, replace(reply, cached=False))
        return reply

    def __getattr__(self, name: str) -> Any:  # the wrapped model's extras (e.g. the offline model's caches)
        if name == "model":  # not set yet (copy, unpickling): never recurse
            raise AttributeError(name)
        return getattr(self.model, name)


def with_cache(model: CragModel, cache: ResponseCache | str | Path | None) -> CragModel:
    """``model`` behind ``cache`` (a `ResponseCache` or a path to one); unchanged for None."""
    if cache is None:
        return model
    return CachedModel(model, cache if isinstance(cache, ResponseCache) else ResponseCache(cache))


__all__ = ["CacheFileError", "CachedModel", "ResponseCache", "cache_identity", "cache_key", "check_cache_file",
           "with_cache"]
