"""The knowledge-base tools the agent calls: ``vector_search``, ``keyword_search``, ``grep``, ``read_file``.

Each tool takes a mapping of arguments and returns ``evidence_json([...])``: a JSON array of
``{text, path, line, line_end, score, title}`` objects, where ``path`` is relative to the
knowledge-base root, ``line``/``line_end`` are 1-based and inclusive, and ``text`` is exactly
those lines of the file. ``score`` is a cosine for ``vector_search``, a BM25 score for
``keyword_search`` and None otherwise. Bad arguments raise ``ToolError`` naming the argument
and the type it must have. Queries and patterns are made Unicode NFC, as the indexed text is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from llama_index.core.schema import MetadataMode, NodeWithScore

from crag_lab._text import encodable, nfc
from crag_lab.kb import KnowledgeBase, KnowledgeBaseError, Passage
from crag_lab.kb._regex import DEFAULT_TIMEOUT_S as GREP_TIMEOUT_S
from crag_lab.tools._base import Tool, ToolError, evidence_json

MAX_TOP_K = 100
MAX_CONTEXT = 20
GREP_MAX_MATCHES = 20
READ_MAX_LINES = 400

Evidence = dict[str, Any]


def kb_tools(kb: KnowledgeBase, top_k: int = 5) -> list[Tool]:
    """The four knowledge-base tools over ``kb``; ``top_k`` is the default number of search hits.

    >>> tools = {t.name: t for t in kb_tools(kb)}  # doctest: +SKIP
    >>> tools["read_file"]({"path": "faq.md", "start_line": 3, "end_line": 3})  # doctest: +SKIP
    '[{"text": "The port is 8080.", "path": "faq.md", "line": 3, "line_end": 3, "score": null, "title": "FAQ"}]'
    """
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise ValueError(f"top_k must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}")
    # grep gets the same budget as the searches: its matches all land in one grading round.
    return [VectorSearchTool(kb, top_k), KeywordSearchTool(kb, top_k), GrepTool(kb, max_matches=top_k), ReadFileTool(kb)]


# --- argument checks ------------------------------------------------------------------------


def _arguments(tool: str, args: Any, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(args, Mapping):
        raise ToolError(f"{tool}: arguments must be an object with keys {list(allowed)}, got {type(args).__name__}")
    unknown = sorted(str(key) for key in args if key not in allowed)
    if unknown:
        raise ToolError(f"{tool}: unknown argument(s) {unknown}; valid arguments are {list(allowed)}")
    return args


def _string(tool: str, args: Mapping[str, Any], key: str, *, text: bool = True) -> str:
    """A non-empty string argument; ``text``: made NFC, as the knowledge base's lines are (a path is
    not: `KnowledgeBase.resolve` matches a file name in either form)."""
    value = args.get(key)
    if value is None:
        raise ToolError(f"{tool}: missing required argument {key!r} (a non-empty string)")
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"{tool}: argument {key!r} must be a non-empty string, got {_describe(value)}")
    value = encodable(value)  # a model's lone surrogates would make the tokenizers raise
    return nfc(value) if text else value


def _integer(tool: str, args: Mapping[str, Any], key: str, low: int, high: int | None = None) -> int | None:
    value = args.get(key)
    if value is None:
        return None
    bounds = f"from {low} to {high}" if high is not None else f">= {low}"
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        raise ToolError(f"{tool}: argument {key!r} must be an integer {bounds}, got {_describe(value)}")
    return value


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"[:80]


def _search_args(tool: str, args: Any, default_top_k: int) -> tuple[str, int]:
    """``{query: str, top_k?: int}`` of ``vector_search`` and ``keyword_search``."""
    args = _arguments(tool, args, ("query", "top_k"))
    top_k = _integer(tool, args, "top_k", 1, MAX_TOP_K)
    return _string(tool, args, "query"), default_top_k if top_k is None else top_k


def _grep_args(args: Any) -> tuple[str, int]:
    """``{pattern: str, context?: int}`` of ``grep``."""
    args = _arguments("grep", args, ("pattern", "context"))
    context = _integer("grep", args, "context", 0, MAX_CONTEXT)
    return _string("grep", args, "pattern"), 2 if context is None else context


def _read_args(args: Any) -> tuple[str, int | None, int | None]:
    """``{path: str, start_line?: int, end_line?: int}`` of ``read_file``."""
    args = _arguments("read_file", args, ("path", "start_line", "end_line"))
    path = _string("read_file", args, "path", text=False)
    start = _integer("read_file", args, "start_line", 1)
    end = _integer("read_file", args, "end_line", 1)
    if start is not None and end is not None and end < start:
        raise ToolError(f"read_file: end_line ({end}) must be >= start_line ({start})")
    return path, start, end


# --- evidence -------------------------------------------------------------------------------


def _run(tool: str, produce: Callable[[], list[Evidence]]) -> str:
    """Turn knowledge-base failures into ``ToolError`` messages prefixed with the tool name."""
    try:
        return evidence_json(produce())
    except ToolError:
        raise
    except (KnowledgeBaseError, ValueError, OSError) as exc:
        raise ToolError(f"{tool}: {exc}") from exc


def _from_node(hit: NodeWithScore) -> Evidence:
    meta = hit.node.metadata
    return {
        "text": hit.node.get_content(metadata_mode=MetadataMode.NONE),
        "path": meta["path"],
        "line": meta["line_start"],
        "line_end": meta["line_end"],
        "score": None if hit.score is None else round(float(hit.score), 4),
        "title": meta["title"],
    }


def _from_passage(passage: Passage, text: str | None = None) -> Evidence:
    return {
        "text": passage.text if text is None else text,
        "path": passage.path,
        "line": passage.line_start,
        "line_end": passage.line_end,
        "score": None,
        "title": passage.title,
    }


# --- the tools ------------------------------------------------------------------------------


@dataclass
class VectorSearchTool:
    """``vector_search``: the chunks closest in meaning to ``query`` (score: cosine, higher is better)."""

    kb: KnowledgeBase
    top_k: int = 5
    name: str = "vector_search"
    description: ClassVar[str] = (
        "Semantic search over the knowledge base. Args: query (string), top_k (integer, optional). "
        "Returns passages with file path, line range and cosine score."
    )

    def __call__(self, args: Mapping[str, Any]) -> str:
        query, top_k = _search_args(self.name, args, self.top_k)
        return _run(self.name, lambda: [_from_node(hit) for hit in self.kb.vector_retriever(top_k).retrieve(query)])


@dataclass
class KeywordSearchTool:
    """``keyword_search``: BM25 over the same chunks; chunks sharing no term with ``query`` are left out."""

    kb: KnowledgeBase
    top_k: int = 5
    name: str = "keyword_search"
    description: ClassVar[str] = (
        "Keyword (BM25) search over the knowledge base, best for exact names, identifiers and error "
        "messages. Args: query (string), top_k (integer, optional)."
    )

    def __call__(self, args: Mapping[str, Any]) -> str:
        query, top_k = _search_args(self.name, args, self.top_k)

        def produce() -> list[Evidence]:
            hits = self.kb.keyword_retriever(top_k).retrieve(query)
            return [_from_node(hit) for hit in hits if hit.score is not None and hit.score > 0]

        return _run(self.name, produce)


@dataclass
class GrepTool:
    """``grep``: lines matching a case-insensitive regex (an invalid one is searched literally).

    The pattern comes from a model, so its cost is bounded: a pattern that is too long, unrolls too
    far or searches longer than ``timeout_s`` raises ``PatternTooExpensiveError``, a ``ToolError``
    that the graph audits as ``tool_error``.
    """

    kb: KnowledgeBase
    max_matches: int = GREP_MAX_MATCHES
    name: str = "grep"
    timeout_s: float = GREP_TIMEOUT_S
    description: ClassVar[str] = (
        "Search every knowledge-base file for a case-insensitive regular expression. Args: pattern "
        f"(string), context (integer lines around each match, optional, default 2). At most {GREP_MAX_MATCHES} "
        "matching lines; each block of nearby matches is one result."
    )

    def __call__(self, args: Mapping[str, Any]) -> str:
        pattern, context = _grep_args(args)
        return _run(
            self.name,
            lambda: [_from_passage(p) for p in self.kb.grep(pattern, context=context, max_matches=self.max_matches,
                                                            timeout_s=self.timeout_s)],
        )


@dataclass
class ReadFileTool:
    """``read_file``: lines of one file (the whole file when no range), at most 400 lines per call."""

    kb: KnowledgeBase
    max_lines: int = READ_MAX_LINES
    name: str = "read_file"
    description: ClassVar[str] = (
        "Read a knowledge-base file by its relative path. Args: path (string), start_line and end_line "
        f"(1-based integers, optional). Returns at most {READ_MAX_LINES} lines per call."
    )

    def __call__(self, args: Mapping[str, Any]) -> str:
        path, start, end = _read_args(args)

        def produce() -> list[Evidence]:
            passage = self.kb.read(path, start, end, max_lines=self.max_lines)
            total = passage.total_lines or 0
            wanted_end = total if end is None else min(end, total)
            text = passage.text
            if passage.line_end < wanted_end:
                text += (
                    f"\n[truncated after {self.max_lines} lines: showing lines {passage.line_start}-"
                    f"{passage.line_end} of {total}; call read_file with "
                    f"start_line={passage.line_end + 1} to read on]"
                )
            return [_from_passage(passage, text)]

        return _run(self.name, produce)
