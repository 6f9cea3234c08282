"""GRPO's group advantages, clipped objective, loss normalisations and dynamic sampling, against
values worked out by hand."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from training.algorithms.grpo import dynamic_sampling, group_advantages, grpo_loss


def test_group_advantages_divide_by_the_groups_sample_std():
    """Group [0, 0, 0, 1]: mean 0.25, deviations (-0.25 x3, 0.75), sample variance
    (3 * 0.0625 + 0.5625) / 3 = 0.25, std 0.5, so A = (-0.5, -0.5, -0.5, 1.5). Group [1, 0]: mean 0.5,
    sample std sqrt(0.5), A = +-0.5 / 0.7071068 = +-0.7071068."""
    advantages = group_advantages(torch.tensor([[0.0, 0.0, 0.0, 1.0]]), eps=1e-8)
    assert advantages[0].tolist() == pytest.approx([-0.5, -0.5, -0.5, 1.5], abs=1e-6)
    pair = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), group_size=2, eps=1e-8)
    root_half = math.sqrt(0.5)
    assert pair.tolist() == pytest.approx([root_half, -root_half, -root_half, root_half], abs=1e-6)


def test_group_advantages_default_eps_is_trls():
    """With TRL's eps 1e-4 the group [0, 0, 0, 1] gets 1.5 * 0.5 / 0.5001 = 1.4997."""
    advantages = group_advantages(torch.tensor([0.0, 0.0, 0.0, 1.0]), group_size=4)
    assert advantages[3].item() == pytest.approx(0.75 / 0.5001, abs=1e-6)


def test_group_advantages_unscaled_is_the_centred_reward():
    """Dr. GRPO (scale "none"): only the group mean is removed."""
    advantages = group_advantages(torch.tensor([[0.0, 0.0, 0.0, 1.0]]), scale="none")
    assert advantages[0].tolist() == pytest.approx([-0.25, -0.25, -0.25, 0.75], abs=1e-7)


def test_group_advantages_batch_scale_uses_the_std_of_all_rewards():
    """Rewards (0, 0, 0, 1 | 1, 1, 1, 1): batch mean 0.625, sample variance
    (3 * 0.625^2 + 5 * 0.375^2) / 7 = 1.875 / 7 = 0.2678571, std 0.5175492; the first group's centred
    rewards (-0.25, 0.75) become -0.4830459 and 1.4491377, the flat group stays 0."""
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    advantages = group_advantages(rewards, scale="batch", eps=1e-8)
    assert advantages[0].tolist() == pytest.approx([-0.4830459] * 3 + [1.4491377], abs=1e-6)
    assert advantages[1].tolist() == [0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_groups_of_equal_rewards_get_zero_advantages(scale):
    """All-equal groups carry no signal under any scale: exactly 0, no division by a zero std."""
    rewards = torch.tensor([[2.0, 2.0, 2.0], [-1.0, -1.0, -1.0]])
    assert group_advantages(rewards, scale=scale).tolist() == [[0.0] * 3] * 2


def test_group_advantages_sum_to_zero_per_group_and_keep_the_shape():
    """Every group's advantages sum to zero; flat [P * G] rewards give flat advantages."""
    rewards = torch.randn(12, generator=torch.Generator().manual_seed(0))
    advantages = group_advantages(rewards, group_size=4)
    assert advantages.shape == (12,)
    assert advantages.view(3, 4).sum(dim=1).abs().max().item() < 1e-5


@pytest.mark.parametrize(
    ("rewards", "group_size", "message"),
    [
        (torch.zeros(6), None, "need group_size"),
        (torch.zeros(6), 4, "do not split"),
        (torch.zeros(3, 1), None, "at least 2 samples"),
        (torch.zeros(2, 3), 2, "disagrees"),
        (torch.zeros(2, 2, 2), None, r"\[P \* G\] or \[P, G\]"),
    ],
)
def test_group_advantages_reject_bad_shapes(rewards, group_size, message):
    with pytest.raises(ValueError, match=message):
        group_advantages(rewards, group_size)


def test_group_advantages_reject_an_unknown_scale():
    with pytest.raises(ValueError, match="scale must be one of"):
        group_advantages(torch.zeros(2, 2), scale="rank")


# Two sequences at ratio 1: sequence 0 has advantage +1 on 2 tokens, sequence 1 advantage -1 on
# 1 token (T = 3). Per-token losses are -A: (-1, -1, pad) and (+1, pad, pad).
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
ADVANTAGES = torch.tensor([1.0, -1.0])


@pytest.mark.parametrize(
    ("loss_norm", "max_len", "expected"),
    [
        # Per-sequence means -1 and +1, then their mean: 0.
        ("sequence", None, 0.0),
        # (-1 - 1 + 1) over 3 tokens.
        ("token", None, -1 / 3),
        # (-1 - 1 + 1) over B * T = 2 * 3, or B * max_len = 2 * 4.
        ("constant", None, -1 / 6),
        ("constant", 4, -1 / 8),
    ],
)
def test_the_three_loss_normalisations(loss_norm, max_len, expected):
    logprobs = torch.zeros(2, 3)
    loss, _ = grpo_loss(logprobs, logprobs, ADVANTAGES, MASK, loss_norm=loss_norm, max_len=max_len)
    assert loss.item() == pytest.approx(expected, abs=1e-7)


@pytest.mark.parametrize(
    ("advantage", "ratio", "eps_high", "expected_loss", "low", "high"),
    [
        # A > 0, rho 1.5 above 1 + 0.2: the clipped term 1.2 is the smaller gain.
        (1.0, 1.5, None, -1.2, 0.0, 1.0),
        # Clip-higher lets it rise to 1 + 0.28.
        (1.0, 1.5, 0.28, -1.28, 0.0, 1.0),
        # A < 0, rho 0.5 below 1 - 0.2: min(-0.5, -0.8) = -0.8, loss 0.8, the lower clip.
        (-1.0, 0.5, None, 0.8, 1.0, 0.0),
        # A < 0, rho 1.5: min(-1.5, -1.2) = -1.5; a worse action is never clipped from above.
        (-1.0, 1.5, None, 1.5, 0.0, 0.0),
    ],
)
def test_asymmetric_clipping(advantage, ratio, eps_high, expected_loss, low, high):
    old = torch.zeros(1, 1)
    new = torch.full((1, 1), math.log(ratio))
    loss, stats = grpo_loss(
        new, old, torch.tensor([advantage]), torch.ones(1, 1), eps_high=eps_high
    )
    assert loss.item() == pytest.approx(expected_loss, abs=1e-6)
    assert stats["clip_fraction_low"].item() == low
    assert stats["clip_fraction_high"].item() == high
    assert stats["clip_fraction"].item() == low + high


def test_clipped_tokens_get_no_gradient_and_others_minus_advantage_over_tokens():
    """Token 0 (rho 1.5, A 1) is clipped: gradient 0. Token 1 (rho 1, A 1): d(-rho A)/dlogp = -1, over
    the 2 tokens of the sequence: -0.5."""
    new = torch.tensor([[math.log(1.5), 0.0]], requires_grad=True)
    loss, _ = grpo_loss(new, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2))
    loss.backward()
    assert new.grad[0].tolist() == pytest.approx([0.0, -0.5], abs=1e-7)


def test_approx_kl_is_k3_of_the_old_policy():
    """rho 1.5: (rho - 1) - log rho = 0.5 - 0.4054651 = 0.0945349."""
    new = torch.full((1, 1), math.log(1.5))
    _, stats = grpo_loss(new, torch.zeros(1, 1), torch.tensor([1.0]), torch.ones(1, 1))
    assert stats["approx_kl"].item() == pytest.approx(0.0945349, abs=1e-6)
    assert stats["ratio_mean"].item() == pytest.approx(1.5, abs=1e-6)


def test_k3_kl_to_the_reference_with_a_coefficient():
    """pi_ref / pi = 2 on the one token: k3 = (2 - 1) - ln 2 = 0.3068528; with A 0 the loss is
    0.1 * 0.3068528. With coefficient 0 the term is gone but the KL is still reported."""
    logprobs = torch.zeros(1, 1)
    ref = torch.full((1, 1), math.log(2.0))
    args = (logprobs, logprobs, torch.tensor([0.0]), torch.ones(1, 1))
    loss, stats = grpo_loss(*args, ref_logprobs=ref, kl_coef=0.1)
    assert loss.item() == pytest.approx(0.03068528, abs=1e-7)
    assert stats["ref_kl"].item() == pytest.approx(0.3068528, abs=1e-6)
    free, free_stats = grpo_loss(*args, ref_logprobs=ref, kl_coef=0.0)
    assert free.item() == 0.0
    assert free_stats["ref_kl"].item() == pytest.approx(0.3068528, abs=1e-6)


def test_no_reference_is_needed_without_a_kl_term():
    """kl_coef 0 (the default) and no ref_logprobs: a loss, and no ref_kl stat."""
    logprobs = torch.zeros(1, 2)
    loss, stats = grpo_loss(logprobs, logprobs, torch.tensor([1.0]), torch.ones(1, 2))
    assert loss.item() == pytest.approx(-1.0)
    assert "ref_kl" not in stats


def test_kl_coefficient_without_reference_is_an_error():
    logprobs = torch.zeros(1, 1)
    with pytest.raises(ValueError, match="needs ref_logprobs"):
        grpo_loss(logprobs, logprobs, torch.tensor([1.0]), torch.ones(1, 1), kl_coef=0.04)


@pytest.mark.parametrize("loss_norm", ["sequence", "token", "constant"])
def test_padding_changes_nothing(loss_norm):
    """Garbage (even NaN) in the padded positions of every input leaves loss and stats as they were."""
    generator = torch.Generator().manual_seed(1)
    logprobs, old, ref = (-torch.rand(2, 3, generator=generator) for _ in range(3))
    advantages = torch.randn(2, 3, generator=generator)
    clean = grpo_loss(
        logprobs, old, advantages, MASK, ref_logprobs=ref, kl_coef=0.1, loss_norm=loss_norm
    )
    pad = MASK == 0
    dirty = [t.masked_fill(pad, float("nan")) for t in (logprobs, old, advantages, ref)]
    noisy = grpo_loss(
        dirty[0], dirty[1], dirty[2], MASK, ref_logprobs=dirty[3], kl_coef=0.1, loss_norm=loss_norm
    )
    assert noisy[0].item() == pytest.approx(clean[0].item(), abs=1e-7)
    for key, value in clean[1].items():
        assert noisy[1][key].item() == pytest.approx(value.item(), abs=1e-7)


@pytest.mark.parametrize(
    ("loss_norm", "denominator"), [("sequence", 4.0), ("token", None), ("constant", 4.0 * 3)]
)
def test_micro_batches_with_the_full_denominator_add_up_to_the_full_batch(loss_norm, denominator):
    """Split 4 sequences into 2 micro-batches of 2; with the whole batch's divisor (4 sequences, its
    token count, or 4 * T) the two losses sum to the full-batch loss."""
    generator = torch.Generator().manual_seed(2)
    logprobs, old = (-torch.rand(4, 3, generator=generator) for _ in range(2))
    advantages = torch.randn(4, generator=generator)
    mask = torch.tensor([[1.0, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1]])
    full, _ = grpo_loss(logprobs, old, advantages, mask, loss_norm=loss_norm)
    divisor = float(mask.sum()) if denominator is None else denominator
    parts = [
        grpo_loss(
            logprobs[rows],
            old[rows],
            advantages[rows],
            mask[rows],
            loss_norm=loss_norm,
            denominator=divisor,
        )[0]
        for rows in (slice(0, 2), slice(2, 4))
    ]
    assert (parts[0] + parts[1]).item() == pytest.approx(full.item(), abs=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"eps_low": 0.0}, "eps_low"),
        ({"eps_high": -0.1}, "eps_high"),
        ({"kl_coef": -1.0}, "kl_coef"),
        ({"loss_norm": "batch"}, "loss_norm"),
        ({"denominator": 0.0}, "denominator"),
        ({"loss_norm": "constant", "max_len": 1}, "max_len"),
    ],
)
def test_bad_settings_are_rejected(kwargs, message):
    logprobs = torch.zeros(1, 2)
    with pytest.raises(ValueError, match=message):
        grpo_loss(logprobs, logprobs, torch.tensor([1.0]), torch.ones(1, 2), **kwargs)


def test_bad_shapes_are_rejected():
    logprobs = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="equal"):
        grpo_loss(logprobs, torch.zeros(2, 2), torch.zeros(2), torch.ones(2, 3))
    with pytest.raises(ValueError, match="advantages"):
        grpo_loss(logprobs, logprobs, torch.zeros(3), torch.ones(2, 3))


def test_dynamic_sampling_flags_flat_groups_and_counts_them():
    """Groups (1, 1), (0, 1), (0, 0): only the middle one has a spread; 2 dropped, 1 kept."""
    result = dynamic_sampling(torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0]), group_size=2)
    assert result.keep_groups.tolist() == [False, True, False]
    assert result.keep_samples.tolist() == [False, False, True, True, False, False]
    assert (result.n_kept, result.n_dropped) == (1, 2)


def test_dynamic_sampling_tolerance():
    """A spread of 1e-9 is flat under atol 1e-6 and a signal under atol 0."""
    rewards = torch.tensor([[1.0, 1.0 + 1e-9]], dtype=torch.float64)
    assert dynamic_sampling(rewards, atol=1e-6).n_dropped == 1
    assert dynamic_sampling(rewards).n_dropped == 0
    with pytest.raises(ValueError, match="atol"):
        dynamic_sampling(rewards, atol=-1.0)


@pytest.mark.parametrize(
    ("loss_norm", "trl_loss_type"),
    [("sequence", "grpo"), ("token", "dapo"), ("constant", "dr_grpo")],
)
def test_matches_trls_grpo_loss_formulas(loss_norm, trl_loss_type):
    """TRL's GRPOTrainer: coef_1 = exp(logp - old), coef_2 = clamp(coef_1, 1 - eps_low, 1 + eps_high),
    per-token -min(coef_1 A, coef_2 A) + beta * k3, reduced per its loss_type ("grpo": per-sequence
    means then their mean; "dapo": over all tokens; "dr_grpo": / (B * max_completion_length))."""
    generator = torch.Generator().manual_seed(4)
    logprobs, old, ref = (-2 * torch.rand(3, 5, generator=generator) for _ in range(3))
    advantages = torch.randn(3, generator=generator)
    mask = torch.tensor([[1.0, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]])
    ours, _ = grpo_loss(
        logprobs,
        old,
        advantages,
        mask,
        eps_low=0.2,
        eps_high=0.28,
        ref_logprobs=ref,
        kl_coef=0.04,
        loss_norm=loss_norm,
        max_len=8,
    )
    coef_1 = torch.exp(logprobs - old)
    coef_2 = torch.clamp(coef_1, 1 - 0.2, 1 + 0.28)
    a = advantages.unsqueeze(1)
    per_token_kl = torch.exp(ref - logprobs) - (ref - logprobs) - 1
    per_token = -torch.min(coef_1 * a, coef_2 * a) + 0.04 * per_token_kl
    if trl_loss_type == "grpo":
        trl = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    elif trl_loss_type == "dapo":
        trl = (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    else:
        trl = (per_token * mask).sum() / (3 * 8)
    assert ours.item() == pytest.approx(trl.item(), abs=1e-6)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), groups=st.integers(1, 4), size=st.integers(2, 6))
def test_group_advantages_ignore_a_shift_per_group_and_scale_with_unscaled_rewards(
    seed, groups, size
):
    """Adding a constant to one group's rewards changes none of its advantages (only differences
    within a group count); without std scaling, multiplying rewards by 3 multiplies advantages by 3."""
    generator = torch.Generator().manual_seed(seed)
    rewards = torch.randn(groups, size, generator=generator, dtype=torch.float64)
    shifts = torch.randn(groups, 1, generator=generator, dtype=torch.float64)
    base = group_advantages(rewards)
    assert torch.allclose(group_advantages(rewards + shifts), base, atol=1e-9)
    assert torch.allclose(
        group_advantages(3 * rewards, scale="none"), 3 * group_advantages(rewards, scale="none")
    )
