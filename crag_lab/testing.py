"""Test doubles for notebooks and test suites: a model that replays canned answers per task.

>>> llm = ScriptedLLM({"analyze": '{"complexity": "chitchat"}', "synthesize": ["Hi!"]})
>>> llm.complete("analyze", "prompt text", {}).text
'{"complexity": "chitchat"}'
>>> [c["task"] for c in llm.calls]
['analyze']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from crag_lab.models import TASKS, ModelReply, Task, count_tokens
from crag_lab.tools import evidence_json

Script = str | BaseException | Sequence[str | BaseException]


class ScriptExhausted(RuntimeError):
    """A task was called more often than its script has answers."""


class ScriptedLLM:
    """Replays raw texts per task, in order; a single string repeats forever.

    An entry that is an exception instance is raised instead of answered, to inject model faults.
    Every call is recorded in ``calls`` as ``{"task": ..., "prompt": ...}`` with the rendered prompt.
    """

    name = "scripted"

    def __init__(self, script: Mapping[str, Script]) -> None:
        unknown = set(script) - set(TASKS)
        if unknown:
            raise ValueError(f"unknown task(s) {sorted(unknown)}; tasks are {list(TASKS)}")
        self._script = dict(script)
        self._cursor: dict[str, int] = {task: 0 for task in script}
        self.calls: list[dict[str, Any]] = []

    def complete(self, task: Task, prompt: str, inputs: Mapping[str, Any]) -> ModelReply:
        self.calls.append({"task": task, "prompt": prompt})
        if task not in self._script:
            raise ScriptExhausted(f"ScriptedLLM has no script for task {task!r}; scripted: {sorted(self._script)}")
        entry = self._script[task]
        if isinstance(entry, (str, BaseException)):
            answer: str | BaseException = entry
        else:
            i = self._cursor[task]
            if i >= len(entry):
                raise ScriptExhausted(f"ScriptedLLM script for {task!r} has {len(entry)} answers; call {i + 1} asked")
            self._cursor[task] = i + 1
            answer = entry[i]
        if isinstance(answer, BaseException):
            raise answer
        return ModelReply(answer, count_tokens(prompt), count_tokens(answer))

    def calls_for(self, task: str) -> list[dict[str, Any]]:
        """The recorded calls of one task."""
        return [c for c in self.calls if c["task"] == task]


class StaticTool:
    """A tool that returns canned evidence items and records its calls.

    ``items`` is one list returned on every call, or a list of lists returned call by call (the last
    one repeats). Items are dicts with ``text``, ``path`` and optionally ``line``, ``line_end``,
    ``score``, ``title``.

    >>> import json
    >>> tool = StaticTool("vector_search", [{"text": "port 8443", "path": "gw.md", "line": 3, "score": 0.9}])
    >>> json.loads(tool({"query": "port"}))[0]["path"]
    'gw.md'
    """

    def __init__(self, name: str, items: Sequence[Mapping[str, Any]] | Sequence[Sequence[Mapping[str, Any]]]) -> None:
        self.name = name
        given: list[Any] = list(items)
        batches: list[list[Mapping[str, Any]]] = (
            [given] if given and isinstance(given[0], Mapping) else [list(b) for b in given]
        )
        self._batches = batches or [[]]
        self.calls: list[dict[str, Any]] = []

    def __call__(self, args: Mapping[str, Any]) -> str:
        batch = self._batches[min(len(self.calls), len(self._batches) - 1)]
        self.calls.append(dict(args))
        return evidence_json(batch)
