"""``mhab``: the command line. ``mhab run`` hands its arguments to Hydra."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from bench.errors import BenchError, RunFailed, Terminated, log_errors_to, working_on, write_traceback
from bench.setup.compose import CONF_DIR, compose_config, mirror_model_overrides, suite_sweeps, sweep_points
from bench.setup.paths import check_output_dir, check_results_dir

log = logging.getLogger("mhab")
# Runs of a sweep may execute in other processes (joblib, submitit launchers); each failed run
# appends a line to this file, so the parent can count them and exit non-zero.
FAILURES_ENV = "MHAB_FAILURES_FILE"


def error(message: str) -> None:
    print(f"mhab: error: {message}", file=sys.stderr)


# ---------------------------------------------------------------- run
def validate_overrides(overrides: list[str], multirun: bool = False) -> None:
    """Check every run a command would start: with ``-m``, every value of the command line's
    sweeps and of the suite's own (``hydra.sweeper.params``, which the command line overrides
    key by key)."""
    from bench.setup.build import validate

    first = compose_config("config", sweep_points(overrides)[0], "run", hydra_config=True)  # Hydra's first
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    check_results_dir(first.results_dir)  # Hydra's folder lies under it by default: name the cause
    check_output_dir(OmegaConf.select(first, key), key)
    if multirun:
        overrides = [*suite_sweeps(overrides), *overrides]
    for point in sweep_points(overrides):
        cfg = compose_config("config", point, "run")
        validate(cfg)
        check_results_dir(cfg.results_dir)


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def _hydra_run(cfg: DictConfig) -> float | None:
    from bench.experiment import run_experiment

    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    log_errors_to(cfg.results_dir)
    mirror_model_overrides(cfg, list(HydraConfig.get().overrides.task))
    try:
        with working_on(f"running {' '.join(HydraConfig.get().overrides.task) or 'the default run'}"):
            rec = run_experiment(cfg)
    except Exception as e:  # noqa: BLE001 - beyond BenchError and RunFailed: the last resort
        if not isinstance(e, BenchError | RunFailed):
            e = RunFailed(unexpected("run", e))
        if not multirun:
            error(str(e))
            sys.exit(2 if isinstance(e, BenchError) else 1)
        failures = os.environ.get(FAILURES_ENV)
        if failures:
            with open(failures, "a") as f:
                f.write(" ".join(str(e).split()) + "\n")
        log.error("%s", e)
        return None
    if "locked_by" in rec:  # another process runs this job: it writes the record
        return None
    tested = rec["test_metric"] is not None  # a tuning trial is scored on validation only
    split, score = ("test", rec["test_metric"]) if tested else ("val", rec["val_metric"])
    log.info(
        "%s %s %s seed %s: %s %s %.4f | %s params | train %.0f samples/s | record %s",
        rec["task"], rec["dataset"], rec["model"], rec["seed"], split, rec["metric_name"],
        score, f"{rec['params']:,}", rec["train_samples_per_s"] or 0,
        Path(rec["run_dir"]) / "record.json",
    )
    from bench.records.table import unmatched_params

    if ratio := unmatched_params(cfg.results_dir, rec):
        log.warning("%s has %.2fx the attention model's parameters on %s/%s: not a comparison at "
                    "matched parameters (within 10%%); leave model.dim unset so that match_params sizes it",
                    rec["model"], ratio, rec["task"], rec["dataset"])
    return score


def run_command(args: list[str]) -> int:
    if not any(a in ("-h", "--help", "--hydra-help", "--info", "-c", "--cfg") for a in args):
        overrides = [a for a in args if not a.startswith("-")]
        try:
            validate_overrides(overrides, multirun=any(a in ("-m", "--multirun") for a in args))
        except BenchError as e:
            error(str(e))
            return 2
    import tempfile

    fd, failures_file = tempfile.mkstemp(prefix="mhab-failures-", suffix=".txt")
    os.close(fd)
    os.environ[FAILURES_ENV] = failures_file
    sys.argv = ["mhab run", *args]
    try:
        try:
            _hydra_run()
        except OSError as e:  # Hydra makes its output dir (hydra.run.dir) before the run starts
            where = e.filename or "Hydra's output dir"
            raise BenchError(f"cannot write {where} ({e.strerror}); pass a "
                             f"writable results_dir=PATH (or hydra.run.dir / hydra.sweep.dir)") from None
        failures = Path(failures_file).read_text().splitlines()
    finally:
        os.environ.pop(FAILURES_ENV, None)
        Path(failures_file).unlink(missing_ok=True)
    if failures:
        error(f"{len(failures)} run(s) of the sweep failed (first: {failures[0]}); "
              f"the others are recorded")
        return 1
    return 0


# ---------------------------------------------------------------- table
def table_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mhab table",
        description="Load every run record under RESULTS_DIR into one table, save it as "
                    "results.parquet and results.csv there, and print one row per experiment: "
                    "the test metric's mean and 95% CI over seeds, seeds, parameters, training "
                    "samples/s and minutes per run (--all: every run and every column).")
    parser.add_argument("results_dir", nargs="?", default="results")
    parser.add_argument("--columns", action="store_true",
                        help="print what each column of the table means (Markdown) and exit")
    parser.add_argument("--all", action="store_true",
                        help="print every run and every aggregated column (the files always hold all)")
    parser.add_argument("--markdown", action="store_true",
                        help="print the results as a Markdown table for reading (a row per task, a "
                             "column per model; the README's, from results/reference) and exit")
    return parser


def table_command(args: list[str]) -> int:
    ns = table_parser().parse_args(args)
    log_errors_to(ns.results_dir)
    from bench.records.columns import markdown
    from bench.records.numbers import fmt
    from bench.records.table import (
        aggregate,
        compact_summary,
        load,
        markdown_summary,
        mixed_code,
        run_list_columns,
        save,
    )

    if ns.columns:
        print(markdown())
        return 0

    frame = load(ns.results_dir)
    if frame.empty:
        error(f"no run records under {ns.results_dir}/runs; run 'mhab run' first")
        return 1
    if ns.markdown:
        print(markdown_summary(frame))
        return 0
    paths = save(frame, ns.results_dir)
    if ns.all:
        print(frame[run_list_columns(frame)].to_string(index=False, float_format=fmt))
        print()
    summary = aggregate(frame).drop(columns="values") if ns.all else compact_summary(frame)
    print(summary.to_string(index=False, float_format=fmt) if len(summary) else
          "no tested run to aggregate (tuning trials are scored on validation only)")
    if not ns.all:
        print(f"({len(frame)} runs; --all lists each run and every column)")
    for note in mixed_code(frame):
        print(f"note: {note}; a difference may be the code's")
    print(f"\nsaved {', '.join(str(p) for p in paths)}")
    return 0


def report_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mhab report",
        description="Write report.md and a self-contained report.html (images embedded) from "
                    "the run records under RESULTS_DIR.")
    parser.add_argument("results_dir", nargs="?", default="results")
    return parser


def report_command(args: list[str]) -> int:
    ns = report_parser().parse_args(args)
    log_errors_to(ns.results_dir)
    from bench.report.render import write_report

    if not any(Path(ns.results_dir).glob("runs/*/record.json")):
        error(f"no run records under {ns.results_dir}/runs; run 'mhab run' first")
        return 1
    for path in write_report(ns.results_dir):
        print(f"wrote {path}")
    return 0


def publish_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mhab publish",
        description="Make a results dir fit to commit (results/reference): each complete record "
                    "(ok, or failed with its reason) without host name or machine paths (its config "
                    "hash unchanged), incomplete runs removed (a rerun of the sweep runs them), each "
                    "run folder reduced to its record (and one attention example per task and "
                    "dataset), then results.csv and the report written from exactly that.",
        epilog="example: mhab run -m suite=standard results_dir=results/reference && "
               "mhab publish results/reference && git add results/reference")
    parser.add_argument("results_dir", nargs="?", default="results/reference")
    return parser


def publish_command(args: list[str]) -> int:
    ns = publish_parser().parse_args(args)
    log_errors_to(ns.results_dir)
    from bench.report.reference import publish

    print(publish(ns.results_dir).summary())
    return 0


def speed_command(args: list[str]) -> int:
    if any(a in ("-h", "--help") for a in args):
        print("usage: mhab speed [KEY=VALUE ...]\n\n"
              "Time the attention core against nn.MultiheadAttention and timm's Attention, and each\n"
              "task's attention and RNN models; write speed.csv and speed.parquet to results_dir.\n"
              f"Keys and defaults ({Path(CONF_DIR) / 'speed.yaml'}):\n")
        print((Path(CONF_DIR) / "speed.yaml").read_text())
        return 0
    from bench.experiment import show_progress
    from bench.records.numbers import fmt
    from bench.records.table import save
    from bench.speed import benchmark as speed
    from bench.speed import targets as speed_targets

    cfg = compose_config("speed", args, "speed")
    # The task models are composed from the run config: they see the user's own models and
    # tasks on the same search path.
    searchpath = [a for a in args if a.split("=", 1)[0].lstrip("+") == "hydra.searchpath"]
    cfg.tasks.run_overrides = [*searchpath, *cfg.tasks.run_overrides]
    check_results_dir(cfg.results_dir)
    log_errors_to(cfg.results_dir)
    frame = speed.run_speed(cfg, progress=show_progress(cfg.progress))
    paths = save(frame, cfg.results_dir, stem="speed")
    shown = ["section", "model", "dtype", "attention_path", "mode", "batch_size", "seq_len", "step_ms",
             "samples_per_s",
             "tokens_per_s", "achieved_gflop_s", "peak_share", "peak_memory_mb", "engine_overhead",
             "engine_overhead_ci_low", "engine_overhead_ci_high", "data_share"]
    table = frame[frame["section"] != "reference"]  # the rounds are summed up in the targets
    if table["sdpa_backend"].nunique() > 1 or (table["status"] != "ok").any():
        shown[2:2] = ["sdpa_backend", "status"]
    print(table[[c for c in shown if c in table]].to_string(index=False, float_format=fmt))
    if not (choice := speed_targets.backend_choice(frame)).empty:
        print("\ncore step ms under each SDPA kernel:\n" + choice.to_string(index=False, float_format=fmt))
    peaks = frame.groupby("dtype", sort=False)["matmul_peak_gflop_s"].first()
    print("\nmatmul peak: " + ", ".join(f"{peak:.1f} GFLOP/s in {dtype}" for dtype, peak in peaks.items())
          + f" ({cfg.matmul_size}^3, best of {cfg.matmul_repeats}) on {frame['device_name'].iloc[0]}, "
          f"{frame['threads'].iloc[0]} threads; bfloat16 hardware: {frame['cpu_bf16_flags'].iloc[0]}")
    if not (speedups := speed_targets.precision_speedups(frame)).empty:
        print("\ntask models, training samples/s by precision:\n"
              + speedups.to_string(index=False, float_format=fmt))
    if (rounds := speed_targets.reference_summary(frame)) is not None:
        print(rounds)
    if not (goals := speed_targets.targets(frame)).empty:
        print(goals.to_string(index=False, float_format=fmt))
    print(f"\nsaved {', '.join(str(p) for p in paths)}")
    return 0


def data_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mhab data",
        description="Verify the data root against the sha256 of every known dataset file, or "
                    "download datasets into it from their canonical sources with verification.")
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    names_help = "datasets: fashion-mnist, fsdd, multi30k, or all (default: all)"
    check_p = sub.add_parser("check", help="verify every known file under the data root (sha256)")
    check_p.add_argument("names", nargs="*", metavar="NAME", help=names_help)
    down_p = sub.add_parser("download", help="fetch missing or corrupt files into the data root")
    down_p.add_argument("names", nargs="+", metavar="NAME", help="datasets: fashion-mnist, fsdd, "
                                                                  "multi30k, or all")
    down_p.add_argument("--base-url", default=os.environ.get("BENCH_DATA_URL"),
                        help="a mirror laid out like the data root (BASE/<dataset>/<file>); "
                             "default: $BENCH_DATA_URL, else each dataset's canonical source")
    for p in (check_p, down_p):
        p.add_argument("--data-dir", default=os.environ.get("BENCH_DATA_DIR"),
                       help="the data root (default: $BENCH_DATA_DIR)")
    return parser


def data_command(args: list[str]) -> int:
    ns = data_parser().parse_args(args)
    from bench.data import download as datasets

    sources = datasets.resolve_names(ns.names)
    data_dir = datasets.require_data_dir(ns.data_dir, must_exist=ns.action == "check")
    if ns.action == "download":
        for source in sources:
            fetched = datasets.download(data_dir, source, ns.base_url, progress=sys.stderr.isatty())
            print(f"{source.folder}: {fetched} file(s) downloaded into {data_dir / source.folder}")
    results = [datasets.check(data_dir, s, progress=sys.stderr.isatty()) for s in sources]
    for result in results:
        print(result.summary())
    damaged = [r.source.folder for r in results if r.present and not r.healthy]
    absent = [r.source.folder for r in results if not r.present]
    if damaged:
        error(f"damaged dataset(s): {', '.join(damaged)}; run 'mhab data download {damaged[0]}'")
        return 1
    if ns.names and ns.names != ["all"] and absent:
        error(f"not present: {', '.join(absent)}; run 'mhab data download {absent[0]}'")
        return 1
    return 0


def estimate_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mhab estimate",
        description="Estimate the wall time of 'mhab run -m OVERRIDES' on this machine from the "
                    "records of runs of the same experiments (same config hash; the seed, "
                    "results_dir and paths do not count): per task and model, and in total.",
        epilog="example: mhab estimate suite=standard --records results/standard --records results/evidence")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="as for 'mhab run -m'")
    parser.add_argument("-m", "--multirun", action="store_true",
                        help="accepted as in 'mhab run -m': an estimate is always of the sweep")
    parser.add_argument("--records", action="append", metavar="DIR",
                        help="a results dir whose records to read (repeatable; default: the "
                             "sweep's own results_dir)")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="also the wall time on N parallel workers (hydra/launcher=joblib "
                             "hydra.launcher.n_jobs=N), runs dispatched in the sweep's order")
    parser.add_argument("--tune", action="store_true",
                        help="estimate 'mhab tune OVERRIDES' instead: every family's trials and "
                             "finals (--jobs defaults to tune.jobs)")
    return parser


def estimate_command(args: list[str]) -> int:
    ns = estimate_parser().parse_args(args)
    if ns.jobs < 1:
        raise BenchError(f"--jobs must be >= 1, got {ns.jobs}")
    from bench import estimate
    from bench.records.numbers import fmt

    if ns.tune:
        from bench.tune.plan import make_plan

        plan = make_plan(ns.overrides)
        records = ns.records or [plan.results_dir]
        estimate.check_results_dirs(records)
        jobs = estimate.tune_jobs(plan, records)
        ns.jobs = ns.jobs if "--jobs" in args else plan.settings.jobs
    else:
        configs = estimate.sweep_configs(ns.overrides)
        records = ns.records or [configs[0].results_dir]
        estimate.check_results_dirs(records)
        jobs = estimate.estimate_jobs(configs, records)
    if jobs["wall_time_s"].isna().all():
        error(f"no ok record under {', '.join(records)} is of an experiment this sweep runs; "
              f"pass --records DIR for the results dir that holds them")
        return 1
    print(estimate.by_task_and_model(jobs).to_string(index=False, float_format=fmt))
    print(f"\n{estimate.summary(jobs, ns.jobs)}")
    return 0


# ---------------------------------------------------------------- tune
TUNE_HELP = """usage: mhab tune [KEY=VALUE ...]

The same hyper-parameter search for every model family named by model=a,b,...: one Optuna
study each, with the same number of trials, sampler and search space (search/<task>.yaml in
conf/ or on hydra.searchpath). A trial is an ordinary run scored on validation (it never reads
the test split); then each family's best trial runs again with tune.seeds seeds, on test.
A killed or interrupted tune resumes where it stopped when the same command runs again.

  mhab tune task=asr model=attention,lstm,gru tune.trials=16 tune.seeds=3 [run overrides]

Other overrides apply to every trial and final, as in 'mhab run'. Keys and defaults ({path}):
"""


def tune_command(args: list[str]) -> int:
    if any(a in ("-h", "--help") for a in args):
        print(TUNE_HELP.format(path=Path(CONF_DIR) / "tune.yaml"))
        print((Path(CONF_DIR) / "tune.yaml").read_text())
        return 0
    from bench.tune.plan import make_plan
    from bench.tune.study import LOG_FORMAT, run_tune

    plan = make_plan(list(args))
    log_errors_to(plan.results_dir)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    try:
        finals = run_tune(plan)
    except RunFailed as e:
        error(str(e))
        return 1
    for model, records in finals.items():
        scores = ", ".join(f"{r['test_metric']:.4g}" for r in records)
        print(f"{plan.task}/{plan.dataset} {model}: tuned test {records[0]['metric_name']} over seeds "
              f"0..{len(records) - 1}: {scores}")
    print(f"records in {plan.results_dir}; 'mhab report {plan.results_dir}' compares the families")
    return 0


COMMANDS = {
    "run": (run_command, "run one experiment, or a sweep with -m (Hydra overrides; "
                         "'mhab run --help' lists config groups)"),
    "table": (table_command, "all run records under a results dir as one table (saved as "
                             "parquet and CSV), with mean/std/95% CI over seeds"),
    "report": (report_command, "write report.md and a self-contained report.html from a results dir"),
    "publish": (publish_command, "make a results dir fit to commit (results/reference): portable "
                                 "records, incomplete runs left out, its table and report"),
    "speed": (speed_command, "throughput, FLOP rate and memory of the core against torch and timm, "
                             "and of every task's models (writes speed.csv)"),
    "tune": (tune_command, "the same hyper-parameter search for every model family (Optuna), then "
                           "the best settings of each with several seeds, on test"),
    "estimate": (estimate_command, "the wall time a sweep would take here, from the records of "
                                   "runs of the same experiments"),
    "data": (data_command, "'data check' verifies the data root (sha256); 'data download NAME' "
                           "fetches a dataset into it"),
}


def check_command(argv: list[str]) -> None:
    """Read a command line as ``mhab`` would, without running anything: the command exists,
    its options parse, and its overrides compose and pass every check a run makes first.
    A mistake raises ``BenchError`` (argparse's own exits with ``SystemExit``)."""
    command, args = argv[0], argv[1:]
    if command not in COMMANDS:
        raise BenchError(f"unknown command '{command}'; choose one of: {', '.join(COMMANDS)}")
    if any(a in ("-h", "--help") for a in args):
        return
    if command == "run":
        validate_overrides([a for a in args if not a.startswith("-")],
                           multirun=any(a in ("-m", "--multirun") for a in args))
    elif command == "speed":
        compose_config("speed", args, "speed")
    elif command == "tune":
        from bench.tune.plan import make_plan

        make_plan(args)
    elif command == "estimate":
        from bench import estimate

        ns = estimate_parser().parse_args(args)
        if ns.tune:
            from bench.tune.plan import make_plan

            make_plan(ns.overrides)
        else:
            estimate.sweep_configs(ns.overrides)
    else:
        {"table": table_parser, "report": report_parser, "data": data_parser,
         "publish": publish_parser}[command]().parse_args(args)


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="mhab",
        description="mha-bench: one multi-head attention core against LSTM/GRU baselines.",
        epilog="commands:\n" + "\n".join(f"  {name:<10}{help_}" for name, (_, help_) in COMMANDS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", nargs="?", metavar="COMMAND", help="one of: " + ", ".join(COMMANDS))
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        error(f"unknown command '{command}'; choose one of: {', '.join(COMMANDS)} (see 'mhab --help')")
        return 2
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return COMMANDS[command][0](rest)
    except BenchError as e:
        error(str(e))
        return 2
    except Terminated:
        error("terminated (SIGTERM); finished runs are recorded")
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        error("interrupted; finished runs are recorded")
        return 130
    except BrokenPipeError:  # output piped into `head` and the like, which stopped reading
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:  # noqa: BLE001 - the last resort: what no check foresaw, in one line
        error(unexpected(command, e))
        return 1


def unexpected(command: str, exc: BaseException) -> str:
    """The last resort's line: the command, what it was working on, what went wrong, and
    where the full traceback was written."""
    from bench.errors import current_work

    where = current_work(exc)
    path = write_traceback(command, exc)
    reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
    return (f"'mhab {command}' stopped on an unexpected error{f' while {where}' if where else ''} "
            f"({reason}); the full traceback is in {path}")


if __name__ == "__main__":
    sys.exit(main())
