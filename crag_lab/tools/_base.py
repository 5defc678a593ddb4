"""The tool protocol shared by the knowledge-base tools and the remote connectors.

A tool takes a mapping of arguments and returns a JSON array (as text) of evidence objects, each
with ``text``, ``path``, ``line``, ``line_end``, ``score`` and ``title`` keys — the shape a
function-calling LLM tool would return. ``tool_exec`` splits that array into context items.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from crag_lab.errors import CragLabError


class ToolError(CragLabError):
    """A tool could not run: bad arguments, a refused path, a disabled connector, a failed fetch.

    The message is shown to the user and written to the audit log, so it must name what was wrong
    and what to do, and must never contain a secret.
    """


@runtime_checkable
class Tool(Protocol):
    """A callable tool with a name."""

    name: str

    def __call__(self, args: Mapping[str, Any]) -> str: ...


def evidence_json(items: Iterable[Mapping[str, Any]]) -> str:
    """Serialise evidence objects to the JSON-array text that tools return."""
    keys = ("text", "path", "line", "line_end", "score", "title")
    return json.dumps([{k: item.get(k) for k in keys} for item in items], ensure_ascii=False)


class ToolRegistry(Mapping[str, Tool]):
    """Tools by name; an unknown name raises ``KeyError`` listing the valid ones."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

    def __getitem__(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise KeyError(f"unknown tool {name!r}; available: {sorted(self._tools)}") from None

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)
