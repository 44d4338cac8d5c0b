"""Run bad-input catalogue entries through ``bench.cli.main`` one after another in this
interpreter, as ``tests/test_bad_input.py`` asks: ``python -m tests.catalogue_runner ROOT NAME...``.
Each entry runs in its own folder under ROOT with its environment; ``ROOT/results.json`` gets
its exit code, stdout and stderr, and for a run entry with a ``mhab speed`` twin, the twin's."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path

from bench.cli import main
from tests.test_bad_input import NOT_FOR_SPEED, as_speed_args, case_args


def _call(args: list[str], cwd: Path, env: dict[str, str]) -> dict:
    saved_env, saved_cwd, saved_argv = dict(os.environ), Path.cwd(), list(sys.argv)
    os.environ.update(env)
    os.chdir(cwd)
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(args)
            except SystemExit as e:  # what `mhab run` exits with from inside Hydra
                code = e.code if isinstance(e.code, int) else 1
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        sys.argv = saved_argv
    return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def run(root: Path, names: list[str]) -> dict[str, dict]:
    results = {}
    for name in names:
        folder = root / name
        folder.mkdir(parents=True)
        args, env = case_args(name, folder)
        results[name] = {**_call(args, folder, env), "dir": str(folder)}
        if args[0] == "run" and name not in NOT_FOR_SPEED:
            results[name]["speed"] = _call(as_speed_args(args, folder), folder, env)
    return results


if __name__ == "__main__":
    root = Path(sys.argv[1])
    (root / "results.json").write_text(json.dumps(run(root, sys.argv[2:])))
