"""The graph drawn offline: Mermaid text (JupyterLab 4 renders it) with an ASCII fallback."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

VISITED_STYLE = "classDef visited fill:#fde68a,stroke:#b45309,stroke-width:2px"


def mermaid(graph: Any, highlight: Sequence[str] | None = None) -> str:
    """Mermaid source of a compiled graph; nodes in ``highlight`` (a run's path) are coloured.

    Uses LangGraph's ``draw_mermaid()`` (plain text), never ``draw_mermaid_png()``, which calls a
    web service.
    """
    text = graph.get_graph().draw_mermaid().rstrip()
    if highlight:
        visited = ",".join(dict.fromkeys(highlight))
        text += f"\n\t{VISITED_STYLE}\n\tclass {visited} visited;\n"
    return text


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
