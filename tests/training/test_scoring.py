"""Scoring with a trained reward model outside the recipes (``training.recipes.reward_scores``, what
monitoring's eval rounds call on the worker)."""

import math

import pytest

from tests.helpers.tiny_models import PAIRS, tiny_llama
from training import recipes


def test_reward_scores_of_responses_with_a_tiny_reward_model(tmp_path, tiny_tokenizer_dir):
    """The worker-side scorer gives one finite reward per (conversation, response), and the same
    response scores the same in any batch."""
    folder = tiny_llama(tmp_path / "rm", tiny_tokenizer_dir, for_classification=True)
    conversations = [[{"role": "user", "content": p}] for p, _, _ in PAIRS[:3]]
    texts = ["Paris.", "Eight.", "Paris."]
    scores = recipes.reward_scores(folder, conversations, texts, batch_size=2)
    assert len(scores) == 3 and all(math.isfinite(s) for s in scores)
    alone = recipes.reward_scores(folder, conversations[:1], texts[:1])
    assert alone[0] == pytest.approx(scores[0], abs=1e-4)
