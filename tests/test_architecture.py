"""The shape of the code: which room may import which (``LAYERS``), no import cycle between
modules (function-local imports included), and models/ and tasks/ know nothing of the
harness's upper rooms."""

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

# Each room of the house and the rooms it may import (itself always). A room is a subpackage
# of bench/, one of bench's top-level modules, or models/ or tasks/. What is not listed may
# not be imported: adding an arrow is a decision, made here.
LAYERS: dict[str, set[str]] = {
    "bench.errors": set(),
    "models": set(),
    "bench.records": {"bench.errors"},
    "bench.data": {"bench.errors", "bench.records"},
    "bench.task": {"bench.errors", "bench.records", "bench.data", "models"},
    "tasks": {"bench.errors", "bench.records", "bench.data", "bench.task", "models"},
    "bench.run": {"bench.errors", "bench.records", "bench.task", "models"},
    "bench.setup": {"bench.errors", "bench.records", "bench.task", "bench.run", "models"},
    "bench.speed": {"bench.errors", "bench.records", "bench.setup", "bench.run", "models"},
    "bench.report": {"bench.errors", "bench.records", "bench.run", "bench.speed"},
    "bench.experiment": {"bench.errors", "bench.records", "bench.task", "bench.setup", "bench.run"},
    "bench.tune": {"bench.errors", "bench.records", "bench.setup", "bench.run", "bench.experiment",
                   "models"},
    "bench.estimate": {"bench.errors", "bench.records", "bench.setup", "bench.tune"},
    "bench.api": {"bench.errors", "bench.records", "bench.setup", "bench.report", "bench.experiment",
                  "bench.tune"},
    "bench.__main__": {"bench.cli"},
    "bench.cli": {"bench.errors", "bench.records", "bench.data", "bench.setup", "bench.run",
                  "bench.report", "bench.speed", "bench.experiment", "bench.estimate", "bench.api",
                  "bench.tune"},
}
PACKAGES = ("bench", "models", "tasks")


def _imports(path: Path) -> set[str]:
    """The project modules that ``path`` imports anywhere in its body."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] in PACKAGES}
    return found


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _room(module: str) -> str | None:
    """The room of ``LAYERS`` that ``module`` belongs to (the longest prefix that names one)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in LAYERS:
            return ".".join(parts[:n])
    return None


def _sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def _modules() -> dict[str, Path]:
    return {_module(p): p for p in _sources()}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {m for m in _imports(path) if m in modules and m != name and not name.startswith(m + ".")}
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


def _violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module, targets in sorted(graph.items()):
        room = _room(module)
        for target in sorted(targets):
            other = _room(target)
            if other != room and other not in LAYERS.get(room, set()):
                out.append(f"{module} imports {target} ({room} may import: "
                           f"{', '.join(sorted(LAYERS.get(room, ()))) or 'nothing'})")
    return out


def test_every_module_has_a_room():
    assert [m for m in _modules() if _room(m) is None and m not in PACKAGES] == []


def test_rooms_import_only_what_the_layers_allow():
    assert _violations(_graph()) == []


def test_the_layering_check_catches_an_upward_import():
    assert _violations({"bench.records.table": {"bench.report.analysis"}}) == [
        "bench.records.table imports bench.report.analysis (bench.records may import: bench.errors)"]


def test_no_import_cycle():
    cycle = _cycle(_graph())
    assert cycle is None, " -> ".join(cycle)


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


@pytest.mark.parametrize("package", ["bench/setup", "bench/run", "bench/records", "bench/report",
                                     "bench/speed", "bench/data"])
def test_each_room_says_what_it_holds_and_may_import(package):
    doc = ast.get_docstring(ast.parse((ROOT / package / "__init__.py").read_text())) or ""
    assert "Imports:" in doc, f"{package}/__init__.py: open with what it holds and what it may import"
