"""The report along training-set size and model size: curves, crossing sentences computed from
records, and the two claims on the front page."""

import pandas as pd

from bench.report.render import write_report
from bench.report.sizes import DATA, MODEL, crossing
from tests.conftest import write_record
from tests.test_report import _claim_rows, _history, labels_apart, shown_tick_labels

FULL = 50_000
# (train fraction, attention, gru): attention behind on little data, ahead on all of it
DATA_POINTS = ((0.03, 0.70, 0.80), (0.1, 0.78, 0.84), (0.3, 0.88, 0.87), (1.0, 0.92, 0.89))
# (scale, attention params, attention, gru): attention ahead at every size, more so as it grows
MODEL_POINTS = (("xs", 40_000, 0.80, 0.79), ("s", 150_000, 0.85, 0.82), ("m", 600_000, 0.90, 0.84))


def _size_records(root, seeds: int = 3) -> None:
    for seed in range(seeds):
        noise = {"attention": 0.002 * seed, "gru": -0.003 * (seed % 2)}
        for fraction, attention, gru in DATA_POINTS:
            for model, score in (("attention", attention), ("gru", gru)):
                write_record(root, f"d{fraction}-{model}-{seed}", task="image", dataset="fashion_mnist",
                             model=model, seed=seed, test_metric=score + noise[model], params=150_000,
                             config_hash=f"d{fraction}-{model}", epochs_run=10, wall_time_s=600.0,
                             config={"task": {"train_fraction": fraction}, "scale": "s"},
                             data={"train_examples": int(fraction * FULL), "epoch_examples": FULL})
        for scale, params, attention, gru in MODEL_POINTS:
            for model, score in (("attention", attention), ("gru", gru)):
                write_record(root, f"m{scale}-{model}-{seed}", task="asr", dataset="fsdd_strings",
                             model=model, seed=seed, metric_name="wer", higher_is_better=False,
                             test_metric=1 - score + noise[model], params=params,
                             flops_per_sample=params * 50,
                             config_hash=f"m{scale}-{model}", epochs_run=5, wall_time_s=params / 100,
                             config={"task": {"train_fraction": 1.0}, "scale": scale},
                             data={"train_examples": 10_000})


def test_the_crossing_is_said_from_the_records(tmp_path):
    _size_records(tmp_path)
    markdown = write_report(tmp_path)[0].read_text()
    section = markdown.split("## Along training-set size and model size")[1].split("\n## ")[0]
    assert "image / fashion_mnist: attention overtakes gru between 5k and 15k training examples." in section
    assert "asr / fsdd_strings: attention ahead of gru at every point from 40k to 600k parameters." in section
    assert section.count("![") == 2  # one figure per task and axis


def test_the_two_claims_are_judged_on_the_front_page(tmp_path):
    _size_records(tmp_path)
    markdown = write_report(tmp_path)[0].read_text()
    (data_row,) = _claim_rows(markdown, 4)
    assert data_row["where"] == "image/fashion_mnist vs gru" and data_row["verdict"] == "supported"
    assert "attention's lead -0.097 at 1.5k training examples, +0.033 at 50k" in data_row["numbers"]
    (model_row,) = _claim_rows(markdown, 5)  # lower WER is better: the lead still grows
    assert model_row["where"] == "asr/fsdd_strings vs gru" and model_row["verdict"] == "supported"


def test_one_seed_gives_an_indication_not_a_verdict(tmp_path):
    _size_records(tmp_path, seeds=1)
    (row,) = _claim_rows(write_report(tmp_path)[0].read_text(), 4)
    assert row["verdict"] == "indication for" and "one seed" in row["numbers"]


def test_per_task_verdicts_compare_models_at_the_same_size(tmp_path):
    _size_records(tmp_path)
    results = write_report(tmp_path)[0].read_text().split("## Results per task")[1].split("\n## ")[0]
    # four attention rows, each judged against the gru of its own training-set size
    assert results.count("the best rnn baseline, gru (task.train_fraction=") == 4


def test_speed_and_time_to_quality_compare_models_at_the_same_size(tmp_path):
    # (scale, family: samples/s, validation scores): at each scale attention runs at half the
    # GRU's speed and beats its final score; across scales the big GRU is both slower and better
    points = {"xs": {"attention": (500.0, [0.5, 0.7]), "gru": (1000.0, [0.5, 0.6])},
              "m": {"attention": (50.0, [0.8, 0.95]), "gru": (100.0, [0.8, 0.9])}}
    for scale, models in points.items():
        for model, (speed, scores) in models.items():
            for seed in range(2):
                write_record(tmp_path, f"{scale}-{model}-{seed}", model=model, seed=seed,
                             train_samples_per_s=speed, test_metric=scores[-1],
                             history=_history(scores, 1000 / speed), config_hash=f"{scale}-{model}",
                             config={"task": {"train_fraction": 1.0}, "scale": scale})
    rows = [r["numbers"] for r in _claim_rows(write_report(tmp_path)[0].read_text(), 2)]
    speed = [n for n in rows if "samples/s" in n]
    assert len(speed) == 2 and all("trains at 0.50x the samples/s" in n for n in speed)
    reached = [n for n in rows if "validation score" in n]
    assert len(reached) == 2 and not any("never reached" in n for n in reached)
    assert any("the best rnn baseline's final validation score (0.6)" in n for n in reached)


def test_no_sweep_says_how_to_run_one(tmp_path):
    write_record(tmp_path, "one", model="attention")
    markdown = write_report(tmp_path)[0].read_text()
    assert "`mhab run -m suite=scale_data task=image`" in markdown
    assert [r["verdict"] for r in _claim_rows(markdown, 4)] == ["no data"]


def _curve(values: list[float], xs: list[int], key: str = "train_fraction") -> pd.DataFrame:
    return pd.DataFrame({key: range(len(values)), "train_examples": xs, "mean": values,
                         "higher_is_better": True})


def test_crossing_words():
    xs = [1000, 3000, 10000, 30000]
    a = _curve([1, 2, 3, 4], xs)
    assert crossing(a, _curve([2, 3, 1, 1], xs), DATA, "A", "B") == \
        "A overtakes B between 3k and 10k training examples"
    assert crossing(a, _curve([0, 3, 4, 5], xs), DATA, "A", "B") == \
        "A falls behind B between 1k and 3k training examples"
    assert crossing(a, _curve([0, 0, 0, 0], xs), DATA, "A", "B") == \
        "A ahead of B at every point from 1k to 30k training examples"
    words = crossing(a, _curve([0, 3, 0, 5], xs), DATA, "A", "B")
    assert words.startswith("the curves of A and B cross 3 times")
    only = lambda scale: pd.DataFrame({"scale": [scale], "params": [1000], "mean": [0.5],  # noqa: E731
                                       "higher_is_better": [True]})
    assert "share no point" in crossing(only("s"), only("m"), MODEL, "A", "B")


def test_the_points_table_is_written_for_reading(tmp_path):
    _size_records(tmp_path)
    markdown = write_report(tmp_path)[0].read_text()
    section = markdown.split("## Along training-set size and model size")[1].split("\n## ")[0]
    header = next(line for line in section.splitlines() if line.startswith("| task"))
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    assert {"train TFLOPs", "wall (min)", "test metric", "± 95% CI"} <= set(columns)
    row = next(line for line in section.splitlines() if "| asr" in line and "| xs" in line
               and "| attention" in line)
    cells = dict(zip(columns, (cell.strip() for cell in row.strip("|").split("|")), strict=True))
    assert cells["test metric"] == "0.202"  # the mean of 0.2, 0.202 and 0.204, not 0.20200000000000001
    assert cells["wall (min)"] == "6.67"  # 400 s
    assert "," not in cells["train TFLOPs"] and float(cells["train TFLOPs"]) > 0


def test_the_figures_tick_labels_do_not_run_together():
    import matplotlib.pyplot as plt

    from bench.report.sections import _size_figure

    # the measured Fashion-MNIST sweep's spans: 1.66k to 55k examples, 19 to 40 TFLOPs
    group = pd.DataFrame([{"model": model, "train_examples": n, "train_flops": flops,
                           "wall_time_s": wall * 60, "mean": 0.8 + 0.02 * i, "ci95": 0.005}
                          for model, flops, wall in (("attention", 40e12, 15.0), ("gru", 19.4e12, 6.0))
                          for i, n in enumerate((1656, 5505, 16505, 55000))])
    fig = _size_figure(group, DATA, "accuracy", True)
    fig.canvas.draw()
    for ax in fig.axes:
        shown = shown_tick_labels(ax)
        assert labels_apart(shown), [t.get_text() for t in shown]
        assert not ax.yaxis_inverted()
    plt.close(fig)
    wer = _size_figure(group, DATA, "wer", False)  # better is up: the shared WER axis inverted
    assert all(ax.yaxis_inverted() for ax in wer.axes)
    plt.close(wer)


def test_wall_time_is_not_drawn_across_processor_models():
    import matplotlib.pyplot as plt

    from bench.report.sections import _size_figure

    group = pd.DataFrame([{"model": model, "train_examples": n, "train_flops": 1e13 * (i + 1),
                           "wall_time_s": 60.0 * (i + 1), "mean": 0.8, "ci95": 0.01}
                          for model in ("attention", "gru") for i, n in enumerate((1000, 10000))])
    one, two = _size_figure(group, DATA, "accuracy", True), _size_figure(group, DATA, "accuracy", True, 2)
    assert len(one.axes[2].lines) == 2 and not one.axes[2].texts
    assert not two.axes[2].lines and "wall time not compared" in two.axes[2].texts[0].get_text()
    assert len(two.axes[1].lines) == 2  # FLOPs are the same on any processor: still drawn
    plt.close(one)
    plt.close(two)
