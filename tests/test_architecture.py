"""The shape of the code: which room may import which (import-linter's contracts in
pyproject.toml, the one place that rule is kept), no import cycle between modules
(function-local imports included), and the config read in the setup room only."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import tomllib

from tests.conftest import ROOT

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


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    lint = Path(sys.executable).parent / "lint-imports"
    return subprocess.run([str(lint), "--no-cache"], cwd=root, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(root)})


def test_the_import_contracts_hold():
    out = _lint_imports(ROOT)
    assert out.returncode == 0, out.stdout[-3000:]


def test_the_contracts_catch_an_upward_import(tmp_path):
    # The records room importing the report, as a careless edit would: the layers contract breaks.
    for name in ("bench", "models", "tasks"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    table = tmp_path / "bench" / "records" / "table.py"
    table.write_text(table.read_text() + "\n\ndef _late():\n    import bench.report.render  # noqa\n")
    out = _lint_imports(tmp_path)
    assert out.returncode == 1, out.stdout[-2000:]
    assert "bench.records.table -> bench.report.render" in out.stdout, out.stdout[-2000:]


def test_every_room_is_a_layer():
    """A new room (a subpackage of bench/, a top-level module) is placed in the layers, so
    the rule covers it."""
    layers = next(c for c in _contracts() if c["type"] == "layers")["layers"]
    named = {part.strip() for layer in layers for part in layer.split("|")}
    rooms = {f"bench.{p.stem}" for p in (ROOT / "bench").iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert rooms - named == set(), f"add {sorted(rooms - named)} to the layers in pyproject.toml"
    assert {"models", "tasks"} <= named


def test_no_import_cycle():
    cycle = _cycle(_graph())
    assert cycle is None, " -> ".join(cycle)


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def _config_walk(results_dir: Path) -> tuple[list[str], int]:
    """The project functions that read a run's config during one ``run_experiment``: called
    with the composed ``DictConfig``, or with the plain data it is resolved to (any dict or
    list inside it, found by identity), in first-call order; and the climbs back, calls that
    re-enter a file the walk had left."""
    import sys

    from omegaconf import DictConfig, ListConfig

    from bench.experiment import run_experiment
    from bench.setup import build as build_module
    from bench.setup.compose import compose_config

    plain_ids: set[int] = set()
    kept: list[object] = []  # alive, so that no other object takes a registered id

    def register(obj: object) -> None:
        if isinstance(obj, dict | list):
            plain_ids.add(id(obj))
            kept.append(obj)
            for value in obj.values() if isinstance(obj, dict) else obj:
                register(value)

    original = build_module.plain

    def plain(section):
        config = original(section)
        register(config)
        return config

    stops: list[str] = []
    files: list[str] = []

    def tracer(frame, event, arg):
        code = frame.f_code
        path = Path(code.co_filename)
        if event != "call" or not path.is_relative_to(ROOT) or path.parts[len(ROOT.parts)] not in PACKAGES:
            return None
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        values = [frame.f_locals.get(name) for name in names]
        if any(isinstance(v, DictConfig | ListConfig) or id(v) in plain_ids for v in values):
            where = str(path.relative_to(ROOT))
            if f"{where}:{code.co_name}" not in stops:
                stops.append(f"{where}:{code.co_name}")
            files.append(where)
        return None

    cfg = compose_config("config", [
        "task=image", "task.dataset=digits", "model=gru", "trainer.max_steps=2", "trainer.infer_iters=1",
        f"results_dir={results_dir}", f"cache_dir={results_dir / 'cache'}", "progress=false", "logger=none"],
        "run")
    build_module.plain = plain
    sys.settrace(tracer)
    try:
        run_experiment(cfg)
    finally:
        sys.settrace(None)
        build_module.plain = original
    visited, climbs, last = set(), 0, None
    for where in files:
        if where != last:
            climbs += where in visited
            visited.add(where)
            last = where
    return stops, climbs


def test_the_config_is_read_in_the_setup_room_and_nowhere_below(tmp_path):
    # A matched RNN (the longest walk: its width is computed against the reference) from
    # run_experiment: below bench.setup only the record reads the config (it holds and hashes it).
    stops, climbs = _config_walk(tmp_path)
    rooms = {stop.split(":")[0].rsplit("/", 1)[0] for stop in stops}
    assert rooms <= {"bench", "bench/setup", "bench/records"}, stops
    assert [s for s in stops if s.startswith("bench/run") or s.startswith("bench/task")] == []
    assert len(stops) <= 25 and climbs <= 5, (len(stops), climbs, stops)
