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
import sqlite3
import threading
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

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
    """Model replies in one SQLite file (``":memory:"`` for a throwaway one)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            parent = Path(self.path).parent
            if not parent.is_dir():
                raise FileNotFoundError(f"the cache's folder {parent} does not exist; create it or choose another path")
        self._lock = threading.Lock()
        # The default rollback journal: a cache that is only read (a recording's) is never modified.
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30.0)
        self._db.execute(SCHEMA)
        self._db.commit()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> ModelReply | None:
        with self._lock:
            row = self._db.execute("SELECT text, prompt_tokens, completion_tokens FROM responses WHERE key = ?",
                                   (key,)).fetchone()
            if row is None:
                self.misses += 1
                return None
            self.hits += 1
        return ModelReply(text=row[0], prompt_tokens=int(row[1]), completion_tokens=int(row[2]), cached=True)

    def put(self, key: str, model: str, task: str, reply: ModelReply) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO responses (key, model, task, text, prompt_tokens, completion_tokens) "
                "VALUES (?, ?, ?, ?, ?, ?)", (key, model, task, reply.text, reply.prompt_tokens, reply.completion_tokens))
            self._db.commit()

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def stats(self) -> dict[str, int]:
        """Entries stored, and this process's hits and misses."""
        return {"entries": len(self), "hits": self.hits, "misses": self.misses}

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __repr__(self) -> str:
        return f"ResponseCache({self.path!r}, entries={len(self)})"


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


__all__ = ["CachedModel", "ResponseCache", "cache_identity", "cache_key", "with_cache"]
