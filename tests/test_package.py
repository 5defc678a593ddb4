"""The package's shape: its public names, no import circles, no module grown past a readable size."""

from __future__ import annotations

import ast
from pathlib import Path

import crag_lab
import crag_lab.eval

ROOT = Path(crag_lab.__file__).parent
MAX_LINES = 500


def test_the_public_names_of_crag_lab() -> None:
    assert crag_lab.__all__ == [
        "AskResult",
        "CragConfig",
        "CragModel",
        "Experiment",
        "ItemRecord",
        "KnowledgeBase",
        "Lab",
        "LlamaIndexModel",
        "ModelReply",
        "QueryRecord",
        "QueryReplay",
        "ReplayReport",
        "RoundRecord",
        "build_graph",
        "replay_record",
        "run_route",
        "usage_tokens",
    ]
    assert all(getattr(crag_lab, name) is not None for name in crag_lab.__all__)


def test_the_public_names_of_crag_lab_eval() -> None:
    assert crag_lab.eval.__all__ == [
        "COMPARED_MODES",
        "EVAL_MODES",
        "EvalQuery",
        "EvalSet",
        "Evaluation",
        "GoldRef",
        "Passage",
        "answer_body",
        "answer_contained",
        "auroc",
        "calibration_bins",
        "citation_precision_recall",
        "class_recall",
        "confusion_matrix",
        "evaluate",
        "expected_calibration_error",
        "fast_path_rates",
        "floor_precision_recall",
        "is_abstention",
        "is_gold",
        "load_beir",
        "load_dataset",
        "load_kb_queries",
        "mode_setup",
        "overlaps",
        "routing_accuracy",
    ]
    assert all(getattr(crag_lab.eval, name) is not None for name in crag_lab.eval.__all__)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Which crag_lab modules each crag_lab module imports: every import statement, wherever it stands
    (top level, inside a function, under ``TYPE_CHECKING``). ``from pkg import name`` is an import of
    the submodule ``pkg.name`` when there is one, else of ``pkg`` itself."""
    paths = {_module_name(p): p for p in ROOT.rglob("*.py")}

    def owner(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {t for alias in node.names if (t := owner(alias.name))}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                for alias in node.names:
                    target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in paths else owner(base)
                    if target:
                        targets.add(target)
        graph[module] = targets - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = import_graph()
    assert graph["crag_lab.lab"] >= {"crag_lab.graph", "crag_lab.records"}  # the walk sees imports
    assert "crag_lab.dashboard" in graph["crag_lab.lab"]  # ... function-local ones too
    circles = cycles(graph)
    assert not circles, "import circles: " + "; ".join(" <-> ".join(c) for c in circles)


def test_no_module_is_longer_than_a_reader_can_hold() -> None:
    sizes = {str(p.relative_to(ROOT.parent)): len(p.read_text(encoding="utf-8").splitlines()) for p in ROOT.rglob("*.py")}
    assert {path: n for path, n in sizes.items() if n > MAX_LINES} == {}
