"""The published answer: records made portable (``mhab publish``), the report comparing
timings within one processor model, and ``results/reference`` as committed: its report
regenerates identically and the README's table is what its records give."""

import json
import shutil
import socket
from pathlib import Path

import pandas as pd
import pytest

from bench.errors import BenchError
from bench.records.portable import machine_traces, portable
from bench.records.record import config_hash, find_ok_record, read_record
from bench.records.table import aggregate, load, markdown_summary, to_frame
from bench.report.findings import speed_findings
from bench.report.reference import publish
from bench.report.render import write_report
from bench.report.sections import provenance, results_section
from bench.run.lock import file_lock
from tests.conftest import ROOT, run_cli

REFERENCE = ROOT / "results" / "reference"


def made_record(results: Path, name: str, *, status: str = "ok", data_dir: str = "/srv/data",
                **fields) -> dict:
    """A record as a run on this machine writes it: absolute paths, the host name, a config."""
    run = results / "runs" / name
    run.mkdir(parents=True)
    config = {"task": {"name": "speech", "dataset": "fsdd"}, "model": {"name": "attention"},
              "trainer": {"epochs": 3}, "seed": 0, "results_dir": str(results), "data_dir": data_dir,
              "cache_dir": str(results.parent / "cache")}
    rec = {"schema_version": 1, "status": status, "task": "speech", "dataset": "fsdd", "model": "attention",
           "model_family": "attention", "variant": "default", "seed": 0, "config": config,
           "config_hash": config_hash(config), "run_id": name, "run_dir": str(run),
           "metric_name": "accuracy", "higher_is_better": True, "test_metric": 0.9, "params": 1000,
           "train_samples_per_s": 100.0, "wall_time_s": 60.0,
           "data": {"features": {"cache_file": f"{results.parent / 'cache'}/speech/f.pt"},
                    "root": f"{data_dir}/fsdd"},
           "environment": {"device": "cpu", "device_name": "Test CPU", "hostname": socket.gethostname(),
                           "git_revision": "abc1234def"}}
    if status != "ok":
        rec.update(test_metric=None, error="RuntimeError: boom",
                   traceback=f'File "{ROOT}/bench/run/engine.py", line 1\nRuntimeError: boom')
    rec.update(fields)
    (run / "record.json").write_text(json.dumps(rec))
    return rec


def test_a_portable_record_names_no_machine_and_keeps_its_config_hash(tmp_path):
    results = tmp_path / "results"
    rec = made_record(results, "r1", status="failed", data_dir="../shared/data")
    assert list(machine_traces(rec))  # the record as written names this machine
    made = portable(rec, "r1", base=tmp_path / "checkout", project=ROOT)
    assert list(machine_traces(made)) == []
    assert "hostname" not in made["environment"]
    assert made["run_dir"] == "<results_dir>/runs/r1"
    assert {k: made["config"][k] for k in ("results_dir", "data_dir", "cache_dir")} == {
        "results_dir": "<results_dir>", "data_dir": "<data_dir>", "cache_dir": "<cache_dir>"}
    assert made["data"] == {"features": {"cache_file": "<cache_dir>/speech/f.pt"}, "root": "<data_dir>/fsdd"}
    assert made["traceback"].startswith('File "<project>/bench/run/engine.py"')
    assert config_hash(made["config"]) == rec["config_hash"]
    assert portable(made, "r1", base=tmp_path, project=ROOT) == made  # idempotent


def test_a_path_in_a_sample_text_is_not_taken_for_a_machine_path():
    assert list(machine_traces({"notes": ["speeds in km/h", "either / or", "1/2 of it"]})) == []
    assert list(machine_traces({"test_details": {"samples": [{"reference": "see /usr/share/doc"}]}})) == []
    assert list(machine_traces({"error": "cannot open '/home/me/x.wav'"}))


def test_a_failed_runs_traceback_through_python_loses_the_interpreters_folder(tmp_path):
    import sys

    rec = made_record(tmp_path / "results", "r1", status="failed",
                      traceback=f'File "{sys.prefix}/lib/python3/site-packages/torch/nn/x.py", line 2')
    made = portable(rec, "r1", base=tmp_path, project=ROOT)
    assert made["traceback"].startswith('File "<python>/lib/python3/site-packages/torch/nn/x.py"')
    assert list(machine_traces(made)) == []


def fill(results: Path) -> None:
    made_record(results, "20260101-000001-a-s0-h-1", attention_example="attention.pt")
    made_record(results, "20260101-000002-a-s1-h-2", seed=1, attention_example="attention.pt")
    made_record(results, "20260101-000003-g-s0-h-3", model="gru", model_family="rnn", status="failed")
    made_record(results, "20260101-000004-g-s1-h-4", model="gru", model_family="rnn", seed=1,
                status="interrupted", error="interrupted (Ctrl-C)")
    (results / "runs" / "20260101-000005-killed").mkdir()
    for name in ("20260101-000001-a-s0-h-1", "20260101-000002-a-s1-h-2"):
        (results / "runs" / name / "attention.pt").write_bytes(b"x")
        (results / "runs" / name / "best.pt").write_bytes(b"x")
        (results / "runs" / name / "events.out.tfevents.1.host.1.0").write_bytes(b"x")


def test_publish_keeps_complete_portable_records_and_writes_the_table_and_report(tmp_path):
    results = tmp_path / "reference"
    fill(results)
    done = publish(results)
    assert (done.ok, done.failed, done.rewritten) == (2, 1, 3)
    assert sorted(done.removed) == ["20260101-000004-g-s1-h-4", "20260101-000005-killed"]
    left = {p.relative_to(results / "runs").as_posix() for p in (results / "runs").rglob("*") if p.is_file()}
    assert left == {"20260101-000001-a-s0-h-1/record.json", "20260101-000001-a-s0-h-1/attention.pt",
                    "20260101-000002-a-s1-h-2/record.json", "20260101-000003-g-s0-h-3/record.json"}
    for path in (results / "runs").glob("*/record.json"):
        assert list(machine_traces(json.loads(path.read_text()))) == []
    assert {"results.csv", "report.md", "report.html"} <= {p.name for p in results.iterdir()}
    report = (results / "report.md").read_text()
    # a second publish changes nothing: the same records give the same report
    again = publish(results)
    assert (again.rewritten, again.removed) == (0, [])
    assert (results / "report.md").read_text() == report


def test_a_published_record_resumes_from_another_checkout(tmp_path):
    fill(tmp_path / "made")
    publish(tmp_path / "made")
    moved = tmp_path / "elsewhere" / "reference"
    shutil.copytree(tmp_path / "made", moved)
    rec = read_record(moved / "runs" / "20260101-000001-a-s0-h-1" / "record.json")
    assert rec["run_dir"] == str(moved / "runs" / "20260101-000001-a-s0-h-1")  # where it lies now
    found = find_ok_record(moved, rec["config_hash"], 0)
    assert found is not None and found["run_id"] == "20260101-000001-a-s0-h-1"


def test_publish_refuses_while_a_run_holds_its_lock(tmp_path):
    results = tmp_path / "reference"
    fill(results)
    with file_lock(results / "locks" / "h-s0.lock") as held:
        assert held is None
        with pytest.raises(BenchError, match="a run is in progress"):
            publish(results)
    assert (results / "runs" / "20260101-000005-killed").is_dir()  # nothing removed


def test_publish_on_a_folder_without_runs_is_one_line(tmp_path):
    result = run_cli("publish", str(tmp_path / "nothing"))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "no runs under" in result.stderr


def mixed_processors() -> list[dict]:
    """Attention and a GRU, 2 seeds each on two processors: attention is faster than the GRU on
    each, but the fast processor's GRU outruns the slow one's attention."""
    records = []
    for cpu, speed in (("Fast CPU", 1000.0), ("Slow CPU", 100.0)):
        for model, factor in (("attention", 1.5), ("gru", 1.0)):
            for seed in (0, 1):
                i = len(records)
                records.append({"task": "asr", "dataset": "d", "model": model, "variant": "default",
                                "model_family": "attention" if model == "attention" else "rnn",
                                "seed": seed + (2 if cpu == "Slow CPU" else 0), "status": "ok",
                                "metric_name": "wer", "higher_is_better": False,
                                "test_metric": 0.1 + 0.01 * seed, "params": 1000,
                                "train_samples_per_s": speed * factor, "wall_time_s": 600 / speed,
                                "config_hash": f"{model}", "run_id": f"r{i}", "run_dir": f"r{i}",
                                "environment": {"device": "cpu", "device_name": cpu,
                                                "git_revision": "abc1234"}})
    return records


def test_timings_are_compared_within_one_processor_and_quality_pools_across():
    frame = to_frame(mixed_processors())
    timing = aggregate(frame, by_processor=True)
    findings = speed_findings(timing)
    assert sorted(f.where for f in findings) == ["asr/d on Fast CPU", "asr/d on Slow CPU"]
    assert all("1.50x the samples/s" in f.numbers for f in findings)  # never 0.15x or 15x
    fast = next(f for f in findings if f.where.endswith("Fast CPU"))
    assert "(1500 ± 0 samples/s over 2 seeds against 1000 ± 0 samples/s over 2 seeds;" in fast.numbers
    pooled = aggregate(frame)
    assert pooled.set_index("model")["seeds"].to_dict() == {"attention": 4, "gru": 4}
    section = results_section(frame, pooled, timing)
    text = "\n".join(section.markdown)
    assert "made on 2 processor models" in text and "Fast CPU" in text and "Slow CPU" in text
    assert "pooled across them" in provenance(frame) and "abc1234" in provenance(frame)


def test_one_processor_keeps_the_findings_place_plain():
    frame = to_frame([r for r in mixed_processors() if r["environment"]["device_name"] == "Fast CPU"])
    assert [f.where for f in speed_findings(aggregate(frame, by_processor=True))] == ["asr/d"]
    assert "pooled" not in provenance(frame)


# ---------------------------------------------------------------- results/reference as committed
def test_the_committed_report_is_what_the_committed_records_give(tmp_path):
    assert (REFERENCE / "report.md").is_file(), "results/reference/report.md is not committed"
    copy = tmp_path / "reference"
    shutil.copytree(REFERENCE, copy, ignore=shutil.ignore_patterns("report*", "results.*"))
    write_report(copy)
    assert (copy / "report.md").read_text() == (REFERENCE / "report.md").read_text(), (
        "the report code changed what the reference's report says: run 'mhab publish "
        "results/reference' and commit the regenerated report")


def readme_table() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("<!-- reference-table")
    start = text.index("\n", start) + 1
    return text[start:text.index("<!-- /reference-table -->")].strip()


def test_the_readme_table_is_generated_from_the_reference_records():
    expected = markdown_summary(load(REFERENCE))
    assert readme_table() == expected, (
        "README.md's reference table differs from 'mhab table results/reference --markdown': "
        "paste that command's output between the reference-table markers")


def test_committed_records_name_no_machine():
    records = sorted(REFERENCE.glob("**/runs/*/record.json"))
    assert records
    for path in records:
        assert list(machine_traces(json.loads(path.read_text()), host="")) == [], path


def test_the_table_markdown_flag_prints_the_readme_table():
    result = run_cli("table", str(REFERENCE), "--markdown")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == readme_table()
    assert len(pd.read_csv(REFERENCE / "results.csv")) == len(list(REFERENCE.glob("runs/*/record.json")))


def test_aeslc_runs_are_set_beside_the_papers_published_scores():
    from bench.report.sections import published_section

    records = [{"task": "summarization", "dataset": "aeslc", "label": model, "metric_name": "rougeL",
                "test_metric": rouge_l, "test_details": {"rouge1": rouge_l + 2, "rouge2": rouge_l / 2,
                                                         "rougeL": rouge_l}}
               for model, base in (("attention", 15.0), ("gru", 12.0)) for rouge_l in (base, base + 1)]
    text = "\n".join(published_section(records).markdown)
    assert "attention (this suite)" in text and "15.50 ± 6.35" in text  # mean ± t-interval of 15, 16
    assert "Zhang and Tetreault 2019" in text and "23.44" in text and "10.29" in text
    other = published_section([{**records[0], "dataset": "reports"}])
    assert "No dataset with published scores here" in "\n".join(other.markdown)


def test_a_comparison_that_mixes_code_says_so():
    from bench.records.table import mixed_code

    records = mixed_processors()
    for i, rec in enumerate(records):
        rec["environment"]["git_revision"] = "abc1234" if i < 4 else "def5678"
        rec["code"] = {"model": {"module": "m", "sha256": "111111" if i % 2 else "222222"}}
    notes = mixed_code(to_frame(records))
    assert notes == ["asr/d mixes 2 code revisions: abc1234 (4 runs), def5678 (4 runs)",
                     "asr/d attention mixes 2 versions of its model or task source: model:111111 (2 runs), "
                     "model:222222 (2 runs)",
                     "asr/d gru mixes 2 versions of its model or task source: model:111111 (2 runs), "
                     "model:222222 (2 runs)"]
    for rec in records:  # each family's own source, one version each: nothing mixed
        rec["environment"]["git_revision"] = "abc1234"
        rec["code"] = {"model": {"module": rec["model"], "sha256": rec["model"][:6]}}
    assert mixed_code(to_frame(records)) == []


def test_publish_keeps_an_attention_example_as_its_own_bytes(tmp_path):
    import torch

    from bench.records.atomic import atomic_torch_save
    from bench.records.attention_examples import PatchGridExample, load_example

    results = tmp_path / "reference"
    made_record(results, "20260101-000001-a-s0-h-1", attention_example="attention.pt")
    features = torch.randn(2000, 1, 40, 101)  # the split's features; the example is a view of one
    example = PatchGridExample(input=features[7], label=3, heads=torch.rand(4, 5, 24))
    path = results / "runs" / "20260101-000001-a-s0-h-1" / "attention.pt"
    atomic_torch_save(path, {"kind": example.kind, "input": example.input, "label": 3,
                             "heads": example.heads})
    assert path.stat().st_size > 10_000_000  # the whole storage of the view, as runs once wrote it
    publish(results)
    assert path.stat().st_size < 100_000
    again = load_example(path)
    assert torch.equal(again.input, features[7]) and torch.equal(again.heads, example.heads)


def test_a_machine_path_in_a_hashed_config_key_is_refused_not_rewritten(tmp_path):
    results = tmp_path / "reference"
    rec = made_record(results, "20260101-000001-a-s0-h-1")
    rec["config"]["task"]["root"] = "/home/someone/my_images"  # a user folder: part of the hash
    rec["config_hash"] = config_hash(rec["config"])
    path = results / "runs" / "20260101-000001-a-s0-h-1" / "record.json"
    path.write_text(json.dumps(rec))
    before = path.read_text()
    with pytest.raises(BenchError, match=r"config\.task\.root: /home/someone/my_images"):
        publish(results)
    assert path.read_text() == before  # nothing changed
