"""PPO's clipped losses by hand, and gradient accumulation with token-count normalisation."""

import math

import pytest
import torch

from training.algorithms import clipped_value_loss, kl_early_stop, ppo_policy_loss


def test_policy_loss_hand_values():
    """eps 0.2; ratios [1.5, 0.5, 1.0], advantages [1, 1, -1]:
    t0: max(-1.5, -1.2) = -1.2 (clipped term active); t1: max(-0.5, -0.8) = -0.5; t2: max(1, 1) = 1.
    loss = (-1.2 - 0.5 + 1) / 3 = -0.7 / 3; clip fraction 1/3;
    approx KL = mean((r - 1) - ln r) = (0.5 - ln 1.5 + (-0.5 - ln 0.5) + 0) / 3 = 0.0958940."""
    ratios = torch.tensor([[1.5, 0.5, 1.0]])
    old = torch.zeros(1, 3)
    loss, stats = ppo_policy_loss(
        ratios.log(), old, torch.tensor([[1.0, 1.0, -1.0]]), torch.ones(1, 3), clip_ratio=0.2
    )
    assert loss.item() == pytest.approx(-0.7 / 3, abs=1e-6)
    assert stats["clip_fraction"].item() == pytest.approx(1 / 3, abs=1e-6)
    expected_kl = (0.5 - math.log(1.5) + (-0.5 - math.log(0.5))) / 3
    assert stats["approx_kl"].item() == pytest.approx(expected_kl, abs=1e-6)


def test_policy_loss_ignores_masked_tokens():
    """A padded token with a huge ratio and advantage changes neither the loss nor the statistics."""
    args = torch.tensor([[0.1, -0.1]]), torch.zeros(1, 2), torch.tensor([[1.0, 2.0]])
    loss, stats = ppo_policy_loss(*args, torch.ones(1, 2))
    padded = [
        torch.cat([a, torch.tensor([[x]])], dim=1)
        for a, x in zip(args, (30.0, 0.0, 1e6), strict=True)
    ]
    loss_padded, stats_padded = ppo_policy_loss(*padded, torch.tensor([[1, 1, 0]]))
    assert loss_padded.item() == pytest.approx(loss.item())
    assert stats_padded["approx_kl"].item() == pytest.approx(stats["approx_kl"].item())


def test_gradient_accumulation_1x8_equals_8x1_with_token_count_normalisation():
    """Eight rows of different lengths: one batch of 8, or 8 micro-batches of 1 each divided by the
    batch's total token count, give the same gradient. The mean of per-micro-batch means does not
    (it weights a 1-token row as much as a 9-token row), which is the bug this API prevents."""
    gen = torch.Generator().manual_seed(0)
    lengths = [1, 9, 3, 7, 2, 8, 5, 4]
    mask = torch.zeros(8, 9)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    old = torch.randn(8, 9, generator=gen, dtype=torch.float64)
    adv = torch.randn(8, 9, generator=gen, dtype=torch.float64)
    logprobs = (old + 0.3 * torch.randn(8, 9, generator=gen, dtype=torch.float64)).requires_grad_()

    full, _ = ppo_policy_loss(logprobs, old, adv, mask)
    (full_grad,) = torch.autograd.grad(full, logprobs)

    total = mask.sum()
    accumulated = torch.zeros_like(logprobs)
    naive = torch.zeros_like(logprobs)
    for row in range(8):
        part = slice(row, row + 1)
        loss, _ = ppo_policy_loss(
            logprobs[part], old[part], adv[part], mask[part], token_count=total
        )
        accumulated += torch.autograd.grad(loss, logprobs)[0]
        mean_loss, _ = ppo_policy_loss(logprobs[part], old[part], adv[part], mask[part])
        naive += torch.autograd.grad(mean_loss / 8, logprobs)[0]
    assert torch.allclose(accumulated, full_grad, atol=1e-12)
    assert not torch.allclose(naive, full_grad, atol=1e-3)


def test_clipped_value_loss_hand_values():
    """clip 0.2; V = [1.0, 0.0], old V = [0.5, 0.5], returns [2.0, 0.0]:
    t0: V_clip = 0.7; max((1 - 2)^2, (0.7 - 2)^2) = 1.69. t1: V_clip = 0.3; max(0, 0.09) = 0.09.
    loss = (1.69 + 0.09) / 2 = 0.89; the clipped error is the larger on both tokens."""
    loss, clip_fraction = clipped_value_loss(
        torch.tensor([[1.0, 0.0]]),
        torch.tensor([[0.5, 0.5]]),
        torch.tensor([[2.0, 0.0]]),
        torch.ones(1, 2),
        clip_range=0.2,
    )
    assert loss.item() == pytest.approx(0.89, abs=1e-6)
    assert clip_fraction.item() == 1.0


def test_early_stop_when_kl_passes_the_limit():
    assert kl_early_stop(0.11, limit=0.1)
    assert not kl_early_stop(0.09, limit=0.1)
    assert not kl_early_stop(5.0, limit=None)
