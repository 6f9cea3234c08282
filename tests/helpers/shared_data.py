"""Where the optional third-party data lives (never copied into the repository), and readers for it.

Tests using it skip cleanly when the folder or a file is absent. Override the folder with
CONCORD_SHARED_DATA.
"""

import csv
import json
import os
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from annotation import agreement

ROOT = Path(__file__).resolve().parents[2]  # the project folder
DATA_DIR = Path(os.environ.get("CONCORD_SHARED_DATA", ROOT.parent / "shared" / "data"))
PANDALM_LABELS = DATA_DIR / "pandalm_testset_labels.csv"
PANDALM_TESTSET = DATA_DIR / "pandalm_testset-v1.json"
MT_BENCH = DATA_DIR / "mt_bench_human_judgments_turn1.jsonl"
MT_BENCH_GPT4 = DATA_DIR / "mt_bench" / "judgments" / "mt_bench_gpt4_pair_turn1.jsonl"

# PandaLM's labels: 0 = tie, 1 = response1 better, 2 = response2 better -> Concord's choices.
PANDALM_CHOICE = {"0": "tie", "1": "a", "2": "b"}


def require(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"third-party data {path.name} not present in {path.parent}")
    return path


def pandalm_labels() -> list[dict[str, str]]:
    """999 rows: idx, cmp_key, annotator1..3 (Wang et al., PandaLM, ICLR 2024; Apache-2.0)."""
    with require(PANDALM_LABELS).open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def mt_bench_votes() -> list[dict[str, object]]:
    """1,689 expert votes on MT-Bench turn 1 (Zheng et al., NeurIPS 2023; CC-BY-4.0)."""
    with require(MT_BENCH).open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def mt_bench_gpt4_verdicts() -> list[dict[str, object]]:
    """GPT-4's 910 released turn-1 pairwise verdicts on the voted comparisons (CC-BY-4.0)."""
    with require(MT_BENCH_GPT4).open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


# --- The data sets as judgement tables (agreement.JudgementTable) ----------------------------------

CODE = {name: code for code, name in enumerate(agreement.CHOICES)}


def pandalm_table() -> agreement.JudgementTable:
    rows = pandalm_labels()
    labels = np.array(
        [[CODE[PANDALM_CHOICE[row[f"annotator{k}"]]] for k in (1, 2, 3)] for row in rows]
    )
    return agreement.JudgementTable(
        item=np.repeat(np.arange(len(rows)), 3),
        annotator=np.tile(np.arange(3), len(rows)),
        choice=labels.ravel(),
        n_items=len(rows),
        n_annotators=3,
    )


def mt_bench_table() -> tuple[agreement.JudgementTable, list[str]]:
    """Items are (question, unordered model pair); a vote for the alphabetically later model is "b".
    One judge voted twice on one item (both orientations): the first vote is kept."""
    items: dict[tuple, int] = {}
    judges: dict[str, int] = {}
    seen: set[tuple[int, int]] = set()
    rows = defaultdict(list)
    for vote in mt_bench_votes():
        first, second, winner = vote["model_a"], vote["model_b"], vote["winner"]
        if first > second:
            first, second = second, first
            winner = {"model_a": "model_b", "model_b": "model_a"}.get(winner, winner)
        item = items.setdefault((vote["question_id"], first, second), len(items))
        judge = judges.setdefault(vote["judge"], len(judges))
        if (item, judge) in seen:
            continue
        seen.add((item, judge))
        rows["item"].append(item)
        rows["annotator"].append(judge)
        rows["choice"].append({"model_a": "a", "model_b": "b", "tie": "tie"}[winner])
    table = agreement.JudgementTable(
        item=np.array(rows["item"]),
        annotator=np.array(rows["annotator"]),
        choice=np.array([CODE[c] for c in rows["choice"]]),
        n_items=len(items),
        n_annotators=len(judges),
    )
    return table, list(judges)
