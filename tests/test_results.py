"""The results table, seed aggregation, and resuming a sweep."""

import json
import math

import pandas as pd
import pytest
from scipy import stats

from bench.records.columns import NAMES as COLUMNS
from bench.records.table import aggregate, confidence_interval, load, save
from tests.conftest import run_cli, write_record

TINY = ["task=image", "task.dataset=digits", "trainer.max_steps=3", "trainer.batch_size=32",
        "trainer.infer_iters=1", "trainer.timing_warmup_steps=1", "model=gru"]


def _fake_record(root, name, **fields):
    write_record(root, name, **{"model": "gru", **fields})


def test_table_schema_and_files(tmp_path):
    _fake_record(tmp_path, "a", seed=0)
    _fake_record(tmp_path, "b", seed=1, test_metric=0.8)
    (tmp_path / "runs" / "killed-before-record").mkdir()  # no record.json: not a row
    frame = load(tmp_path)
    assert list(frame.columns) == COLUMNS and len(frame) == 2
    for column in ("task", "dataset", "model", "seed", "status", "metric_name", "test_metric",
                   "params", "train_samples_per_s", "infer_samples_per_s", "config_hash"):
        assert column in frame.columns
    assert frame["device"].tolist() == ["cpu", "cpu"]
    parquet, csv = save(frame, tmp_path)
    pd.testing.assert_frame_equal(pd.read_parquet(parquet), frame)
    assert len(pd.read_csv(csv)) == 2


def test_aggregate_mean_std_and_t_interval(tmp_path):
    values = [0.90, 0.80, 0.85]
    for seed, v in enumerate(values):
        _fake_record(tmp_path, f"r{seed}", seed=seed, test_metric=v)
    _fake_record(tmp_path, "failed", seed=3, status="failed", test_metric=None)
    _fake_record(tmp_path, "other", model="lstm", test_metric=0.5)
    agg = aggregate(load(tmp_path)).set_index("model")
    gru = agg.loc["gru"]
    assert gru["seeds"] == 3 and gru["mean"] == pytest.approx(0.85)
    std = pd.Series(values).std()
    assert gru["std"] == pytest.approx(std)
    assert gru["ci95"] == pytest.approx(stats.t.ppf(0.975, 2) * std / math.sqrt(3))
    assert math.isnan(agg.loc["lstm"]["ci95"])  # one seed: no interval
    assert confidence_interval(pd.Series([1.0, 1.0])) == 0.0


@pytest.mark.slow
def test_rerun_skips_ok_runs_and_force_reruns(tmp_path):
    args = ["run", *TINY, f"results_dir={tmp_path}"]
    assert run_cli(*args).returncode == 0
    second = run_cli(*args)
    assert second.returncode == 0 and "skipping: already recorded ok" in second.stderr + second.stdout
    assert len(list(tmp_path.glob("runs/*/record.json"))) == 1
    assert run_cli(*args, "force=true").returncode == 0
    assert len(list(tmp_path.glob("runs/*/record.json"))) == 2


@pytest.mark.slow
def test_failed_runs_are_retried(tmp_path):
    assert run_cli("run", *TINY, f"results_dir={tmp_path}").returncode == 0
    (path,) = tmp_path.glob("runs/*/record.json")
    rec = json.loads(path.read_text())
    rec["status"] = "failed"
    path.write_text(json.dumps(rec))
    assert run_cli("run", *TINY, f"results_dir={tmp_path}").returncode == 0
    statuses = sorted(json.loads(p.read_text())["status"] for p in tmp_path.glob("runs/*/record.json"))
    assert statuses == ["failed", "ok"]


def test_malformed_record_is_a_one_line_error(tmp_path):
    _fake_record(tmp_path, "good")
    bad = tmp_path / "runs" / "bad"
    bad.mkdir()
    (bad / "record.json").write_text("{not json")
    out = run_cli("table", str(tmp_path))
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and "malformed run record" in out.stderr


def test_different_configs_are_not_pooled_as_seeds(tmp_path):
    def config(epochs, lr=1e-3):
        return {"seed": 0, "results_dir": str(tmp_path), "trainer": {"epochs": epochs, "lr": lr}}

    _fake_record(tmp_path, "a-1ep", config_hash="one", config=config(1), test_metric=0.5)
    _fake_record(tmp_path, "b-10ep-s0", config_hash="ten", config=config(10), test_metric=0.9)
    _fake_record(tmp_path, "b-10ep-s1", config_hash="ten", config=config(10), seed=1, test_metric=0.8)
    # a failed try of a third config does not rename the ok ones
    _fake_record(tmp_path, "c-failed", config_hash="bad", config=config(10, lr=1e30), status="failed")
    frame = load(tmp_path).set_index("run_id")
    assert frame.loc["a-1ep", "setting"] == "trainer.epochs=1"
    assert frame.loc["b-10ep-s1", "setting"] == "trainer.epochs=10"
    assert frame.loc["c-failed", "setting"] == "trainer.epochs=10, trainer.lr=1e+30"
    agg = aggregate(frame.reset_index()).set_index("setting")
    assert agg.loc["trainer.epochs=1", "seeds"] == 1 and agg.loc["trainer.epochs=1", "mean"] == 0.5
    assert agg.loc["trainer.epochs=10", "seeds"] == 2
    assert agg.loc["trainer.epochs=10", "mean"] == pytest.approx(0.85)


def test_a_forced_rerun_replaces_the_earlier_run_of_its_seed(tmp_path):
    _fake_record(tmp_path, "20260101-run", test_metric=0.5)
    _fake_record(tmp_path, "20260102-rerun", test_metric=0.7)
    _fake_record(tmp_path, "20260103-seed1", seed=1, test_metric=0.9)
    frame = load(tmp_path)
    assert (frame["setting"] == "").all()
    row = aggregate(frame).iloc[0]
    assert row["seeds"] == 2 and row["mean"] == pytest.approx(0.8)
    assert confidence_interval(pd.Series([0.7, 0.9])) == pytest.approx(row["ci95"])


def test_records_from_before_model_builders_were_named_resume_and_group(tmp_path):
    """A record written before conf/model named its builder (b406709: no model._target_) has
    the hash today's config of the same experiment has, so `mhab run` resumes from it and
    tables count it with new runs; another builder is another experiment. A damaged record of
    another run of the seed does not stop the resume."""
    from bench.records.record import config_hash
    from bench.records.table import setting_labels
    from bench.setup.compose import compose_config, resolved_config
    from tests.conftest import run_cli, write_record

    overrides = ["suite=quick", "task=image", "model=attention"]
    now = resolved_config(compose_config("config", overrides, "run"))
    before = {**now, "model": {k: v for k, v in now["model"].items() if k != "_target_"}}
    assert config_hash(now) == config_hash(before)
    other = {**now, "model": {**now["model"], "_target_": "mine.build"}}
    assert config_hash(other) != config_hash(now)
    assert setting_labels({"old": before, "mine": other})["mine"] == 'model._target_="mine.build"'

    # As b406709 wrote it: its hash then, before a suite's run hashed as the run alone.
    write_record(tmp_path, "20261202-000000-image-digits-attention-s0-09973164-abcdef",
                 config=before, config_hash="09973164b93e", model_family="attention")
    damaged = "20261201-000000-image-digits-attention-s0-0badc0de-abcdef"  # read first
    write_record(tmp_path, damaged, config=before, status="failed")
    (tmp_path / "runs" / damaged / "record.json").write_text("{")
    out = run_cli("run", *overrides, f"results_dir={tmp_path}")
    assert out.returncode == 0, out.stderr
    assert "skipping: already recorded ok" in out.stdout + out.stderr
    assert len(list(tmp_path.glob("runs/*/record.json"))) == 2


def test_table_prints_numbers_for_reading(tmp_path):
    _fake_record(tmp_path, "big", params=143_274, flops_per_sample=16_170_000.0)
    out = run_cli("table", str(tmp_path), "--all")
    assert out.returncode == 0, out.stderr
    assert "143,274" in out.stdout and "16,170,000" in out.stdout and "e+0" not in out.stdout


def test_the_default_table_is_a_row_per_experiment_with_its_interval(tmp_path):
    from bench.records.table import compact_summary

    _fake_record(tmp_path, "s0", test_metric=0.90, params=143_274, wall_time_s=120.0)
    _fake_record(tmp_path, "s1", seed=1, test_metric=0.92, params=143_274, wall_time_s=180.0)
    row = compact_summary(load(tmp_path)).iloc[0]
    assert row["seeds"] == 2 and row["params"] == "143,274" and row["wall min"] == "2.5"
    # mean 0.91, half-width t(0.975, 1) * 0.01414 / sqrt(2) = 0.127
    assert row["test (mean ± 95% CI)"] == "0.91 ± 0.13"


def test_params_vs_attention_names_an_unmatched_comparison(tmp_path):
    from bench.report.render import write_report

    write_record(tmp_path, "a", model="attention", params=1000)
    write_record(tmp_path, "g", model="gru", params=1050, test_metric=0.8)
    write_record(tmp_path, "l", model="lstm", params=3400, test_metric=0.7)
    frame = load(tmp_path)
    ratios = dict(zip(frame["model"], frame["params_vs_attention"], strict=True))
    assert ratios == {"attention": 1.0, "gru": 1.05, "lstm": 3.4}
    results = write_report(tmp_path)[0].read_text().split("## Results per task")[1].split("\n## ")[0]
    assert "Not at matched parameters" in results and "lstm 3.40x" in results and "gru 1.05x" not in results


def test_the_report_shows_the_dtype_only_where_a_run_is_not_float32():
    import pandas as pd

    from bench.records.columns import BY_NAME

    shown = BY_NAME["dtype"].header_shown
    assert not shown(pd.Series(["float32", "float32"]))
    assert shown(pd.Series(["float32", "bf16"])) and shown(pd.Series(["bf16"]))
