"""``mhab publish``: a results dir made fit to commit (``results/reference``, the published
answer) and readable from any checkout: every complete record portable
(``bench.records.portable``), every incomplete run left out, every run folder reduced to what
is published, then its table (``results.csv``) and its report written from exactly that.

A complete record is ``ok``, or ``failed`` with its reason. A run that was interrupted or
killed before it wrote a record is removed: its sweep reruns it. A kept run keeps its
``record.json`` only (checkpoints and event files are removed), except that the first
attention run of each task and dataset keeps ``attention.pt``, the example the report draws.
So the report regenerates identically from a clone (tests/test_reference.py).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import BenchError
from bench.records.atomic import atomic_write_json
from bench.records.attention_examples import load_example, save_example
from bench.records.portable import machine_traces, portable
from bench.records.record import RECORD, read_record, tuning_role
from bench.records.table import load, save
from bench.report.render import write_report
from bench.run.environment import PROJECT_ROOT
from bench.run.lock import file_lock


@dataclass
class Published:
    results_dir: Path
    ok: int = 0
    failed: int = 0
    rewritten: int = 0  # records that held a path or host name before
    removed: list[str] = field(default_factory=list)  # incomplete runs left out
    written: list[Path] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"published {self.ok + self.failed} record(s) in {self.results_dir} "
                 f"({self.ok} ok, {self.failed} failed; {self.rewritten} made portable now)"]
        if self.removed:
            lines.append(f"left out {len(self.removed)} incomplete run(s), removed (a rerun of the "
                         f"sweep runs them again): {', '.join(self.removed)}")
        lines += [f"wrote {path}" for path in self.written]
        lines.append(f"to commit: git add {self.results_dir}")
        return "\n".join(lines)


def _refuse_while_running(results_dir: Path) -> None:
    for lock in sorted((results_dir / "locks").glob("*.lock")):
        with file_lock(lock) as holder:
            if holder is not None:
                raise BenchError(f"a run is in progress in {results_dir} ({holder}); publish "
                                 f"when its sweep has finished, or stop it first")


def compact_example(path: Path) -> None:
    """Save an attention example again as just its own tensors (runs before ``save_example``
    copied them wrote the whole feature storage a test input was a view of): the same
    content, a fraction of the bytes. One that cannot be read is left for the report to say so."""
    try:
        example = load_example(path)
    except Exception:  # noqa: BLE001 - a damaged file: the report's attention section names it
        return
    save_example(path, example)


def complete(rec: dict) -> bool:
    """Whether a record may be published: ok, or failed with the reason why."""
    return rec.get("status") == "ok" or (rec.get("status") == "failed" and bool(rec.get("error")))


def publish(results_dir: str | Path, base: str | Path = ".") -> Published:
    """Make ``results_dir`` fit to commit (see the module's docstring); ``base`` is the folder
    its runs' relative paths were given from (where the sweep ran)."""
    results_dir = Path(results_dir)
    runs = results_dir / "runs"
    if not runs.is_dir():
        raise BenchError(f"no runs under {results_dir}: run 'mhab run -m ... "
                         f"results_dir={results_dir}' first")
    _refuse_while_running(results_dir)
    done = Published(results_dir)
    found = {run_dir: read_record(run_dir / RECORD) if (run_dir / RECORD).is_file() else None
             for run_dir in sorted(p for p in runs.iterdir() if p.is_dir())}
    if not any(rec is not None and complete(rec) for rec in found.values()):
        raise BenchError(f"no complete record under {runs} (ok, or failed with its reason); "
                         f"nothing to publish")
    made = {run_dir: portable(rec, run_dir.name, base, PROJECT_ROOT)
            for run_dir, rec in found.items() if rec is not None and complete(rec)}
    for run_dir, rec in made.items():  # every check before the first change
        if traces := list(machine_traces(rec)):
            raise BenchError(f"{run_dir / RECORD} would still name this machine after publishing "
                             f"({traces[0]}): a path in what names the experiment (its config) "
                             f"cannot be made portable without changing its config hash; publish "
                             f"runs whose data is found through data_dir, or leave this one out")
    drawn: set[tuple] = set()  # the task and dataset whose attention example is kept
    for run_dir, rec in found.items():
        path = run_dir / RECORD
        if run_dir not in made:
            shutil.rmtree(run_dir)
            done.removed.append(run_dir.name)
            continue
        keep = {RECORD}
        example = rec.get("attention_example")
        if (example and (run_dir / example).is_file() and tuning_role(rec) != "trial"
                and (rec["task"], rec["dataset"]) not in drawn):
            drawn.add((rec["task"], rec["dataset"]))
            keep.add(example)
            compact_example(run_dir / example)
        for extra in (p for p in run_dir.iterdir() if p.name not in keep):
            shutil.rmtree(extra) if extra.is_dir() else extra.unlink()
        if made[run_dir] != json.loads(path.read_text()):  # as stored: read_record sets run_dir anew
            atomic_write_json(path, made[run_dir])
            done.rewritten += 1
        done.ok += rec["status"] == "ok"
        done.failed += rec["status"] == "failed"
    done.written = [*save(load(results_dir), results_dir), *write_report(results_dir)]
    return done
