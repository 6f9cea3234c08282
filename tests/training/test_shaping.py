"""Reward shaping and EOS handling by hand."""

import pytest
import torch

from training.algorithms import (
    RewardNormalizer,
    length_penalty,
    mask_after_first_eos,
    missing_eos_penalty,
    verbosity_penalty,
)


def test_length_penalty_only_beyond_the_base_length():
    """coef 0.01, base 256: 100 tokens cost nothing, 300 tokens cost 0.01 * 44 = 0.44."""
    got = length_penalty(torch.tensor([1.0, 1.0]), torch.tensor([100, 300]))
    assert torch.allclose(got, torch.tensor([1.0, 0.56]))


def test_missing_eos_penalty():
    got = missing_eos_penalty(torch.tensor([1.0, 1.0]), torch.tensor([True, False]), penalty=1.0)
    assert got.tolist() == [1.0, 0.0]


def test_verbosity_penalty():
    """reward 2 above threshold 1 by 1; response 30 tokens for a 10-token prompt: 1 * (3 - 1)^2 = 4.
    A reward under the threshold is never taxed."""
    got = verbosity_penalty(
        torch.tensor([2.0, 0.5]), torch.tensor([30, 30]), torch.tensor([10, 10]), threshold=1.0
    )
    assert got.tolist() == [4.0, 0.0]


def test_reward_normalizer_maps_the_reference_range_and_clamps():
    """Fitted on [-2, 0, 2] into [0.1, 1.0]: -2 -> 0.1, 0 -> 0.55, 2 -> 1.0, 4 -> 1.0 (clamped)."""
    normalizer = RewardNormalizer.fit(torch.tensor([-2.0, 0.0, 2.0]))
    got = normalizer(torch.tensor([-2.0, 0.0, 2.0, 4.0]))
    assert torch.allclose(got, torch.tensor([0.1, 0.55, 1.0, 1.0]))


def test_reward_normalizer_rejects_a_constant_reference():
    with pytest.raises(ValueError, match="reference_min"):
        RewardNormalizer.fit(torch.tensor([1.0, 1.0]))


def test_mask_after_first_eos():
    """EOS id 2. Row 0 keeps [5, 2] and drops what follows; row 1 never emits EOS; row 2's EOS sits on
    padding, so it does not count as finished."""
    tokens = torch.tensor([[5, 2, 7, 2], [5, 6, 7, 8], [5, 6, 7, 2]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 0]])
    new_mask, finished = mask_after_first_eos(tokens, mask, eos_token_id=2)
    assert new_mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0]]
    assert finished.tolist() == [True, False, False]
