"""Resumable, concurrent runs: each finished question is written down at once, and never asked twice.

A `RunJournal` is a JSONL file: a header line (the config, mode and model the run is for), then
one `QueryRecord` per finished question, appended, flushed and fsync'd as it finishes. `run_rows`
answers the questions the journal does not hold yet, with at most ``concurrency`` in flight, so a
run stopped by Ctrl-C, a killed process or a dead model server resumes where it stopped: the same
call with the same journal asks only what is left. A journal written for another config, mode or
model is refused (its records would not belong to this run). A torn last line (the process died
mid-write) is ignored.

A record is reused only for the same question: the same id *and* the same text (compared after
Unicode NFC normalisation). A question whose text changed under its id since it was answered is
asked again, with a `JournalTextChangedWarning` naming the id; its new answer is appended, and the
old one stays in the file (nothing a journal holds is ever dropped).

A question whose model calls all failed (a dead server, every retry spent) is not written down:
with a journal, `run_rows` raises `ModelUnavailableError` naming the model and its endpoint once
the questions in flight are done, instead of recording degraded answers as results.
"""

from __future__ import annotations

import json
import os
import threading
import unicodedata
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from crag_lab._paths import check_output
from crag_lab.config import CragConfig
from crag_lab.errors import CragLabError
from crag_lab.records import QueryRecord, QueryRow, check_unique_ids

HEADER_KIND = "crag_lab.run_journal"


class JournalMismatchError(CragLabError, ValueError):
    """The journal belongs to another run (config, mode or model)."""


class ModelUnavailableError(CragLabError, RuntimeError):
    """Every attempt of a model call failed (the server is down or unreachable); nothing was recorded for it."""


class JournalTextChangedWarning(UserWarning):
    """A journal answered a question under this id, but with other text: the question is asked again."""


def _text_key(question: object) -> str:
    return unicodedata.normalize("NFC", question) if isinstance(question, str) else repr(question)


def _header(config: CragConfig, mode: str, model: Mapping[str, Any]) -> dict[str, Any]:
    return {"kind": HEADER_KIND, "version": 1, "mode": mode, "model": dict(model),
            "config": config.model_dump(mode="json")}


class RunJournal:
    """The finished questions of one run, on disk (see the module docstring)."""

    def __init__(self, path: str | Path, *, config: CragConfig, mode: str, model: Mapping[str, Any]) -> None:
        self.path = Path(path)
        self.header = json.loads(json.dumps(_header(config, mode, model), default=str))
        self.records: dict[str, QueryRecord] = {}
        """The last record of each id (`find` also checks the question text)."""
        self._by_text: dict[tuple[str, str], QueryRecord] = {}
        self._lock = threading.Lock()
        if self.path.exists() and not self.path.is_dir():
            self._load()
        else:
            check_output(self.path, what="run journal")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._write_line(self.header)

    def _load(self) -> None:
        lines = self.path.read_text(encoding="utf-8").splitlines()
        if not lines:
            self._write_line(self.header)
            return
        try:
            found = json.loads(lines[0])
        except ValueError as exc:
            raise JournalMismatchError(f"{self.path} is not a crag_lab run journal (its first line is not JSON); "
                                       "choose another path") from exc
        if not isinstance(found, dict) or found.get("kind") != HEADER_KIND:
            raise JournalMismatchError(f"{self.path} is not a crag_lab run journal; choose another path")
        for key in ("mode", "model", "config"):
            if found.get(key) != self.header[key]:
                raise JournalMismatchError(
                    f"{self.path} was written for another {key} ({_diff(found.get(key), self.header[key])}); "
                    "resume with the same settings, or give a new journal path")
        torn = False
        for n, line in enumerate(lines[1:], 2):
            try:
                record = json.loads(line)
            except ValueError:
                if n == len(lines):  # torn by a crash mid-write: cut off, and that question is asked again
                    torn = True
                    continue
                raise JournalMismatchError(f"{self.path} line {n} is not JSON; the journal is damaged") from None
            self._keep(record)
        if torn or not self.path.read_bytes().endswith(b"\n"):
            kept = lines[:-1] if torn else lines
            self.path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")

    def _write_line(self, value: Mapping[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(value, ensure_ascii=False, default=str) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def _keep(self, record: QueryRecord) -> None:
        self.records[str(record["id"])] = record
        self._by_text[str(record["id"]), _text_key(record.get("query"))] = record

    def add(self, record: QueryRecord) -> None:
        with self._lock:
            self._write_line(record)
            self._keep(record)

    def find(self, query_id: str, question: str) -> QueryRecord | None:
        """The record of ``query_id`` answered for this ``question`` text (NFC-equal), else None."""
        return self._by_text.get((str(query_id), _text_key(question)))

    def __contains__(self, query_id: object) -> bool:
        return query_id in self.records

    def __len__(self) -> int:
        return len(self.records)


def _diff(found: Any, wanted: Any) -> str:
    if isinstance(found, dict) and isinstance(wanted, dict):
        keys = sorted(k for k in set(found) | set(wanted) if found.get(k) != wanted.get(k))
        return ", ".join(f"{k}: {found.get(k)!r} there, {wanted.get(k)!r} now" for k in keys[:3])
    return f"{found!r} there, {wanted!r} now"


def failed_calls(record: QueryRecord) -> list[str]:
    """The tasks of ``record`` whose model call failed every attempt."""
    return [str(u["task"]) for u in record.get("usage", []) if not u.get("ok", True)]


AnswerMany = Callable[[Sequence[QueryRow], Callable[[], bool]], Iterator[QueryRecord]]
"""Answers rows and yields each record as it finishes, in any order; ``stop()`` true means: start
nothing new, only finish what is in flight. `threaded` is the local one; `crag_lab.ray_executor`
answers on a Ray actor pool."""


def threaded(answer: Callable[[QueryRow], QueryRecord], concurrency: int = 1) -> AnswerMany:
    """`AnswerMany` over ``answer``, one question at a time or ``concurrency`` threads."""

    def answer_many(todo: Sequence[QueryRow], stop: Callable[[], bool]) -> Iterator[QueryRecord]:
        if concurrency == 1:
            for row in todo:
                if stop():
                    return
                yield answer(row)
            return
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="crag-run") as pool:
            pending: set[Future[QueryRecord]] = set()
            queue = iter(todo)
            try:
                while True:
                    while len(pending) < concurrency and not stop() and (nxt := next(queue, None)) is not None:
                        pending.add(pool.submit(answer, nxt))
                    if not pending:
                        return
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for future in finished:
                        yield future.result()
            finally:  # an exception, or the consumer stopped early: nothing new starts
                for future in pending:
                    future.cancel()

    return answer_many


def run_rows(rows: Sequence[QueryRow], answer: Callable[[QueryRow], QueryRecord] | None = None, *,
             concurrency: int = 1, journal: RunJournal | None = None, endpoint: str = "the model",
             answer_many: AnswerMany | None = None, alive: Callable[[], bool] | None = None) -> list[QueryRecord]:
    """Answer ``rows`` (those the journal lacks), at most ``concurrency`` at a time; the records in row order.

    ``answer`` runs one question (on ``concurrency`` threads); ``answer_many`` instead answers the
    rows the journal lacks its own way (a Ray actor pool). With a journal, each record is written
    as it finishes, and a question whose model calls all failed raises `ModelUnavailableError`
    (naming ``endpoint``) after the questions in flight are done. ``alive`` (the model's
    ``server_alive``) is asked then: a server that still answers is slow, not gone, so the run goes
    on with the other questions, and the error at the end names the failed ones (nothing is recorded
    for them; the same command asks them again).
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if answer_many is None:
        if answer is None:
            raise TypeError("run_rows needs answer (one question) or answer_many (many)")
        answer_many = threaded(answer, concurrency)
    check_unique_ids([row["id"] for row in rows])
    done: dict[str, QueryRecord] = {}
    if journal is not None:
        changed = []
        for row in rows:
            found = journal.find(row["id"], row["question"])
            if found is not None:
                done[row["id"]] = found
            elif row["id"] in journal:
                changed.append(row["id"])
        if changed:
            shown = ", ".join(map(repr, changed[:10])) + (f" and {len(changed) - 10} more" if len(changed) > 10 else "")
            warnings.warn(f"{journal.path}: the question text of {len(changed)} id(s) changed since the journal answered "
                          f"them: {shown}; they are asked again (the old answers stay in the journal)",
                          JournalTextChangedWarning, stacklevel=2)
    todo = [row for row in rows if row["id"] not in done]
    wanted = {row["id"] for row in todo}
    failures: list[str] = []
    slow: list[str] = []  # failed while the server still answered: the run goes on
    for record in answer_many(todo, lambda: bool(failures)):
        query_id = str(record["id"])
        if query_id not in wanted:
            raise RuntimeError(f"an answer came back for {query_id!r}, which was not asked in this run")
        failed = failed_calls(record)
        if journal is not None and failed:
            (slow if alive is not None and not failures and alive() else failures).append(
                f"{query_id} ({', '.join(failed)})")
            continue
        if journal is not None:
            journal.add(record)
        done[query_id] = record
    if slow and not failures:
        raise ModelUnavailableError(
            f"model calls to {endpoint} failed on every attempt for {len(slow)} question(s) while the server "
            f"still answered (slower than the timeouts allow?): {'; '.join(slow[:5])}. Nothing was recorded for "
            f"them; the other {len(done)} question(s) finished and are kept in the journal. Run the same command "
            "again to ask them again (a larger --timeout / model_timeout_s gives slow calls more time).")
    if failures:
        failures += slow
        raise ModelUnavailableError(
            f"model calls to {endpoint} failed on every attempt for {len(failures)} question(s): "
            f"{'; '.join(failures[:5])}. Nothing was recorded for them; {len(done)} finished question(s) are "
            "kept in the journal. Check that the server is up, then run the same command again to resume.")
    missing = [row["id"] for row in rows if row["id"] not in done]
    if missing:
        raise RuntimeError(f"no answer came back for {len(missing)} question(s): {missing[:5]}")
    return [done[row["id"]] for row in rows]


__all__ = ["AnswerMany", "JournalMismatchError", "JournalTextChangedWarning", "ModelUnavailableError", "RunJournal",
           "failed_calls", "run_rows", "threaded"]
