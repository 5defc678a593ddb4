"""The knowledge-base tools (crag_lab/tools/kb_tools.py): evidence shape, line ranges, argument errors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from crag_lab.kb import KnowledgeBase, PathOutsideKnowledgeBaseError
from crag_lab.tools import Tool, ToolError, ToolRegistry
from crag_lab.tools.kb_tools import kb_tools

FILES = {
    "install.md": (
        "# Installation\n\n"
        "Install the agent with `pip install crag-lab`.\n\n"
        "## Configuration\n\n"
        "Set KB_AGENT_TOP_K to change how many passages each search returns.\n"
        "The default relevance floor is 0.3 (see config.py).\n"
    ),
    "ops/alerts.md": (
        "# Alerts\n\n"
        "## Disk full\n\n"
        "When the disk is full the ingest worker stops with error ENOSPC.\n"
        "Free space by pruning old snapshots: `snapctl prune --keep 3`.\n"
    ),
    "big.txt": "\n".join(f"row {n}" for n in range(1, 451)) + "\n",
}
KEYS = {"text", "path", "line", "line_end", "score", "title"}


@pytest.fixture(scope="module")
def kb_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tools") / "kb"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def tools(kb_root: Path, embed_model) -> ToolRegistry:
    return ToolRegistry(kb_tools(KnowledgeBase.build(kb_root, embed_model=embed_model), top_k=3))


def call(tools: ToolRegistry, name: str, args: Any) -> list[dict[str, Any]]:
    items = json.loads(tools[name](args))
    assert isinstance(items, list)
    for item in items:
        assert set(item) == KEYS
    return items


def exact(root: Path, item: dict[str, Any]) -> str:
    lines = (root / item["path"]).read_text(encoding="utf-8").split("\n")
    return "\n".join(lines[item["line"] - 1 : item["line_end"]])


def test_the_four_tools_have_the_expected_names(tools: ToolRegistry) -> None:
    assert list(tools) == ["vector_search", "keyword_search", "grep", "read_file"]
    assert all(isinstance(tool, Tool) for tool in tools.values())


def test_vector_search_returns_cosine_scored_exact_passages(tools: ToolRegistry, kb_root: Path) -> None:
    items = call(tools, "vector_search", {"query": "how do I free disk space?"})
    assert len(items) == 3
    top = items[0]
    assert (top["path"], top["title"]) == ("ops/alerts.md", "Alerts > Disk full")
    assert isinstance(top["score"], float) and 0.3 < top["score"] <= 1.0
    for item in items:
        assert item["text"] == exact(kb_root, item)
    assert [i["score"] for i in items] == sorted((i["score"] for i in items), reverse=True)
    assert len(call(tools, "vector_search", {"query": "install", "top_k": 1})) == 1


def test_keyword_search_is_bm25_and_drops_non_matching_chunks(tools: ToolRegistry, kb_root: Path) -> None:
    items = call(tools, "keyword_search", {"query": "ENOSPC", "top_k": 5})
    assert len(items) == 1
    [item] = items
    assert (item["path"], item["line"], item["line_end"]) == ("ops/alerts.md", 1, 6)
    assert item["score"] > 0 and item["text"] == exact(kb_root, item)
    assert call(tools, "keyword_search", {"query": "zyxwvut"}) == []


def test_grep_returns_one_item_per_block_with_line_ranges(tools: ToolRegistry, kb_root: Path) -> None:
    items = call(tools, "grep", {"pattern": "kb_agent_top_k|relevance floor", "context": 0})
    assert [(i["path"], i["line"], i["line_end"], i["score"]) for i in items] == [("install.md", 7, 8, None)]
    assert items[0]["text"] == exact(kb_root, items[0])
    assert items[0]["title"] == "Installation > Configuration"
    with_context = call(tools, "grep", {"pattern": "ENOSPC"})
    assert [(i["line"], i["line_end"]) for i in with_context] == [(3, 6)]
    assert with_context[0]["text"] == exact(kb_root, with_context[0])


def test_grep_with_an_invalid_regex_searches_literally(tools: ToolRegistry) -> None:
    items = call(tools, "grep", {"pattern": "0.3 (SEE", "context": 0})  # unbalanced parenthesis
    assert [(i["path"], i["line"], i["line_end"]) for i in items] == [("install.md", 8, 8)]


def test_read_file_returns_one_exact_item(tools: ToolRegistry, kb_root: Path) -> None:
    [item] = call(tools, "read_file", {"path": "install.md", "start_line": 5, "end_line": 7})
    assert (item["path"], item["line"], item["line_end"], item["score"]) == ("install.md", 5, 7, None)
    assert item["text"] == exact(kb_root, item)
    assert item["title"] == "Installation"
    [whole] = call(tools, "read_file", {"path": "ops/alerts.md"})
    assert whole["text"] == (kb_root / "ops/alerts.md").read_text().rstrip("\n")
    assert (whole["line"], whole["line_end"]) == (1, 6)


def test_read_file_caps_a_long_file_at_400_lines_and_says_so(tools: ToolRegistry) -> None:
    [item] = call(tools, "read_file", {"path": "big.txt"})
    assert (item["line"], item["line_end"]) == (1, 400)
    body, note = item["text"].rsplit("\n", 1)
    assert body.split("\n") == [f"row {n}" for n in range(1, 401)]
    assert "truncated" in note and "of 450" in note and "start_line=401" in note
    [rest] = call(tools, "read_file", {"path": "big.txt", "start_line": 401})
    assert (rest["line"], rest["line_end"]) == (401, 450) and "truncated" not in rest["text"]


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("vector_search", {}, "missing required argument 'query'"),
        ("vector_search", {"query": 42}, "'query' must be a non-empty string, got int 42"),
        ("vector_search", {"query": "  "}, "'query' must be a non-empty string"),
        ("vector_search", {"query": "x", "top_k": "5"}, "'top_k' must be an integer from 1 to 100, got str '5'"),
        ("vector_search", {"query": "x", "top_k": True}, "'top_k' must be an integer"),
        ("keyword_search", {"query": "x", "top_k": 0}, "'top_k' must be an integer from 1 to 100"),
        ("keyword_search", {"qurey": "x"}, "unknown argument(s) ['qurey']; valid arguments are ['query', 'top_k']"),
        ("keyword_search", ["query"], "arguments must be an object"),
        ("grep", {}, "missing required argument 'pattern'"),
        ("grep", {"pattern": "x", "context": -1}, "'context' must be an integer from 0 to 20"),
        ("grep", {"pattern": "x", "context": 2.5}, "'context' must be an integer"),
        ("read_file", {}, "missing required argument 'path'"),
        ("read_file", {"path": ["install.md"]}, "'path' must be a non-empty string"),
        ("read_file", {"path": "install.md", "start_line": "3"}, "'start_line' must be an integer >= 1, got str '3'"),
        ("read_file", {"path": "install.md", "start_line": 0}, "'start_line' must be an integer >= 1"),
        ("read_file", {"path": "install.md", "start_line": 5, "end_line": 2}, "end_line (2) must be >= start_line"),
        ("read_file", {"path": "install.md", "start_line": 99}, "has 8 lines"),
        ("read_file", {"path": "instal.md"}, "no file 'instal.md'"),
    ],
)
def test_bad_arguments_raise_tool_errors_naming_the_argument(tools: ToolRegistry, name, args, message) -> None:
    with pytest.raises(ToolError) as info:
        tools[name](args)
    assert message in str(info.value)


@pytest.mark.parametrize("path", ["../outside.md", "/etc/passwd", "ops/../../outside.md", "link.md"])
def test_read_file_refuses_paths_outside_the_knowledge_base(tools: ToolRegistry, kb_root: Path, path: str) -> None:
    outside = kb_root.parent / "outside.md"
    outside.write_text("# Outside\n")
    link = kb_root / "link.md"
    if not link.is_symlink():
        link.symlink_to(outside)
    with pytest.raises(PathOutsideKnowledgeBaseError, match=re.escape(repr(path))):
        tools["read_file"]({"path": path})


def test_kb_tools_validates_its_default_top_k(tools: ToolRegistry) -> None:
    kb = tools["read_file"].kb  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="top_k"):
        kb_tools(kb, top_k=0)
