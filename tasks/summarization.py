"""Summarisation: AESLC email bodies -> subject lines (data root), generated incident reports ->
headlines (offline), or your own ``jsonl`` pairs.

The encoder-decoder plumbing (tokenizer, pairs, decoding, loss) is ``tasks.text_pairs``'s,
shared with translation. Scores: ROUGE-1, ROUGE-2 and ROUGE-L F1 from Google's
``rouge-score`` package (Porter stemming on), ROUGE-L the checkpoint metric. With several
references per example (AESLC's three annotated subject lines), each example is scored against
the reference it matches best, per ROUGE type (``RougeScorer.score_multi``), and the corpus
score is the mean over examples, times 100.
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import Annotated, Literal

import numpy as np

from bench.data.files import data_root, files_fingerprint, rule_fingerprint, verify_files
from bench.errors import BenchError
from bench.task import SPLITS, split_sizes
from models.constraints import AT_LEAST_1, FRACTION, NON_NEGATIVE, Range
from tasks.text_pairs import DISJOINT_RULE, TextPairs, TextPairTask

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")
AESLC_SPLITS = {"train": "train", "val": "dev", "test": "test"}
JSONL_SPLITS = {"train": "train", "val": "validation", "test": "test"}


class SummarizationTask(TextPairTask):
    metric_name = "rougeL"

    def __init__(
        self, name: str, dataset: str, data_dir: str | None, cache_dir: str, root: str | None = None,
        document_key: str = "document", summary_key: str = "summary",
        vocab_size: Annotated[int, Range(ge=8)] = 8000, sp_model_type: Literal["unigram", "bpe"] = "unigram",
        lowercase: bool = False, max_source_tokens: Annotated[int, AT_LEAST_1] = 256,
        max_target_tokens: Annotated[int, AT_LEAST_1] = 32,
        reports_sizes: dict[str, Annotated[int, AT_LEAST_1]] | None = None,
        reports_seed: Annotated[int, NON_NEGATIVE] = 0, label_smoothing: Annotated[float, FRACTION] = 0.1,
        beam_size: Annotated[int, AT_LEAST_1] = 4, length_penalty: Annotated[float, NON_NEGATIVE] = 0.6,
        val_decoding: Literal["greedy", "beam"] = "greedy",
        length_buckets: tuple[Annotated[int, AT_LEAST_1], ...] = (64, 128, 255),
        num_samples: Annotated[int, NON_NEGATIVE] = 5,
    ) -> None:
        super().__init__(name, dataset, data_dir, cache_dir, vocab_size=vocab_size,
                         sp_model_type=sp_model_type, lowercase=lowercase,
                         max_source_tokens=max_source_tokens, max_target_tokens=max_target_tokens,
                         label_smoothing=label_smoothing, beam_size=beam_size,
                         length_penalty=length_penalty, val_decoding=val_decoding,
                         length_buckets=length_buckets, num_samples=num_samples)
        readers = {"aeslc": self._read_aeslc, "reports": self._read_reports, "jsonl": self._read_jsonl}
        if dataset not in readers:
            raise BenchError(f"unknown summarization dataset '{dataset}'; choose one of {', '.join(readers)}")
        if dataset == "jsonl" and not root:
            raise BenchError("task.dataset=jsonl needs task.root=PATH, a folder with train.jsonl, "
                             "validation.jsonl and test.jsonl")
        self._read = readers[dataset]
        self.root, self.document_key, self.summary_key = root, document_key, summary_key
        self.reports_sizes = split_sizes("task.reports_sizes", reports_sizes,
                                         {"train": 6000, "val": 300, "test": 500})
        self.reports_seed = reports_seed
        from rouge_score import rouge_scorer

        self.scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)

    # ------------------------------------------------------------------ data
    def read_pairs(self) -> dict[str, TextPairs]:
        return self._read()

    def tokenizer_stem(self) -> str:
        return f"summarization-{self.dataset}"

    def data_info(self, datasets: dict) -> dict:
        refs = {split: max(len(r) for r in d.references) for split, d in datasets.items()}
        return {"references_per_example": refs,
                "rouge": f"rouge-score {importlib.metadata.version('rouge-score')}, Porter stemmer, "
                         f"F1; several references: the best-matching one per example and ROUGE type"}

    def _read_aeslc(self) -> dict[str, TextPairs]:
        root = data_root(self.data_dir, self.dataset, "aeslc") / "enron_subject_line"
        out = {}
        for split, folder in AESLC_SPLITS.items():
            files = sorted((root / folder).glob("*.subject"))
            if not files:
                raise BenchError(f"dataset 'aeslc': no .subject files in {root / folder}; check data_dir / "
                                 f"BENCH_DATA_DIR or fetch it with 'mhab data download aeslc'")
            verify_files(root.parent, [f"enron_subject_line/{folder}/{f.name}" for f in files], self.dataset)
            emails = [read_aeslc_email(f) for f in files]
            out[split] = TextPairs([e["body"] for e in emails], [e["subject"] for e in emails],
                                   None if split == "train" else [e["annotations"] for e in emails])
        return out

    def _read_reports(self) -> dict[str, TextPairs]:
        return incident_reports(self.reports_sizes, self.reports_seed)

    def reads_files(self) -> bool:
        return self.dataset != "reports"  # the incident reports are generated, each split apart

    def data_fingerprint(self) -> str | None:
        if self.dataset != "jsonl" or not self.root:
            return super().data_fingerprint()
        files = [Path(self.root).expanduser() / f"{name}.jsonl" for name in ("train", "validation", "test")]
        return rule_fingerprint(files_fingerprint([f for f in files if f.is_file()]), DISJOINT_RULE)

    def _read_jsonl(self) -> dict[str, TextPairs]:
        root = Path(self.root)
        return {split: read_jsonl(root / f"{name}.jsonl", self.document_key, self.summary_key)
                for split, name in JSONL_SPLITS.items()}

    def max_decode_length(self, src_lengths) -> int:
        return self.max_target_tokens + 1  # the summary and its end token

    # ------------------------------------------------------------------ scoring
    def _f1(self, hyps: list[str], refs: list[list[str]]) -> dict[str, float]:
        totals = dict.fromkeys(ROUGE_TYPES, 0.0)
        for hyp, targets in zip(hyps, refs, strict=True):
            scores = self.scorer.score_multi(targets, hyp)
            for kind in ROUGE_TYPES:
                totals[kind] += scores[kind].fmeasure
        return {kind: 100 * total / max(len(hyps), 1) for kind, total in totals.items()}

    def score(self, hyps: list[str], refs: list[list[str]], final: bool) -> dict:
        f1 = self._f1(hyps, refs)
        result = {"metric": f1["rougeL"]}
        if final:
            result.update({"rouge1": f1["rouge1"], "rouge2": f1["rouge2"], "rougeL": f1["rougeL"],
                           "rouge_package": f"rouge-score {importlib.metadata.version('rouge-score')}"})
        return result

    def score_subset(self, hyps: list[str], refs: list[list[str]]) -> float:
        return self._f1(hyps, refs)["rougeL"]


def read_aeslc_email(path: Path) -> dict:
    """An AESLC ``.subject`` file: the body, then ``@subject`` and (dev, test) ``@ann0``-``@ann2``,
    each a line of its own followed by its text."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BenchError(f"cannot read {path} ({e}); the file is corrupt, fetch it again") from None
    fields: dict[str, list[str]] = {"body": []}
    current = "body"
    for line in text.splitlines():
        if line.strip() in ("@subject", "@ann0", "@ann1", "@ann2"):
            current = line.strip()[1:]
            fields[current] = []
        else:
            fields[current].append(line)
    if "subject" not in fields:
        raise BenchError(f"{path}: no '@subject' line; an AESLC file is the body, then '@subject' and "
                         f"the subject line")
    join = lambda lines: " ".join(" ".join(lines).split())
    annotations = [join(fields[k]) for k in ("ann0", "ann1", "ann2") if k in fields and join(fields[k])]
    return {"body": join(fields["body"]), "subject": join(fields["subject"]),
            "annotations": annotations or [join(fields["subject"])]}


def read_jsonl(path: Path, document_key: str, summary_key: str) -> TextPairs:
    """One JSON object per line with the document and its summary (a string, or a list of
    reference summaries: the first is trained on, all are scored against)."""
    if not path.is_file():
        raise BenchError(f"jsonl: {path} not found; task.root holds train.jsonl, validation.jsonl and "
                         f"test.jsonl")
    sources, targets, refs = [], [], []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise BenchError(f"{path} line {number} is not JSON ({e.msg}); write one object per "
                                 f"line") from None
            if not isinstance(record, dict):
                raise BenchError(f"{path} line {number} is not a JSON object; write one object per line")
            for key in (document_key, summary_key):
                if key not in record:
                    raise BenchError(f"{path} line {number} has no '{key}' field (it has "
                                     f"{', '.join(record) or 'none'}); set task.document_key / "
                                     f"task.summary_key to your field names")
            summary = record[summary_key]
            summaries = summary if isinstance(summary, list) else [summary]
            if not isinstance(record[document_key], str) or not summaries or \
                    not all(isinstance(s, str) for s in summaries):
                raise BenchError(f"{path} line {number}: '{document_key}' must be a string and "
                                 f"'{summary_key}' a string or a list of strings")
            sources.append(record[document_key])
            targets.append(summaries[0])
            refs.append(summaries)
    if not sources:
        raise BenchError(f"jsonl: {path} holds no examples; the split needs at least one line")
    return TextPairs(sources, targets, refs)


# ---------------------------------------------------------------- the offline corpus
SEVERITIES = ["minor", "moderate", "major", "critical"]
INCIDENTS = ["leak", "fire", "outage", "breach", "delay", "fault", "alarm", "spill", "collapse", "flood"]
PLACES = [f"{kind} {n}" for kind in ("building", "dock", "line", "warehouse", "tower") for n in range(1, 10)]
TEMPLATES = [
    "At {time}, a {severity} {incident} was reported in {place}.",
    "A {severity} {incident} hit {place} at {time}.",
    "A {severity} {incident} in {place} was logged at {time}.",
    "Shortly after {time}, staff noted a {severity} {incident} in {place}.",
]


def incident_reports(sizes: dict[str, int], seed: int) -> dict[str, TextPairs]:
    """Shift reports of 3 to 8 incidents, in time order, whose headline names the one most
    severe incident (exactly one is the most severe): "{severity} {incident} in {place}". The
    key incident is as likely to be last as first, so the summary needs the whole report."""
    rng = np.random.default_rng(seed)
    out = {}
    for split in SPLITS:
        sources, targets = [], []
        for _ in range(sizes[split]):
            count = int(rng.integers(3, 9))
            top = int(rng.integers(1, len(SEVERITIES)))
            levels = [top] + [int(rng.integers(0, top)) for _ in range(count - 1)]
            rng.shuffle(levels)
            minutes = np.sort(rng.choice(24 * 60, size=count, replace=False))
            sentences, headline = [], ""
            for level, minute in zip(levels, minutes, strict=True):
                incident, place = INCIDENTS[rng.integers(len(INCIDENTS))], PLACES[rng.integers(len(PLACES))]
                sentence = TEMPLATES[rng.integers(len(TEMPLATES))].format(
                    time=f"{minute // 60:02d}:{minute % 60:02d}", severity=SEVERITIES[level],
                    incident=incident, place=place)
                sentences.append(sentence)
                if level == top:
                    headline = f"{SEVERITIES[level]} {incident} in {place}"
            sources.append(" ".join(sentences))
            targets.append(headline)
        out[split] = TextPairs(sources, targets)
    return out
