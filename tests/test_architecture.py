"""The shape of the code: no import cycle between bench/ modules (function-local imports
included), and models/ and tasks/ know nothing of each other's insides."""

import ast
from pathlib import Path

from tests.conftest import ROOT


def _imports(path: Path, package: str) -> set[str]:
    """The ``package.*`` modules that ``path`` imports anywhere in its body."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == package:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == package}
    return found


def _graph(package: str) -> dict[str, set[str]]:
    modules = {f"{package}.{p.stem}": p for p in (ROOT / package).glob("*.py") if p.stem != "__init__"}
    return {name: {m for m in _imports(path, package) if m in modules and m != name}
            for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return [*path, node, nxt]
            if nxt not in state and (found := visit(nxt, [*path, node])):
                return found
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node, [])):
            return found
    return None


def test_no_import_cycle_in_bench():
    assert _cycle(_graph("bench")) is None, " -> ".join(_cycle(_graph("bench")))


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_models_import_no_task_and_no_engine():
    for path in (ROOT / "models").glob("*.py"):
        assert not _imports(path, "tasks") and not _imports(path, "bench"), path
