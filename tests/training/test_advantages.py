"""GAE, leave-one-out and moving-baseline advantages against hand-derived values."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from training.algorithms import MovingAverageBaseline, gae, rloo_advantages


def test_gae_hand_values():
    """gamma 1, lambda 0.95, rewards [0, 0, 1], values [0.5, 0.6, 0.7]:
    t=2: delta = 1 - 0.7 = 0.3 (nothing after the last token), A = 0.3
    t=1: delta = 0 + 0.7 - 0.6 = 0.1, A = 0.1 + 0.95 * 0.3 = 0.385
    t=0: delta = 0 + 0.6 - 0.5 = 0.1, A = 0.1 + 0.95 * 0.385 = 0.46575
    returns = A + V = [0.96575, 0.985, 1.0]."""
    adv, ret = gae(
        torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[0.5, 0.6, 0.7]]), torch.ones(1, 3)
    )
    assert torch.allclose(adv, torch.tensor([[0.46575, 0.385, 0.3]]), atol=1e-6)
    assert torch.allclose(ret, torch.tensor([[0.96575, 0.985, 1.0]]), atol=1e-6)


def test_gae_right_padding_ends_the_episode():
    """Row of 2 valid tokens then padding with garbage reward 5 and value 9: the value after the last
    valid token counts as 0. t=1: A = 1 - 0.7 = 0.3; t=0: A = (0.7 - 0.5) + 0.95 * 0.3 = 0.485;
    padding comes out 0."""
    adv, ret = gae(
        torch.tensor([[0.0, 1.0, 5.0]]),
        torch.tensor([[0.5, 0.7, 9.0]]),
        torch.tensor([[1.0, 1.0, 0.0]]),
    )
    assert torch.allclose(adv, torch.tensor([[0.485, 0.3, 0.0]]), atol=1e-6)
    assert torch.allclose(ret, torch.tensor([[0.985, 1.0, 0.0]]), atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), length=st.integers(1, 6))
def test_gae_with_lambda_one_is_reward_to_go_minus_value(seed, length):
    """gamma = lambda = 1 telescopes to the Monte-Carlo advantage: sum_{s >= t} r_s - V_t."""
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.randn(2, 7, generator=gen, dtype=torch.float64)
    values = torch.randn(2, 7, generator=gen, dtype=torch.float64)
    mask = torch.zeros(2, 7, dtype=torch.float64)
    mask[:, :length] = 1
    adv, _ = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    kept = rewards * mask
    to_go = kept.flip(1).cumsum(1).flip(1)
    assert torch.allclose(adv, (to_go - values) * mask, atol=1e-9)


def test_rloo_hand_values():
    """K = 4 rewards [1, 2, 3, 6]: baseline of sample 0 = (2 + 3 + 6) / 3 = 11/3, so A0 = -8/3;
    in general A = 4/3 (r - 3): [-8/3, -4/3, 0, 4]."""
    got = rloo_advantages(torch.tensor([[1.0, 2.0, 3.0, 6.0]]))
    assert torch.allclose(got, torch.tensor([[-8 / 3, -4 / 3, 0.0, 4.0]]), atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(
    rewards=st.lists(
        st.lists(st.floats(-100, 100, allow_nan=False), min_size=4, max_size=4),
        min_size=1,
        max_size=5,
    )
)
def test_rloo_advantages_sum_to_zero_per_prompt(rewards):
    """Each prompt's K advantages sum to zero: sum_i (r_i - mean_{j != i} r_j) = S - (K - 1) S/(K - 1)."""
    got = rloo_advantages(torch.tensor(rewards, dtype=torch.float64))
    assert torch.allclose(got.sum(dim=1), torch.zeros(len(rewards), dtype=torch.float64), atol=1e-9)


def test_rloo_needs_two_samples():
    with pytest.raises(ValueError, match="K >= 2"):
        rloo_advantages(torch.tensor([[1.0], [2.0]]))


def test_moving_baseline_uses_the_baseline_from_before_the_batch():
    """decay 0.9. Batch [1, 3]: no history, baseline = its mean 2 -> [-1, 1]. Batch [4, 6]: baseline
    still 2 -> [2, 4]; afterwards b = 0.9 * 2 + 0.1 * 5 = 2.3."""
    baseline = MovingAverageBaseline(decay=0.9)
    assert baseline.advantages(torch.tensor([1.0, 3.0])).tolist() == [-1.0, 1.0]
    assert baseline.advantages(torch.tensor([4.0, 6.0])).tolist() == [2.0, 4.0]
    assert baseline.value == pytest.approx(2.3)
    restored = MovingAverageBaseline()
    restored.load_state_dict(baseline.state_dict())
    assert restored.value == pytest.approx(2.3) and restored.decay == 0.9
