"""The splitter's modules import one another without a cycle, lazy imports inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "storage" / "splitter"


def _imports() -> dict[str, set[str]]:
    """Module -> the modules of ``storage.splitter`` it imports anywhere in its file."""
    graph = {}
    for path in PACKAGE.glob("*.py"):
        module = "storage.splitter" if path.stem == "__init__" else f"storage.splitter.{path.stem}"
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            found |= {name for name in names if name.startswith("storage.splitter.")}
        graph[module] = found - {module}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path of modules, or None."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return None
        for imported in sorted(graph.get(module, ())):
            found = visit(imported, [*path, module])
            if found:
                return found
        done.add(module)
        return None

    return next((found for module in sorted(graph) if (found := visit(module, []))), None)


def test_the_splitter_modules_import_one_another_without_a_cycle():
    graph = _imports()
    assert "storage.splitter.planner" in graph["storage.splitter.spark_source"]
    assert _cycle(graph) is None


@pytest.mark.parametrize(("graph", "cycle"), [
    ({"a": {"b"}, "b": {"a"}}, ["a", "b", "a"]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
    ({"a": {"b", "c"}, "b": {"c"}, "c": {"b"}}, ["b", "c", "b"]),
])
def test_the_cycle_search_finds_cycles(graph, cycle):
    assert _cycle(graph) == cycle
