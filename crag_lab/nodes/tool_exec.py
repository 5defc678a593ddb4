"""``tool_exec``: run the planned calls; a JSON-array result becomes one context item per element."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from crag_lab.nodes._deps import Deps, Node
from crag_lab.records import NodeName, ToolCall
from crag_lab.state import AgentState, EvidenceItem
from crag_lab.tools import ToolError

NODE: NodeName = "tool_exec"


def _as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _as_float(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def item_id(path: str, line: int | None, line_end: int | None, text: str) -> str:
    """Deterministic identity of a piece of evidence: its location, or a hash of its text.

    The same chunk found by two tools gets the same id, so it enters the context once.
    """
    if line is not None:
        return f"{path}:L{line}-L{line_end if line_end is not None else line}"
    return f"{path}#{hashlib.sha1(text.encode('utf-8')).hexdigest()[:12]}"


def split_result(raw: str, tool: str, round_no: int) -> list[EvidenceItem]:
    """Evidence items from a tool's raw result.

    A JSON array gives one item per element (spec 003: five chunks ⇒ five items); a JSON object
    gives one item; any other text is one item with no location.

    >>> [i["text"] for i in split_result('[{"text": "a", "path": "x.md"}, {"text": "b", "path": "y.md"}]',
    ...                                  "vector_search", 1)]
    ['a', 'b']
    """
    try:
        value = json.loads(raw)
    except (TypeError, ValueError, RecursionError):  # RecursionError: nesting too deep to decode
        value = {"text": str(raw)}
    elements = value if isinstance(value, list) else [value]
    items: list[EvidenceItem] = []
    for element in elements:
        obj: Mapping[str, Any] = element if isinstance(element, Mapping) else {"text": json.dumps(element)}
        text = str(obj.get("text") or obj.get("content") or "")
        if not text.strip():
            continue
        path = str(obj.get("path") or obj.get("source") or tool)
        line, line_end = _as_int(obj.get("line")), _as_int(obj.get("line_end"))
        title = obj.get("title")
        items.append(
            EvidenceItem(
                id=item_id(path, line, line_end, text),
                text=text,
                path=path,
                line=line,
                line_end=line_end,
                tool=tool,
                score=_as_float(obj.get("score")),
                title=str(title) if title is not None else None,
                round=round_no,
            )
        )
    return items


def make_tool_exec(deps: Deps) -> Node:
    def tool_exec(state: AgentState) -> dict[str, Any]:
        log = deps.audit(NODE)
        round_no = state.get("iteration", 0) + 1
        seen = {item["id"] for item in state.get("context", [])}
        new_context: list[EvidenceItem] = []
        history: list[ToolCall] = []
        tried = list(state.get("tried_tools", []))
        for call in state.get("planned_calls", []):
            name, args = call["tool"], call.get("args", {})
            if name not in tried:
                tried.append(name)
            try:
                raw = deps.tools[name](args)
            except (ToolError, KeyError) as exc:
                message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
                log.log_audit("tool_error", level="warning", tool=name, args=args, error=str(message))
                history.append(ToolCall(tool=name, args=args, round=round_no, ok=False, error=str(message),
                                        item_ids=[], scores=[]))
                continue
            except Exception as exc:  # a crashing tool must not end the run
                log.log_audit("tool_crashed", level="error", tool=name, args=args,
                              error=f"{type(exc).__name__}: {exc}"[:500])
                history.append(ToolCall(tool=name, args=args, round=round_no, ok=False,
                                        error=type(exc).__name__, item_ids=[], scores=[]))
                continue
            items = split_result(raw, name, round_no)
            fresh = [item for item in items if item["id"] not in seen]
            seen.update(item["id"] for item in fresh)
            new_context.extend(fresh)
            history.append(ToolCall(tool=name, args=args, round=round_no, ok=True, error=None,
                                    item_ids=[i["id"] for i in items], scores=[i.get("score") for i in items]))
            log.log_audit("tool_result", tool=name, items=len(items), new_items=len(fresh))
        context = [*state.get("context", []), *new_context]
        return {"context": context, "tool_history": history, "tried_tools": tried,
                "audit": log.events, "path": [NODE]}

    return tool_exec
