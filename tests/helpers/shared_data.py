"""Where the optional third-party data lives (never copied into the repository), and readers for it.

Tests using it skip cleanly when the folder or a file is absent. Override the folder with
CONCORD_SHARED_DATA.
"""

import csv
import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
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
