"""Summarisation: ROUGE against the rouge-score package, the AESLC reader, the jsonl reader,
the offline incident reports, and tiny runs of every model through the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rouge_score import rouge_scorer

from bench.errors import BenchError
from bench.records.record import record_problem
from tasks.summarization import SEVERITIES, SummarizationTask, incident_reports, read_aeslc_email, read_jsonl
from tests.conftest import read_records, run_cli


def task(tmp_path: Path, **kw) -> SummarizationTask:
    return SummarizationTask("summarization", "reports", None, str(tmp_path), **kw)


def test_rouge_matches_the_package_and_takes_the_best_reference(tmp_path):
    hyps = ["meeting confirmed for tuesday", "budget numbers", ""]
    refs = [["meeting confirmation", "tuesday meeting confirmed"], ["q3 budget"], ["anything"]]
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    want = {kind: 100 * sum(max(scorer.score(r, h)[kind].fmeasure for r in rs)
                            for h, rs in zip(hyps, refs, strict=True)) / 3
            for kind in ("rouge1", "rouge2", "rougeL")}
    got = task(tmp_path).score(hyps, refs, final=True)
    for kind, value in want.items():
        assert got[kind] == pytest.approx(value)
    assert got["metric"] == got["rougeL"] and got["rouge_package"].startswith("rouge-score ")
    # the second reference matches the first hypothesis best: 3 of 4 words, stemming on
    assert got["rouge1"] > 100 * (scorer.score("meeting confirmation", hyps[0])["rouge1"].fmeasure + 0.5) / 3


def test_aeslc_reader(tmp_path):
    path = tmp_path / "allen-p_inbox_1.subject"
    path.write_text("Hi Phillip,  This confirms our meeting\non Tuesday.\n\n"
                    "@subject\nConfirmation: Meeting\n\n@ann0\nmeeting confirmation\n\n"
                    "@ann1\nmeeting on tuesday\n\n@ann2\nmeeting confirmed\n")
    email = read_aeslc_email(path)
    assert email["body"] == "Hi Phillip, This confirms our meeting on Tuesday."
    assert email["subject"] == "Confirmation: Meeting"
    assert email["annotations"] == ["meeting confirmation", "meeting on tuesday", "meeting confirmed"]
    train = tmp_path / "train.subject"
    train.write_text("Body text\n@subject\nSubject\n")
    assert read_aeslc_email(train)["annotations"] == ["Subject"]  # train: the sender's own
    (tmp_path / "bad.subject").write_text("no subject here\n")
    with pytest.raises(BenchError, match="no '@subject' line"):
        read_aeslc_email(tmp_path / "bad.subject")


def test_jsonl_reader_takes_lists_of_references_and_names_bad_lines(tmp_path):
    path = tmp_path / "test.jsonl"
    path.write_text('{"text": "a long document", "headline": ["first ref", "second ref"]}\n\n'
                    '{"text": "another one", "headline": "only ref"}\n')
    pairs = read_jsonl(path, "text", "headline")
    assert pairs.sources == ["a long document", "another one"]
    assert pairs.targets == ["first ref", "only ref"]
    assert pairs.references == [["first ref", "second ref"], ["only ref"]]
    path.write_text('{"text": "fine", "headline": "ok"}\n{"text": broken\n')
    with pytest.raises(BenchError, match="line 2 is not JSON"):
        read_jsonl(path, "text", "headline")


def test_incident_reports_need_the_whole_report():
    reports = incident_reports({"train": 400, "val": 10, "test": 10}, seed=3)
    assert reports == incident_reports({"train": 400, "val": 10, "test": 10}, seed=3)
    positions = []
    for source, headline in zip(reports["train"].sources, reports["train"].targets, strict=True):
        severity = headline.split()[0]
        sentences = source.split(". ")
        # exactly one incident has the top severity, and the headline names it
        assert sum(f" {severity} " in f" {s} " for s in sentences) == 1
        top = SEVERITIES.index(severity)
        assert all(SEVERITIES.index(w) <= top for w in source.split() if w in SEVERITIES)
        key = next(i for i, s in enumerate(sentences) if f" {severity} " in f" {s} ")
        positions.append(key / len(sentences))
        incident, place = headline.split(" in ")[0].split()[1], headline.split(" in ")[1]
        # the key sentence names severity, incident and place in the headline's order
        assert sentences[key].index(f"{severity} {incident}") < sentences[key].index(place)
    assert min(positions) == 0 and max(positions) > 0.8  # first as well as last


BUDGET = ["trainer.max_steps=3", "trainer.batch_size=16", "trainer.infer_iters=1",
          "trainer.timing_warmup_steps=1", "model.dim=32", "model.depth=1", "model.embed_dim=32",
          "task.vocab_size=120", "task.beam_size=2", "task.max_target_tokens=12"]
RNN_ONLY = {"model.embed_dim=32"}


def check_summary_record(rec: dict, test_size: int) -> None:
    assert record_problem(rec) is None and rec["status"] == "ok" and rec["metric_name"] == "rougeL"
    details = rec["test_details"]
    assert details["rougeL"] == rec["test_metric"] and 0 <= details["rouge2"] <= details["rouge1"] <= 100
    assert details["rouge_package"].startswith("rouge-score")
    by_length = details["metric_by_length"]
    assert by_length["metric"] == "rougeL" and sum(b["count"] for b in by_length["buckets"]) == test_size
    assert {"source", "reference", "hypothesis"} <= set(details["samples"][0])
    assert rec["data"]["sources_cut"]["max_tokens"] == rec["config"]["task"]["max_source_tokens"]
    batching = rec["data"]["batching"]
    assert batching["mode"] == "bucketed"
    assert batching["padding_share"]["bucketed"] < batching["padding_share"]["random"]


@pytest.mark.slow
@pytest.mark.parametrize("model", ["attention", "lstm", "gru", "gru+additive"])
def test_tiny_run_on_the_incident_reports(tmp_path, model):
    name, _, extra = model.partition("+")
    args = [a for a in BUDGET if name != "attention" or a not in RNN_ONLY]
    if extra:
        args.append("model.additive_attention=true")
    out = run_cli("run", "task=summarization", "task.dataset=reports",
                  "task.reports_sizes={train:200,val:10,test:12}", *args, f"model={name}",
                  f"results_dir={tmp_path}", f"cache_dir={tmp_path / 'c'}")
    assert out.returncode == 0, out.stderr
    (rec,) = read_records(tmp_path)
    check_summary_record(rec, 12)
    if name == "attention":
        example = json.dumps(rec.get("attention_example"))
        assert example != "null"


@pytest.mark.slow
def test_tiny_run_on_a_jsonl_folder(tmp_path):
    root = tmp_path / "mine"
    root.mkdir()
    for split, count in (("train", 60), ("validation", 6), ("test", 5)):
        lines = [json.dumps({"article": f"item {i} is about topic {i % 4} and more words follow here",
                             "title": [f"topic {i % 4}", f"about topic {i % 4}"]}) for i in range(count)]
        (root / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    out = run_cli("run", "task=summarization", "task.dataset=jsonl", f"task.root={root}",
                  "task.document_key=article", "task.summary_key=title", "task.vocab_size=40",
                  *[a for a in BUDGET if not a.startswith("task.vocab_size")], "model=lstm",
                  "trainer.max_tokens=200", f"results_dir={tmp_path / 'r'}", f"cache_dir={tmp_path / 'c'}")
    assert out.returncode == 0, out.stderr
    (rec,) = read_records(tmp_path / "r")
    check_summary_record(rec, 5)
    assert rec["data"]["references_per_example"]["test"] == 2
    batching = rec["data"]["batching"]  # 200 positions hold fewer of these than batch_size 16
    assert batching["max_tokens"] == 200 and batching["batches_per_epoch"] > 60 // 16 + 1


def test_aeslc_splits_train_on_the_subject_and_score_against_the_annotations(tmp_path):
    root = tmp_path / "data" / "aeslc" / "enron_subject_line"
    for folder, count in (("train", 12), ("dev", 3), ("test", 3)):
        (root / folder).mkdir(parents=True)
        for i in range(count):
            notes = "" if folder == "train" else "".join(f"@ann{k}\nnote {k} of {i}\n\n" for k in range(3))
            (root / folder / f"test-only_{i}.subject").write_text(
                f"Body of {folder} email {i}\nsecond line\n\n@subject\nRe: deal {i}\n\n{notes}")
    summaries = SummarizationTask("summarization", "aeslc", str(tmp_path / "data"), str(tmp_path / "c"),
                                  vocab_size=60)
    splits = summaries.load(0)
    assert splits.info["sizes"] == {"train": 12, "val": 3, "test": 3}
    assert splits.train.tgt_text[0] == "Re: deal 0" and splits.train.references[0] == ["Re: deal 0"]
    assert splits.test.tgt_text[1] == "Re: deal 1"  # the loss: the sender's subject
    # ROUGE: against the annotators' lines
    assert splits.test.references[1] == ["note 0 of 1", "note 1 of 1", "note 2 of 1"]
    assert splits.info["references_per_example"] == {"train": 1, "val": 3, "test": 3}
