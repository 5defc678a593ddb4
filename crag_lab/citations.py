"""Citations and the usage-stats block: what the system, not the model, appends to every answer."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from crag_lab.parsing import strip_stats_blocks
from crag_lab.prompts import NO_EVIDENCE_ANSWER, cite_location

STATS_HEADER = "📊 **LLM Usage Stats:**"
_MARKER = re.compile(r"\[(\d{1,3}(?:\s*,\s*\d{1,3})*)\]")
_TRAILING_ENTRY = re.compile(r"^\s*\[\d{1,3}\]\s+\S+\s*$")
# A source-list entry the model wrote (or quoted from a document): a footnote number at the start
# of a line followed by a location (``[7] secrets/keys.md:L1``, ``- [2] a.md``). It is removed wherever
# it appears, with "Sources:" titles, so a forged footer cannot pose as a citation.
_LOCATION = r"(?:\S*/\S*|\S+\.[A-Za-z]\w{0,7}(?::L\d+(?:-L\d+)?)?|\S+:L\d+(?:-L\d+)?)"
_SOURCE_ENTRY = re.compile(rf"^[ \t]*(?:[-*][ \t]+)?\[\d{{1,3}}\][ \t]+{_LOCATION}(?=\s|$)", re.MULTILINE)
_SOURCES_TITLE = re.compile(
    r"^\s*(?:#{1,6}\s*)?(?:\*\*)?(?:sources?|references?|citations?)(?:\*\*)?\s*:?\s*(?:\*\*)?\s*$", re.IGNORECASE
)
_SENTINEL = re.compile("\x00(\\d+)\x01")


def _strip_model_footer(text: str) -> str:
    """Drop source lists the model wrote itself: ``[N] path`` entries and ``Sources:`` titles anywhere,
    and trailing ``[N] x`` lines."""
    text = _SOURCE_ENTRY.sub("", text)
    lines = [line for line in text.rstrip().split("\n") if not _SOURCES_TITLE.match(line)]
    while lines and (_TRAILING_ENTRY.match(lines[-1]) or not lines[-1].strip()):
        lines.pop()
    return "\n".join(lines)


def finalize_answer(text: str, items: Sequence[Mapping[str, Any]]) -> tuple[str, list[Mapping[str, Any]]]:
    """The answer body with inline markers renumbered, and the items it cites, in footer order.

    Markers are renumbered by first use (``[3] ... [1]`` becomes ``[1] ... [2]``); markers that point
    at no evidence item are removed, so a model (or a document it copied) cannot cite a source that
    was not retrieved. Stats blocks and model-written source lists are stripped.

    >>> body, cited = finalize_answer("Port 8443 [2].", [{"path": "a.md"}, {"path": "b.md", "line": 4}])
    >>> body, [c["path"] for c in cited]
    ('Port 8443 [1].', ['b.md'])
    """
    body = _strip_model_footer(strip_stats_blocks(text)).strip().replace("\x00", "").replace("\x01", "")
    order: dict[int, int] = {}

    def renumber(match: re.Match[str]) -> str:
        out = []
        for part in match.group(1).split(","):
            n = int(part)
            if 1 <= n <= len(items):
                order.setdefault(n, len(order) + 1)
                out.append(f"\x00{order[n]}\x01")  # a sentinel, so the next step cannot see it as a marker
        return "".join(out)

    body = _MARKER.sub(renumber, body)
    # Removing a marker can join its neighbours into a new one ("[[9]1]" -> "[1]"): that is no citation.
    body = _MARKER.sub(lambda m: f"({m.group(1)})", body)
    body = _SENTINEL.sub(r"[\1]", body)
    body = re.sub(r"[ \t]+([.,;:])", r"\1", body).strip()
    cited = [items[n - 1] for n in sorted(order, key=order.__getitem__)]
    return body, cited


_ITEM = re.compile(r"\bitem \[(\d{1,3})\]")


def cited_as(note: str, items: Sequence[Mapping[str, Any]], cited: Sequence[Mapping[str, Any]]) -> str:
    """A model's note about its answer with each ``item [N]`` (N: the evidence's order, as the prompt numbered it)
    followed by where the answer cites it: ``(cited as [K])`` after `finalize_answer` renumbered the markers, or
    ``(not cited)``.

    >>> items = [{"id": "a.md:L1-L3"}, {"id": "b.md:L4-L9"}]
    >>> cited_as("best unit in item [2]; the reader's in item [1]", items, [items[1]])
    "best unit in item [2] (cited as [1]); the reader's in item [1] (not cited)"
    """
    position = {item.get("id"): k for k, item in enumerate(cited, 1)}

    def mark(match: re.Match[str]) -> str:
        n = int(match.group(1))
        if not 1 <= n <= len(items):
            return match.group(0)
        k = position.get(items[n - 1].get("id"))
        return f"{match.group(0)} ({f'cited as [{k}]' if k else 'not cited'})"

    return _ITEM.sub(mark, note)


def weighed_as(units: Sequence[Mapping[str, Any]], items: Sequence[Mapping[str, Any]],
               cited: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The units a model weighed (`ModelReply.weighed`), each with its item's id and where the answer cites it:
    ``cited`` is the renumbered ``[K]`` of `finalize_answer`, or None when the answer does not cite that item.

    >>> items = [{"id": "a.md:L1-L3"}, {"id": "b.md:L4-L9"}]
    >>> for unit in weighed_as([{"rank": 1, "item": 2}, {"rank": 2, "item": 1}], items, [items[1]]):
    ...     print(unit)
    {'rank': 1, 'item': 2, 'id': 'b.md:L4-L9', 'cited': 1}
    {'rank': 2, 'item': 1, 'id': 'a.md:L1-L3', 'cited': None}
    """
    position = {item.get("id"): k for k, item in enumerate(cited, 1)}
    out = []
    for unit in units:
        n = unit.get("item")
        item_id = items[n - 1].get("id") if isinstance(n, int) and 1 <= n <= len(items) else None
        out.append({**unit, "id": item_id, "cited": position.get(item_id)})
    return out


def is_abstention(text: str) -> bool:
    return NO_EVIDENCE_ANSWER.lower() in text.lower()


def render_footer(cited: Sequence[Mapping[str, Any]]) -> str:
    """``Sources:`` then one ``[N] path:L12-L30`` line per cited item (bare path without lines)."""
    if not cited:
        return ""
    lines = [f"[{n}] {cite_location(item)}" for n, item in enumerate(cited, 1)]
    return "\n\nSources:\n" + "\n".join(lines)


def render_stats(usage: Sequence[Mapping[str, Any]]) -> str:
    """The ``---`` rule and the usage-stats block: calls, tokens, and a per-node breakdown.

    >>> print(render_stats([{"node": "synthesize", "prompt_tokens": 10, "completion_tokens": 5,
    ...                      "latency_ms": 1.0, "attempts": 1}]))
    ---
    📊 **LLM Usage Stats:**
    - API calls: 1
    - Total tokens: 15 (prompt 10, completion 5)
    - Model latency: 1 ms
    - By node:
      - synthesize: 1 call, 15 tokens, 1 ms
    """
    per_node: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0])
    prompt = completion = 0
    latency = 0.0
    attempts = 0
    for record in usage:
        p, c = int(record.get("prompt_tokens", 0)), int(record.get("completion_tokens", 0))
        prompt, completion = prompt + p, completion + c
        latency += float(record.get("latency_ms", 0.0))
        attempts += int(record.get("attempts", 1))
        row = per_node[str(record.get("node"))]
        row[0] += 1
        row[1] += p + c
        row[2] += float(record.get("latency_ms", 0.0))
    calls = len(usage)
    retry_note = f" ({attempts} attempts)" if attempts != calls else ""
    hits = sum(1 for record in usage if record.get("cached"))
    if hits:  # a cached reply is counted as a call of the run, and said to be one the model never saw
        retry_note += f" ({hits} answered from the response cache, no model call)"
    lines = [
        "---",
        STATS_HEADER,
        f"- API calls: {calls}{retry_note}",
        f"- Total tokens: {prompt + completion} (prompt {prompt}, completion {completion})",
        f"- Model latency: {latency:.0f} ms",
    ]
    if per_node:
        lines.append("- By node:")
        for node, (n, tokens, ms) in per_node.items():
            lines.append(f"  - {node}: {int(n)} call{'s' if n != 1 else ''}, {int(tokens)} tokens, {ms:.0f} ms")
    return "\n".join(lines)
