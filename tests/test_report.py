"""The report from a fixture results dir: every section, valid HTML, escaped dataset text,
and (where Chromium is installed) every image and section shown in a real browser."""

import shutil
from pathlib import Path

import html5lib
import pandas as pd
import pytest
import torch

from bench.report.render import write_report
from bench.report.sections import TITLES
from tests.conftest import run_cli, write_record

MALICIOUS = "<script>alert('x')</script>"




@pytest.fixture
def results(tmp_path):
    root = tmp_path / "results"
    for seed in range(3):
        for model, acc, speed in (("attention", 0.95, 100.0), ("lstm", 0.90, 300.0), ("gru", 0.91, 250.0)):
            write_record(root, f"img-{model}-{seed}", model=model, seed=seed, test_metric=acc + 0.01 * seed,
                    train_samples_per_s=speed)
        for heads, acc in ((1, 0.80), (2, 0.86), (4, 0.88), (8, 0.87)):
            write_record(root, f"heads{heads}-{seed}", variant=f"heads_{heads}", seed=seed,
                         test_metric=acc + 0.002 * seed, config_hash=f"heads{heads}",
                         config={"model": {"num_heads": heads}, "variant": f"heads_{heads}"})
        for model, base in (("attention", 30.0), ("gru", 20.0)):
            drop = 0 if model == "attention" else 4
            buckets = [{"length": b, "count": 10, "value": base - i * drop}
                       for i, b in enumerate(["1-12", "13-18", "19-25", "26+"])]
            write_record(root, f"tr-{model}-{seed}", task="translation", dataset="multi30k", model=model,
                    seed=seed, metric_name="bleu", test_metric=base + seed,
                    train_samples_per_s=50.0 if model == "attention" else 80.0,
                    test_details={"metric_by_length": {"unit": "source subword tokens", "metric": "bleu",
                                                       "buckets": buckets},
                                  "samples": [{"source": MALICIOUS, "reference": "r", "hypothesis": "h"}]})
        recall = ((16, {"attention": 0.99, "lstm": 0.98}), (256, {"attention": 0.97, "lstm": 0.2}))
        for length, scores in recall:
            for model, acc in scores.items():
                write_record(root, f"len{length}-{model}-{seed}", task="recall", dataset="first_token",
                        model=model, variant=f"length_{length}", seed=seed, test_metric=acc + 0.001 * seed,
                        config_hash=f"len{length}-{model}",
                        config={"task": {"seq_len": length}, "model": {"name": model},
                                "variant": f"length_{length}"},
                        train_samples_per_s=1000.0 / length if model == "attention" else 200.0,
                        train_activation_mb=length * (0.5 if model == "attention" else 0.1))
    write_record(root, "failed-run", model="gru", seed=9, status="failed", test_metric=None, error=MALICIOUS)
    grid = write_record(root, "with-map", seed=5, attention_example="attention.pt")
    torch.save({"kind": "patch_grid", "input": torch.rand(1, 8, 8), "label": 3,
                "heads": torch.rand(4, 4, 4)}, Path(grid["run_dir"]) / "attention.pt")
    cross = write_record(root, "with-cross", task="translation", dataset="multi30k", seed=6,
                    metric_name="bleu", test_metric=31.0, attention_example="attention.pt")
    torch.save({"kind": "cross", "heads": torch.rand(2, 3, 4).softmax(-1),
                "source_tokens": ["▁ein", "▁Hund", MALICIOUS, "."], "target_tokens": ["<s>", "▁a", "▁dog"]},
               Path(cross["run_dir"]) / "attention.pt")
    speed_rows = [{"section": "attention", "status": "ok", "model": model, "mode": "train", "batch_size": 1,
                   "seq_len": n, "dim": 256, "num_heads": 8, "step_ms": 1.0, "tokens_per_s": tps / n,
                   "achieved_gflop_s": 5.0, "peak_share": 0.1, "peak_memory_mb": n / 10,
                   "memory_kind": "saved_activations", "dtype": "float32", "device_name": "Test CPU",
                   "threads": 2, "matmul_peak_gflop_s": 50.0, "torch": "2.x", "compile": "aot_eager",
                   "sdpa_backend": "auto"}
                  for model, tps in (("core", 5e6), ("torch", 3e6)) for n in (128, 1024)]
    speed_rows.append({**speed_rows[0], "section": "task", "model": "image/digits:gru", "params": 10,
                       "samples_per_s": 10.0, "engine_overhead": 0.02, "data_share": 0.1})
    speed_rows += [{**speed_rows[0], "section": "reference", "model": model, "batch_size": 32, "round": r,
                    "step_ms": ms * (1 + r), "round_peak_gflop_s": 60.0 + r, "round_peak_share": 0.6}
                   for r in range(3) for model, ms in (("core", 4.0), ("torch", 8.0))]
    pd.DataFrame(speed_rows).to_csv(root / "speed.csv", index=False)
    return root


def test_report_has_every_section_and_valid_html(results):
    md_path, html_path = write_report(results)
    markdown, page = md_path.read_text(), html_path.read_text()
    for title in TITLES.values():
        assert f"## {title}" in markdown
    for key in TITLES:
        assert f'<section id="{key}">' in page
    html5lib.HTMLParser(strict=True).parse(page)  # raises on any parse error
    assert MALICIOUS not in page and "&lt;script&gt;" in page  # dataset text is escaped
    assert page.count("data:image/png;base64,") >= 5  # self-contained: images embedded
    assert "src=\"report_files" not in page
    for image in (results / "report_files").glob("*.png"):
        assert image.stat().st_size > 1000
    assert "No heads ablation" not in markdown and "No speed table" not in markdown
    # The speed targets come from the reference rounds, and say how many and how noisy.
    assert "Reference point (B=32, L=128, D=256, H=8): targets are medians over 3 rounds" in markdown
    assert "from 60.0 to 62.0 GFLOP/s" in markdown and "core / torch step time (fwd+bwd)" in markdown
    assert "on Test CPU (2 threads), torch 2.x, dtype float32, torch.compile: aot_eager" in markdown


def test_claims_verdicts_follow_the_data(results):
    markdown = write_report(results)[0].read_text()
    assert markdown.index("## The article's claims against the data") < markdown.index("## Results per task")
    claims = markdown.split("## The article's claims against the data")[1]
    assert "Measured on: Test CPU" in claims
    heads = _claim_rows(markdown, 1)
    assert heads[0]["where"] == "image/digits" and heads[0]["verdict"] == "supported"
    speed = _claim_rows(markdown, 2)
    assert {r["verdict"] for r in speed if r["where"].startswith("recall at 256")} == {"indication against"}
    (long_range,) = _claim_rows(markdown, 3)
    assert (long_range["where"], long_range["verdict"]) == ("recall at 256 tokens", "supported")
    assert long_range["numbers"].startswith("recalling a token 255 steps back")


@pytest.mark.slow
def test_report_command(results):
    out = run_cli("report", str(results))
    assert out.returncode == 0 and "report.html" in out.stdout
    empty = run_cli("report", str(results.parent / "nothing"))
    assert empty.returncode == 1 and "no run records" in empty.stderr


def _chromium():
    return shutil.which("chromium") and shutil.which("chromedriver")


@pytest.mark.skipif(not _chromium(), reason="Debian's chromium and chromium-driver are not installed")
def test_report_renders_in_headless_chromium(results, tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    html_path = write_report(results)[1]
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--no-first-run",
                 f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        driver.set_window_size(1200, 900)
        driver.get(html_path.resolve().as_uri())
        images = driver.execute_script(
            "return Array.from(document.images).map(i => [i.complete, i.naturalWidth]);")
        assert len(images) >= 5
        assert all(done and width > 0 for done, width in images), images
        for key, title in TITLES.items():
            section = driver.find_element("id", key)
            assert section.is_displayed()
            assert title in section.text
        assert driver.execute_script("return document.querySelectorAll('script').length") == 0
    finally:
        driver.quit()


def test_one_length_bucket_is_no_evidence(tmp_path):
    for model, bleu in (("attention", 90.0), ("gru", 50.0)):
        bucket = {"source_tokens": "1-12", "sentences": 5, "bleu": bleu}
        write_record(tmp_path, f"tr-{model}", task="translation", dataset="numbers", model=model,
                metric_name="bleu", test_metric=bleu, test_details={"bleu_by_source_length": [bucket]})
    (row,) = _claim_rows(write_report(tmp_path)[0].read_text(), 3)
    assert (row["where"], row["verdict"]) == ("translation/numbers", "no data")
    assert row["numbers"].startswith("all test inputs fall in one length bucket")


def _markdown_rows(text: str) -> list[dict[str, str]]:
    """The rows of the first Markdown table in ``text``, as header -> cell."""
    lines = []
    for line in text.splitlines():
        if line.startswith("|"):
            lines.append(line)
        elif lines:
            break
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return [dict(zip(cells[0], row, strict=True)) for row in cells[2:]]


def _claim_rows(markdown: str, claim: int) -> list[dict[str, str]]:
    """The front page's rows of claim number ``claim``."""
    front = markdown.split("## The article's claims against the data")[1].split("\n## ")[0]
    return [r for r in _markdown_rows(front) if r["claim"].startswith(f"{claim}. ")]


def test_report_flags_unequal_budgets_and_names_settings(tmp_path):
    for model, epochs in (("attention", 10), ("gru", 1)):
        write_record(tmp_path, f"tr-{model}", task="translation", dataset="multi30k", model=model,
                     metric_name="bleu", test_metric=30.0, epochs_run=epochs, wall_time_s=600.0)
    write_record(tmp_path, "tr-gru-long", task="translation", dataset="multi30k", model="gru",
                 metric_name="bleu", test_metric=25.0, epochs_run=10, wall_time_s=1800.0,
                 config_hash="long", config={"trainer": {"epochs": 10}})
    results = write_report(tmp_path)[0].read_text().split("## Results per task")[1].split("\n## ")[0]
    rows = {(r["model"], r["setting"]): r for r in _markdown_rows(results)}
    assert len(rows) == 3, "two gru configs must be two rows, not one row of two seeds"
    assert rows[("gru", "trainer.epochs=10")]["test bleu, higher is better (mean ± 95% CI)"] == "25 (1 seed)"
    assert rows[("gru", "trainer.epochs=10")]["epochs"] == "10"
    assert rows[("gru", "trainer.epochs=10")]["wall (min)"] == "30"
    assert rows[("gru", "trainer.epochs=null")]["epochs"] == "1"
    assert "Not the same budget" in results
    assert "attention: 10, gru (trainer.epochs=10): 10, gru (trainer.epochs=null): 1" in results


def test_report_says_nothing_of_budgets_when_they_match(tmp_path):
    for model in ("attention", "gru"):
        write_record(tmp_path, f"img-{model}", model=model, epochs_run=15, wall_time_s=90.0)
    results = write_report(tmp_path)[0].read_text().split("## Results per task")[1].split("\n## ")[0]
    rows = _markdown_rows(results)
    assert [(r["model"], r["epochs"], r["wall (min)"]) for r in rows] == [("attention", "15", "1.5"),
                                                                         ("gru", "15", "1.5")]
    assert "setting" not in rows[0] and "Not the same budget" not in results


def test_speed_claim_names_each_attention_setting(tmp_path):
    # Two attention configs are two measurements: the verdict gives each, not whichever came first.
    write_record(tmp_path, "attn-small", model="attention", train_samples_per_s=400.0)
    write_record(tmp_path, "attn-big", model="attention", train_samples_per_s=100.0,
                 config_hash="big", config={"model": {"dim": 512}})
    write_record(tmp_path, "gru", model="gru", train_samples_per_s=200.0)
    speed = _claim_rows(write_report(tmp_path)[0].read_text(), 2)
    assert sorted((r["verdict"], r["numbers"].split(" trains at ")[0]) for r in speed
                  if " trains at " in r["numbers"]) == [
        ("indication against", "attention (model.dim=512)"), ("indication for", "attention (model.dim=null)")]
    numbers = " ".join(r["numbers"] for r in speed)
    assert ("attention (model.dim=512) trains at 0.50x the samples/s of the fastest rnn baseline, gru"
            in numbers)
    assert "attention (model.dim=null) trains at 2.00x" in numbers


def test_attention_examples_are_typed_records_that_own_their_figure(tmp_path):
    from bench.records.attention_examples import (
        CrossAttentionExample,
        PatchGridExample,
        load_example,
        save_example,
    )

    cross = CrossAttentionExample(heads=torch.rand(2, 3, 4), source_tokens=list("abcd"),
                                  target_tokens=list("xyz"))
    back = load_example(save_example(tmp_path / "cross.pt", cross))
    assert isinstance(back, CrossAttentionExample) and back.source_tokens == list("abcd")
    torch.testing.assert_close(back.heads, cross.heads)
    assert len(back.figure().axes) == 2  # one panel per head
    grid = PatchGridExample(input=torch.rand(1, 8, 8), label=3, heads=torch.rand(4, 2, 2))
    assert len(load_example(save_example(tmp_path / "grid.pt", grid)).figure().axes) == 5
    torch.save({"kind": "video", "heads": torch.rand(1)}, tmp_path / "video.pt")
    with pytest.raises(ValueError, match="known kind"):
        load_example(tmp_path / "video.pt")
    torch.save({"kind": "cross", "heads": torch.rand(1, 1, 1)}, tmp_path / "short.pt")
    with pytest.raises(ValueError, match="without source_tokens, target_tokens"):
        load_example(tmp_path / "short.pt")


def test_axes_come_from_the_recorded_config_and_each_family_is_its_own_baseline(tmp_path):
    for seed in range(2):
        for heads in (1, 4):  # labels that say nothing of heads: the config does
            write_record(tmp_path, f"h{heads}-{seed}", variant=f"mine{heads}", seed=seed,
                         test_metric=0.5 + 0.1 * heads + 0.01 * seed, config_hash=f"h{heads}",
                         config={"model": {"num_heads": heads}, "variant": f"mine{heads}"})
    write_record(tmp_path, "label-only", variant="heads_2", test_metric=0.1)  # no config: no axis
    for model, family, speed in (("attention", "attention", 100.0), ("gru", "rnn", 50.0),
                                 ("conv1d", "conv1d", 400.0)):
        write_record(tmp_path, f"{model}-default", model=model, model_family=family,
                     train_samples_per_s=speed)
    markdown = write_report(tmp_path)[0].read_text()
    heads = markdown.split("## Heads ablation")[1].split("\n## ")[0]
    assert [r["heads"] for r in _markdown_rows(heads)] == ["1", "4"]
    (heads_row,) = _claim_rows(markdown, 1)
    assert heads_row["verdict"] == "supported"
    assert heads_row["numbers"].startswith("4 heads 0.905 ± ")
    assert "vs 1 head 0.605 ± " in heads_row["numbers"]
    assert "difference +0.3 (95% CI" in heads_row["numbers"] and "seeds 2 vs 2" in heads_row["numbers"]
    speed = {r["numbers"].split(" (")[0]: r for r in _claim_rows(markdown, 2)}
    against = speed["attention trains at 0.25x the samples/s of the fastest conv1d baseline, conv1d"]
    assert against["verdict"] == "indication against"
    assert "(100 samples/s, 1 run against 400 samples/s, 1 run;" in against["numbers"]
    assert speed["attention trains at 2.00x the samples/s of the fastest rnn baseline, gru"]["verdict"] == \
        "indication for"


def test_metric_by_length_is_judged_against_each_baseline_family():
    from bench.report.findings import long_range_findings

    records = []
    for family, model, (short, long) in (("attention", "attention", (30, 28)), ("rnn", "gru", (25, 15)),
                                         ("conv1d", "conv1d", (20, 29))):
        for seed in (0, 1):
            buckets = [{"length": "1-12", "count": 5, "value": short},
                       {"length": "13+", "count": 5, "value": long}]
            records.append({"task": "translation", "dataset": "multi30k", "label": model, "seed": seed,
                            "model_family": family, "test_details": {"metric_by_length": {
                                "unit": "source subword tokens", "metric": "bleu", "buckets": buckets}}})
    findings = {f.numbers.split(" baseline")[0]: f for f in long_range_findings(pd.DataFrame(), records)}
    conv = findings["13+ source subword tokens: attention bleu 28 vs the best conv1d"]
    assert conv.verdict == "indication against on the longest bucket"
    assert conv.numbers.endswith(", conv1d, 29 (higher is better); means over 2 seeds each, no per-bucket "
                                 "CI, so indicative")
    # one seed each, on different seeds: one seed per side, not two
    one_each = [r for r in records if (r["label"], r["seed"]) in {("attention", 0), ("gru", 1)}]
    (rnn_only,) = long_range_findings(pd.DataFrame(), one_each)
    assert rnn_only.numbers.endswith("means over 1 seed each, no per-bucket CI, so indicative")
    rnn = findings["13+ source subword tokens: attention bleu 28 vs the best rnn"]
    assert rnn.verdict == "indication for on the longest bucket" and ", gru, 15 " in rnn.numbers


def wer_results(root: Path, seeds: int = 3) -> Path:
    """ASR records: WER, lower is better; attention trails the LSTM overall, beats it on the
    longest utterances; the GRU is worst."""
    for seed in range(seeds):
        for model, wer, long in (("attention", 0.05, 0.04), ("lstm", 0.03, 0.06), ("gru", 0.08, 0.09)):
            buckets = [{"length": "1-2", "count": 5, "value": wer},
                       {"length": "7+", "count": 5, "value": long}]
            details = {"metric_by_length": {"unit": "words", "metric": "wer", "buckets": buckets},
                       "samples": [{"reference": "one two", "hypothesis": f"one | {MALICIOUS}"}]}
            write_record(root, f"asr-{model}-{seed}", task="asr", dataset="fsdd_strings", model=model,
                         seed=seed, metric_name="wer", higher_is_better=False,
                         test_metric=wer + 0.001 * seed, test_details=details)
    return root


def test_a_lower_is_better_metric_is_judged_the_right_way_round(tmp_path):
    markdown = write_report(wer_results(tmp_path / "results"))[0].read_text()
    results = markdown.split("## Results per task")[1].split("\n## ")[0]
    assert "test wer, lower is better (mean ± 95% CI)" in results
    assert "attention trails the best rnn baseline, lstm: wer 0.051 ± " in results
    assert "(lower is better); difference +0.02 (95% CI +0.0177 to +0.0223), Welch's t-test " \
           "Holm-corrected p = " in results and "seeds 3 vs 3." in results
    one_seed = write_report(wer_results(tmp_path / "one", seeds=1))[0].read_text()
    assert "attention against the best rnn baseline, lstm: wer 0.05 ± - vs 0.03 ± - (lower is better; " \
           "one seed, so no test and no verdict)." in one_seed
    rows = [r for r in _claim_rows(markdown, 3) if "rnn baseline" in r["numbers"]]
    assert [(r["where"], r["verdict"]) for r in rows] == [
        ("asr/fsdd_strings", "indication for on the longest bucket")]
    assert rows[0]["numbers"].startswith("7+ words: attention wer 0.04 vs the best rnn baseline, lstm, 0.06 "
                                         "(lower is better)")


def test_a_lower_is_better_metric_is_drawn_upside_down_in_the_tradeoff(tmp_path, monkeypatch):
    """Up and to the right is better in every panel: a WER axis is inverted, accuracy's is not."""
    from bench.records.table import aggregate, load
    from bench.report import sections

    drawn = []
    monkeypatch.setattr(sections.Section, "figure", lambda self, caption, fig: drawn.append(fig))
    wer = aggregate(load(wer_results(tmp_path / "wer")))
    for seed in range(2):
        write_record(tmp_path / "acc", f"a{seed}", seed=seed, test_metric=0.9)
    accuracy = aggregate(load(tmp_path / "acc"))
    sections.tradeoff_section(wer)
    sections.tradeoff_section(accuracy)
    (wer_axis,), (accuracy_axis,) = (fig.axes for fig in drawn)
    assert wer_axis.yaxis_inverted() and "lower is better" in wer_axis.get_ylabel()
    assert not accuracy_axis.yaxis_inverted() and "higher is better" in accuracy_axis.get_ylabel()


def test_sample_outputs_are_escaped_and_keep_the_table_whole(tmp_path):
    md_path, html_path = write_report(wer_results(tmp_path / "results"))
    samples = md_path.read_text().split("## Sample outputs")[1].split("\n## ")[0]
    assert "asr / fsdd_strings: attention, seed 0, first 1 test examples." in samples
    assert MALICIOUS not in samples and "one &#124; &lt;script&gt;" in samples
    row = next(line for line in samples.splitlines() if line.startswith("| one two"))
    assert row.count("|") == 3  # two cells: the user's "|" did not open a third
    from bench.report.sections import shorten

    assert shorten("word " * 100, 20) == "word word word word …" and shorten("short") == "short"
    page = html_path.read_text()
    assert MALICIOUS not in page and "<td>one | &lt;script&gt;alert('x')&lt;/script&gt;</td>" in page


def _history(scores: list[float], seconds_per_epoch: float, samples_per_epoch: int = 1000) -> list[dict]:
    return [{"epoch": e, "train_samples": e * samples_per_epoch, "wall_s": e * seconds_per_epoch,
             "val_metric": v} for e, v in enumerate(scores, start=1)]


def test_time_to_quality_and_learning_curves(tmp_path):
    # attention climbs fast per epoch but each epoch is slow; the GRU is quick but plateaus lower
    # an outside family (tcn) beats them all: it sets its own target and leaves the rnn one alone
    runs = {"attention": ([0.5, 0.85, 0.9], 60.0), "gru": ([0.6, 0.7, 0.8], 20.0),
            "lstm": ([0.4, 0.5, 0.6], 10.0), "tcn": ([0.7, 0.92, 0.95], 30.0)}
    for model, (scores, seconds) in runs.items():
        for seed in range(2):
            write_record(tmp_path, f"{model}-{seed}", model=model, seed=seed, test_metric=scores[-1],
                         history=_history([v + 0.001 * seed for v in scores], seconds),
                         **({"model_family": "tcn"} if model == "tcn" else {}))
    write_record(tmp_path, "old", model="conv", model_family="conv",  # recorded before wall times
                 history=[{"epoch": 1, "val_metric": 0.3}])
    sections = write_report(tmp_path)
    markdown = sections[0].read_text()
    quality = markdown.split("## " + TITLES["quality"])[1].split("\n## ")[0]
    assert "image / digits: validation accuracy against epoch and wall time." in quality
    assert "image / digits: time to quality\n\n| target" in quality  # each table says whose it is
    rows = {(r["target"].split(" (")[0], r["model"]): r for r in _markdown_rows(quality)}
    # the rnn family's target is the GRU's mean best, 0.8005; the tcn's is its own, 0.9505
    assert rows[("best rnn baseline's final", "attention")]["wall time (min)"] == "2"  # epoch 2, 120 s
    assert rows[("best rnn baseline's final", "attention")]["training samples"] == "2,000"
    assert rows[("best rnn baseline's final", "gru")]["seeds reaching it"] == "1 of 2"  # seed 0 has 0.8
    assert rows[("best rnn baseline's final", "lstm")]["wall time (min)"] == "not reached"
    assert rows[("best tcn baseline's final", "attention")]["wall time (min)"] == "not reached"
    assert rows[("95% of the best", "attention")]["wall time (min)"] == "not reached"  # 0.95 * 0.9505 > 0.9
    assert rows[("95% of the best", "tcn")]["wall time (min)"] == "1"  # epoch 2, 60 s
    ttq = [r for r in _claim_rows(markdown, 2) if "reached the best" in r["numbers"]]
    assert [(r["where"], r["verdict"]) for r in ttq] == [("image/digits", "indication against")] * 2
    assert ttq[0]["numbers"].startswith("time to quality: attention reached the best rnn baseline's final "
                                        "validation score (0.8005) in 2 min, 0.50x as fast as the quickest "
                                        "rnn baseline, gru (1 min)")
    assert ttq[1]["numbers"] == ("attention never reached the best tcn baseline's final validation "
                                 "score (0.9505)")


def test_lower_is_better_time_to_quality_counts_reaching_down():
    from bench.report.findings import quality_targets, time_to_quality

    curves = pd.DataFrame([{"task": "asr", "dataset": "d", "train_fraction": 1.0, "scale": "s",
                            "device_name": "cpu", "model": m, "model_family": f, "seed": 0,
                            "higher_is_better": False, "epoch": e, "train_samples": e, "wall_s": 10.0 * e,
                            "val_metric": v}
                           for m, f, scores in (("attention", "attention", [0.5, 0.1, 0.05]),
                                                ("lstm", "rnn", [0.4, 0.2, 0.2]))
                           for e, v in enumerate(scores, start=1)])
    targets = quality_targets(curves)
    assert targets["best rnn baseline's final"] == 0.2
    assert targets["95% of the best"] == pytest.approx(0.05 / 0.95)
    ttq = time_to_quality(curves).set_index(["target", "model"])
    assert ttq.loc[("best rnn baseline's final", "attention"), "wall_s"] == 20.0
    assert ttq.loc[("best rnn baseline's final", "lstm"), "wall_s"] == 20.0
    assert ttq.loc[("95% of the best", "lstm"), "reached"] == 0


def shown_tick_labels(ax) -> list:
    """The x tick labels a drawn axis shows: with text, inside its limits."""
    low, high = ax.get_xlim()
    return [t for t in ax.get_xticklabels() if t.get_text() and low <= t.get_position()[0] <= high]


def labels_apart(labels) -> bool:
    """Left to right, no two labels' boxes overlap."""
    boxes = sorted((t.get_window_extent() for t in labels), key=lambda b: b.x0)
    return all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:], strict=False))


@pytest.mark.parametrize("values, base", [((800.0, 2750.0), 10), ((1100.0, 1900.0), 10),
                                          ((3.0, 40_000.0), 10), ((16.0, 1024.0), 2),
                                          ((1656.0, 55_000.0), 10)])
def test_log_axes_label_plain_numbers_that_do_not_overlap(values, base):
    import matplotlib.pyplot as plt

    from bench.report.sections import readable_log_axis

    fig, ax = plt.subplots(figsize=(4.2, 3.4))
    ax.plot(values, [1, 2], marker="o")
    ax.set_xscale("log", base=base)
    readable_log_axis(ax.xaxis, base=base)
    fig.canvas.draw()
    shown = shown_tick_labels(ax)
    plt.close(fig)
    assert len(shown) >= 2
    assert all("e" not in t.get_text() and "times" not in t.get_text() for t in shown)
    assert labels_apart(shown), [t.get_text() for t in shown]


def test_attention_distance_is_drawn_and_cited_by_claim_one(tmp_path):
    # Two seeds of a 2-layer, 3-head model: layer 1's heads look 1, 2 and 4 patches away
    # (seed 1: 1.2, 2, 3.8), layer 2's all about 3. The GRU has no distance.
    for seed, layer1 in ((0, [1.0, 2.0, 4.0]), (1, [3.8, 1.2, 2.0])):
        write_record(tmp_path, f"attn-{seed}", seed=seed, attention_distance={
            "unit": "patch", "queries": 640, "per_layer_head": [layer1, [3.0, 3.1, 2.9]],
            "uniform": 2.5 + seed})
        write_record(tmp_path, f"gru-{seed}", model="gru", seed=seed)
    markdown = write_report(tmp_path)[0].read_text()
    section = markdown.split("## " + TITLES["distance"])[1].split("\n## ")[0]
    assert "image / digits: each head's mean attention distance per layer." in section
    rows = {r["layer"]: r for r in _markdown_rows(section)}
    assert (rows["1"]["heads"], rows["1"]["seeds"]) == ("3", "2")
    assert rows["1"]["nearest head"] == "1.1" and rows["1"]["farthest head"] == "3.9"  # means over seeds
    assert rows["2"]["nearest head"] == "2.9" and rows["2"]["farthest head"] == "3.1"
    assert rows["1"]["even attention"] == "3"  # the seeds' 2.5 and 3.5
    distance = [r for r in _claim_rows(markdown, 1) if r["verdict"] == "descriptive (no test)"]
    assert [r["where"] for r in distance] == ["image/digits"]
    assert ("in patch units: layer 1: 1.1 to 3.9; layer 2: 2.9 to 3.1; widest in layer 1, 3.5x; mean "
            "over 2 seeds; even attention over all keys: 3" in distance[0]["numbers"])


def test_a_report_without_distances_says_how_to_get_them(tmp_path):
    write_record(tmp_path, "gru", model="gru")
    section = write_report(tmp_path)[0].read_text().split("## " + TITLES["distance"])[1].split("\n## ")[0]
    assert "No attention distances yet" in section


def test_learning_curves_of_a_lower_is_better_metric_put_better_up(tmp_path, monkeypatch):
    from bench.report import sections

    drawn = []
    monkeypatch.setattr(sections.Section, "figure", lambda self, caption, fig: drawn.append(fig))
    history = [{"epoch": e, "train_samples": 10 * e, "wall_s": 5.0 * e, "val_metric": 1.0 / e}
               for e in (1, 2, 3)]
    records = [{"task": "asr", "dataset": "d", "label": model, "model_family": family, "seed": 0,
                "metric_name": "wer", "higher_is_better": False, "history": history,
                "environment": {"device_name": "Test CPU"}}
               for model, family in (("attention", "attention"), ("gru", "rnn"))]
    sections.quality_section(records)
    (fig,) = drawn
    by_epoch, by_time = fig.axes
    assert by_epoch.yaxis_inverted() and by_time.yaxis_inverted()
    assert "lower is better" in by_epoch.get_ylabel()


def test_metric_by_length_puts_better_up_and_names_its_table(tmp_path, monkeypatch):
    from bench.report import sections

    drawn = []
    monkeypatch.setattr(sections.Section, "figure", lambda self, caption, fig: drawn.append(fig))
    buckets = [{"length": "1-2", "count": 5, "value": 0.01}, {"length": "3+", "count": 5, "value": 0.03}]
    records = [{"task": "asr", "dataset": "d", "label": "attention", "model_family": "attention", "seed": 0,
                "higher_is_better": False, "test_details": {"metric_by_length": {
                    "unit": "words", "metric": "wer", "buckets": buckets}}}]
    section = sections.length_section(records)
    (fig,) = drawn
    assert fig.axes[0].yaxis_inverted() and "lower is better" in fig.axes[0].get_ylabel()
    text = "\n".join(section.markdown)
    assert "asr / d: test wer by input length (words), mean over seeds" in text
    assert text.splitlines()[1].startswith("| length ")  # the first column is the length
