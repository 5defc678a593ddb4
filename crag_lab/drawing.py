"""The graph drawn offline: Mermaid text (JupyterLab 4 renders it), an ASCII fallback, and a
matplotlib drawing with a run's path highlighted (`graph_path`, the dashboard's graph panel)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.text import Text

VISITED_FILL = "#fde68a"
VISITED_EDGE = "#b45309"
VISITED_STYLE = f"classDef visited fill:{VISITED_FILL},stroke:{VISITED_EDGE},stroke-width:2px"


_EDGE_LINE = re.compile(r"^\s*(\w+) (?:-->|-\.->|==>)(?:.*?)? ?(\w+);$")
_NODE_LINE = re.compile(r"^(\s*)(\w+)\((\w+)\)$")


def mermaid(graph: Any, highlight: Sequence[str] | None = None) -> str:
    """Mermaid source of a compiled graph, with a run's path (``highlight``) drawn on it.

    The nodes the run visited are coloured and carry their visit count (``plan ×3``: a REFINE
    loop), and the edges it took are drawn thick, so a path that visits every node still shows
    which way it went (the REFINE edge taken twice, the RE_RETRIEVE edge never). Uses LangGraph's
    ``draw_mermaid()`` (plain text), never ``draw_mermaid_png()``, which calls a web service.

    >>> from crag_lab import Lab
    >>> from crag_lab.testing import StaticTool
    >>> text = mermaid(Lab([StaticTool("vector_search", [])]).graph(), ["analyze_and_route", "synthesize"])
    >>> "analyze_and_route(analyze_and_route)" in text, "linkStyle" in text
    (True, True)
    """
    text = graph.get_graph().draw_mermaid().rstrip()
    if not highlight:
        return text
    visits = Counter(highlight)
    steps = set(zip(["__start__", *highlight], [*highlight, "__end__"], strict=True))
    lines, taken, edge = [], [], 0
    for line in text.splitlines():
        node = _NODE_LINE.match(line)
        if node and visits.get(node.group(2), 0) > 1:
            line = f"{node.group(1)}{node.group(2)}({node.group(3)} ×{visits[node.group(2)]})"
        found = _EDGE_LINE.match(line)
        if found:
            if (found.group(1), found.group(2)) in steps:
                taken.append(str(edge))
            edge += 1
        lines.append(line)
    visited = ",".join(visits)
    lines += [f"\t{VISITED_STYLE}", f"\tclass {visited} visited;"]
    if taken:
        lines.append(f"\tlinkStyle {','.join(taken)} stroke:{VISITED_EDGE},stroke-width:3px;")
    return "\n".join(lines) + "\n"


def ascii_art(graph: Any) -> str:
    """The graph as ASCII art (grandalf), for terminals and plain-text outputs."""
    return str(graph.get_graph().draw_ascii())


class GraphDiagram:
    """Displays as a Mermaid diagram in JupyterLab, as Markdown elsewhere, as ASCII in a terminal."""

    def __init__(self, graph: Any, highlight: Sequence[str] | None = None) -> None:
        self.source = mermaid(graph, highlight)
        self._graph = graph

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {
            "text/vnd.mermaid": self.source,
            "text/markdown": f"```mermaid\n{self.source}\n```",
            "text/plain": ascii_art(self._graph),
        }

    def __str__(self) -> str:
        return self.source


def graph_parts(graph: Any) -> tuple[list[str], list[tuple[str, str, bool]]]:
    """Node names and (source, target, conditional) edges of a compiled graph or its ``get_graph()``."""
    drawable = graph.get_graph() if hasattr(graph, "get_graph") else graph
    nodes = list(drawable.nodes)
    edges = [(str(e.source), str(e.target), bool(e.conditional)) for e in drawable.edges]
    return nodes, edges


def graph_layers(nodes: Sequence[str], edges: Sequence[tuple[str, str, bool]]) -> tuple[dict[str, int], set[tuple[str, str]]]:
    """A rank per node (longest path from ``__start__`` once loops are cut) and the loop edges that were cut.

    >>> ranks, back = graph_layers(["__start__", "a", "b"], [("__start__", "a", False), ("a", "b", True),
    ...                                                      ("b", "a", True)])
    >>> ranks, back
    ({'__start__': 0, 'a': 1, 'b': 2}, {('b', 'a')})
    """
    out: dict[str, list[str]] = {n: [] for n in nodes}
    for src, dst, _ in edges:
        out.setdefault(src, []).append(dst)
    back: set[tuple[str, str]] = set()
    order: list[str] = []
    state: dict[str, int] = {}  # 1: on the DFS stack, 2: done

    def visit(node: str) -> None:
        state[node] = 1
        for nxt in out.get(node, []):
            if state.get(nxt) == 1:
                back.add((node, nxt))
            elif nxt not in state:
                visit(nxt)
        state[node] = 2
        order.append(node)

    for root in ["__start__", *nodes]:
        if root in out and root not in state:
            visit(root)
    ranks = dict.fromkeys(order, 0)
    for node in reversed(order):  # topological order of the graph without its loops
        for nxt in out.get(node, []):
            if (node, nxt) not in back:
                ranks[nxt] = max(ranks[nxt], ranks[node] + 1)
    return {n: ranks[n] for n in nodes if n in ranks}, back


@dataclass
class GraphPath:
    """Artists of `graph_path`; ``update(path)`` recolours the nodes and edges another run visited."""

    ax: Axes
    nodes: dict[str, Text]
    edges: dict[tuple[str, str], Any]
    title: Text

    def update(self, path: Sequence[str], *, title: str = "", draw: bool = True) -> None:
        visits = Counter(path)
        steps = Counter(zip(["__start__", *path], [*path, "__end__"], strict=True))
        for name, text in self.nodes.items():
            hit = visits.get(name, 0) or (bool(path) and name in ("__start__", "__end__"))
            patch = text.get_bbox_patch()
            if patch is not None:
                patch.set_facecolor(VISITED_FILL if hit else "#f1f5f9")
                patch.set_edgecolor(VISITED_EDGE if hit else "#94a3b8")
            text.set_text(_node_label(name) + (f"  ×{visits[name]}" if visits.get(name, 0) > 1 else ""))
        for key, arrow in self.edges.items():
            taken = steps.get(key, 0)
            arrow.arrow_patch.set_color(VISITED_EDGE if taken else "#cbd5e1")
            arrow.arrow_patch.set_linewidth(2.2 if taken else 1.0)
        self.title.set_text(title)
        if draw:
            self.ax.figure.canvas.draw_idle()


def _node_label(name: str) -> str:
    return {"__start__": "start", "__end__": "end"}.get(name, name)


def graph_path(ax: Axes, graph: Any, path: Sequence[str] = (), *, title: str = "") -> GraphPath:
    """The agent's graph drawn offline (no Mermaid service), with the nodes and edges of ``path`` highlighted.

    ``graph`` is a compiled LangGraph graph (``lab.graph()``) or its ``get_graph()``. Nodes go top to
    bottom by rank; edges that skip ranks bend left, loop edges (REFINE, RE_RETRIEVE) bend right.
    A node visited more than once shows its count.
    """
    nodes, edges = graph_parts(graph)
    ranks, back = graph_layers(nodes, edges)
    by_rank: dict[int, list[str]] = {}
    for name in nodes:
        by_rank.setdefault(ranks.get(name, 0), []).append(name)
    pos: dict[str, tuple[float, float]] = {}
    for rank, members in by_rank.items():
        for k, name in enumerate(members):
            pos[name] = (k - (len(members) - 1) / 2, -float(rank))
    texts = {
        name: ax.text(*pos[name], _node_label(name), ha="center", va="center", fontsize=8, zorder=3,
                      bbox={"boxstyle": "round,pad=0.35", "facecolor": "#f1f5f9", "edgecolor": "#94a3b8"})
        for name in nodes
    }
    arrows: dict[tuple[str, str], Any] = {}
    for src, dst, conditional in edges:
        span = ranks.get(dst, 0) - ranks.get(src, 0)
        rad = 0.9 if (src, dst) in back else (0.55 if span > 1 else 0.0)
        if (src, dst) in back:
            rad += 0.25 * (ranks.get(src, 0) - ranks.get(dst, 0) - 1)
        arrows[(src, dst)] = ax.annotate(
            "", xy=pos[dst], xytext=pos[src], zorder=2, annotation_clip=False,
            arrowprops={"arrowstyle": "-|>", "color": "#cbd5e1", "linestyle": "--" if conditional else "-",
                        "connectionstyle": f"arc3,rad={rad}", "shrinkA": 9, "shrinkB": 9})
    top = max(ranks.values(), default=0)
    ax.set_xlim(-1.6, 1.6)
    ax.set_ylim(-top - 0.6, 0.9)
    ax.set_axis_off()
    title_text = ax.text(0.5, 1.0, "", transform=ax.transAxes, ha="center", va="top", fontsize=8)
    drawn = GraphPath(ax, texts, arrows, title_text)
    drawn.update(path, title=title, draw=False)
    return drawn
