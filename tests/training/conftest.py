"""The tiny models and data of tests/helpers/tiny_models.py as fixtures for the training tests, and
small preference and prompt files."""

from pathlib import Path

import pytest

from tests.helpers.tiny_models import (  # noqa: F401 (fixtures)
    PAIRS,
    engine_llama_dir,
    tiny_bert_dir,
    tiny_llama_dir,
    tiny_reward_dir,
    tiny_tokenizer_dir,
    write_jsonl,
)
from tests.helpers.worker import stack  # noqa: F401 (fixture)


@pytest.fixture
def pairs_file(tmp_path) -> Path:
    """8 TRL-style preference pairs."""
    rows = [{"prompt": p, "chosen": c, "rejected": r} for p, c, r in PAIRS]
    return write_jsonl(tmp_path / "pairs.jsonl", rows)


@pytest.fixture
def prompts_file(tmp_path) -> Path:
    return write_jsonl(tmp_path / "prompts.jsonl", [{"prompt": p} for p, _, _ in PAIRS])
