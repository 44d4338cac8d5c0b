"""Scores published for the datasets the suite runs, to place the suite's own beside them.

Each entry names its source, the split it was measured on, and its scores by the key a run
records them under (the test metric's name, or a key of ``test_details``), so the report can set
the suite's models beside it without knowing the task. Published scores were made with other
models, budgets and tooling: a row here is a landmark for scale, never a comparison the report
draws a verdict from.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PublishedScore:
    dataset: str  # the task's dataset, as runs record it (``task.dataset``)
    model: str
    source: str
    scores: dict[str, float]  # by recorded key: rouge1, rouge2, rougeL, bleu, ...
    note: str = ""


PUBLISHED: tuple[PublishedScore, ...] = (
    PublishedScore(
        "aeslc", "Multi-Stage Extractor/Abstractor (the dataset's paper, its best model)",
        "Zhang and Tetreault 2019, ACL (P19-1043), test set",
        {"rouge1": 23.67, "rouge2": 10.29, "rougeL": 23.44},
        note="trained to convergence with an extractor, an abstractor and reinforcement learning; "
             "ROUGE F1 x100 against the annotated subject lines"),
)


def published_for(dataset: str) -> list[PublishedScore]:
    return [p for p in PUBLISHED if p.dataset == dataset]
