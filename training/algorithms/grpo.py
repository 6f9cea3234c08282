"""GRPO: group-relative advantages, the clipped ratio objective with its three loss normalisations,
asymmetric clipping, the k3 KL to the reference, and DAPO's dynamic sampling.

Shapes: P prompts, G samples (completions) per prompt, B = P * G sequences, T completion tokens.
Groups are contiguous: sequences [i * G, (i + 1) * G) answer prompt i (the order TRL's sampler and our
generation use). Log-probabilities are of the sampled tokens, float32.

References: Shao et al. 2024 (DeepSeekMath, GRPO, eq. 3 and section 4.1.2); Yu et al. 2025 (DAPO:
clip-higher, dynamic sampling, token-level loss); Liu et al. 2025 ("Understanding R1-Zero-like training",
Dr. GRPO: no std scaling, a constant normaliser).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from training.algorithms.kl import kl_k3
from training.algorithms.logprobs import masked_mean, masked_sum

GRPOLossNorm = Literal["sequence", "token", "constant"]
GRPO_LOSS_NORMS: tuple[str, ...] = ("sequence", "token", "constant")
AdvantageScale = Literal["group", "batch", "none"]
ADVANTAGE_SCALES: tuple[str, ...] = ("group", "batch", "none")


def _as_groups(rewards: Tensor, group_size: int | None) -> Tensor:
    """rewards [P * G] with group_size G, or [P, G] -> [P, G] (a view)."""
    if rewards.dim() == 2:
        if group_size is not None and group_size != rewards.shape[1]:
            raise ValueError(
                f"group_size {group_size} disagrees with rewards of shape {tuple(rewards.shape)}"
            )
        groups = rewards
    elif rewards.dim() == 1:
        if group_size is None:
            raise ValueError("flat rewards [P * G] need group_size")
        if group_size < 1 or rewards.numel() % group_size:
            raise ValueError(
                f"{rewards.numel()} rewards do not split into groups of group_size {group_size}"
            )
        groups = rewards.view(-1, group_size)
    else:
        raise ValueError(f"rewards must be [P * G] or [P, G], got {tuple(rewards.shape)}")
    if groups.shape[1] < 2:
        raise ValueError(f"GRPO needs at least 2 samples per prompt, got {groups.shape[1]}")
    return groups


def group_advantages(
    rewards: Tensor,
    group_size: int | None = None,
    *,
    scale: AdvantageScale = "group",
    eps: float = 1e-4,
) -> Tensor:
    """Group-relative advantages (Shao et al. 2024, section 4.1.2, outcome supervision).

    rewards: [P * G] (then ``group_size`` = G) or [P, G]; the result has the shape of ``rewards``.

        A_i = (r_i - mean_group(r)) / (std + eps)

    ``scale``: ``"group"`` divides by the group's std (GRPO), ``"batch"`` by the std of all B rewards
    (Liu et al. 2025 suggest it is less biased towards too-easy and too-hard prompts), ``"none"`` does
    not divide (Dr. GRPO). The std is the sample std (Bessel-corrected), as in TRL's GRPOTrainer and
    DeepSeekMath's open code; ``eps`` 1e-4 is TRL's. A group of equal rewards gets advantages of
    exactly 0 under every scale, so it contributes no policy gradient (see ``dynamic_sampling``).
    """
    if scale not in ADVANTAGE_SCALES:
        raise ValueError(f"scale must be one of {ADVANTAGE_SCALES}, got {scale!r}")
    if eps <= 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    groups = _as_groups(rewards, group_size)
    groups = groups.to(torch.promote_types(groups.dtype, torch.float32))  # bf16 up, float64 kept
    centred = groups - groups.mean(dim=1, keepdim=True)
    if scale == "group":
        centred = centred / (groups.std(dim=1, keepdim=True) + eps)
    elif scale == "batch":
        centred = centred / (groups.std() + eps)
    return centred.reshape(rewards.shape)


@dataclass(frozen=True)
class DynamicSampling:
    """Which groups carry a learning signal (DAPO, Yu et al. 2025, eq. 11).

    ``keep_groups`` [P] and ``keep_samples`` [P * G] are bool masks (a sample is kept with its group);
    ``n_dropped`` counts the groups whose rewards are all equal, ``n_kept`` the others.
    """

    keep_groups: Tensor
    keep_samples: Tensor
    n_kept: int
    n_dropped: int


def dynamic_sampling(
    rewards: Tensor, group_size: int | None = None, *, atol: float = 0.0
) -> DynamicSampling:
    """Flag the groups whose G rewards are all equal (all right or all wrong): their GRPO advantages
    are 0, so they only dilute the batch. DAPO drops them and samples more prompts until the batch is
    full; the recipe does the resampling, this says which to drop and how many.

    rewards: [P * G] (with ``group_size``) or [P, G]. A group is flat when max - min <= ``atol``.
    """
    if atol < 0:
        raise ValueError(f"atol must be >= 0, got {atol}")
    groups = _as_groups(rewards, group_size)
    spread = groups.max(dim=1).values - groups.min(dim=1).values
    keep_groups = spread > atol
    n_kept = int(keep_groups.sum())
    return DynamicSampling(
        keep_groups=keep_groups,
        keep_samples=keep_groups.repeat_interleave(groups.shape[1]),
        n_kept=n_kept,
        n_dropped=int(keep_groups.numel()) - n_kept,
    )


def grpo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float | None = None,
    ref_logprobs: Tensor | None = None,
    kl_coef: float = 0.0,
    loss_norm: GRPOLossNorm = "token",
    max_len: int | None = None,
    denominator: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The GRPO objective (Shao et al. 2024, eq. 3), negated for minimisation.

    logprobs [B, T] (with grad), old_logprobs [B, T] (the sampling policy; pass ``logprobs.detach()``
    for a single update per batch), advantages [B] (one per sequence, broadcast over its tokens) or
    [B, T], mask [B, T] (1 on completion tokens). Per token, with rho = exp(logprobs - old_logprobs):

        l_t = -min(rho_t A, clip(rho_t, 1 - eps_low, 1 + eps_high) A) + kl_coef * k3_t

    where k3_t = pi_ref/pi - log(pi_ref/pi) - 1 (Schulman 2020; ``training.algorithms.kl.kl_k3``).
    ``eps_high`` > ``eps_low`` is DAPO's clip-higher (eps_high None: symmetric, PPO's clip).
    ``kl_coef`` 0 (this function's default; PIPELINE.md's recipe default is 0.04) drops the KL term:
    then no reference model is needed and ``ref_logprobs`` may be None (if given, its KL is still
    reported). ``loss_norm`` reduces the l_t (default "token", PIPELINE.md's first choice):

    - ``"sequence"`` (GRPO paper): mean over each sequence's tokens, then mean over the B sequences;
      a long completion's tokens weigh less than a short one's.
    - ``"token"`` (DAPO): sum over every token of the batch / number of tokens of the batch.
    - ``"constant"`` (Dr. GRPO): sum over every token / (B * ``max_len``), ``max_len`` the generation
      budget in tokens (default T); no length bias at all.

    ``denominator`` replaces the divisor (sequences for "sequence", tokens for "token", B * max_len
    for "constant") with the whole optimiser batch's, so that micro-batch losses under gradient
    accumulation add up to the full-batch loss exactly.

    Returns (loss scalar, stats); stats are detached masked means over this call's tokens:
    ``clip_fraction_low`` (rho < 1 - eps_low with A < 0: the lower clip is active),
    ``clip_fraction_high`` (rho > 1 + eps_high with A > 0), ``clip_fraction`` (their sum),
    ``approx_kl`` (k3 estimate of KL(pi_old || pi), how far this update moved), ``ratio_mean``, and
    ``ref_kl`` (mean k3 to the reference) when ``ref_logprobs`` is given.
    """
    eps_high = eps_low if eps_high is None else eps_high
    if not 0 < eps_low < 1:
        raise ValueError(f"eps_low must be in (0, 1), got {eps_low}")
    if eps_high <= 0:
        raise ValueError(f"eps_high must be > 0, got {eps_high}")
    if kl_coef < 0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
    if kl_coef > 0 and ref_logprobs is None:
        raise ValueError("kl_coef > 0 needs ref_logprobs (pass kl_coef=0 to train without one)")
    if loss_norm not in GRPO_LOSS_NORMS:
        raise ValueError(f"loss_norm must be one of {GRPO_LOSS_NORMS}, got {loss_norm!r}")
    if denominator is not None and denominator <= 0:
        raise ValueError(f"denominator must be > 0, got {denominator}")
    shapes = {"logprobs": logprobs.shape, "old_logprobs": old_logprobs.shape, "mask": mask.shape}
    if ref_logprobs is not None:
        shapes["ref_logprobs"] = ref_logprobs.shape
    if len(set(shapes.values())) != 1 or logprobs.dim() != 2:
        raise ValueError(
            f"need equal [B, T] shapes, got { ({k: tuple(v) for k, v in shapes.items()}) }"
        )
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    if advantages.shape not in {logprobs.shape, (logprobs.shape[0], 1)}:
        raise ValueError(
            f"advantages must be [B] or [B, T], got {tuple(advantages.shape)} for B, T = "
            f"{tuple(logprobs.shape)}"
        )
    n_seqs, n_steps = logprobs.shape
    if loss_norm == "constant" and max_len is not None and max_len < n_steps:
        raise ValueError(f"max_len {max_len} is shorter than the {n_steps} completion tokens")

    advantages = advantages.float()
    log_ratio = logprobs.float() - old_logprobs.float()
    ratio = torch.exp(log_ratio)
    clipped_ratio = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    per_token = -torch.minimum(ratio * advantages, clipped_ratio * advantages)
    ref_kl = None if ref_logprobs is None else kl_k3(logprobs, ref_logprobs)
    if kl_coef > 0 and ref_kl is not None:
        per_token = per_token + kl_coef * ref_kl

    if loss_norm == "sequence":
        total = masked_mean(per_token, mask, dim=1).sum()
        divisor = float(n_seqs) if denominator is None else denominator
    elif loss_norm == "token":
        total = masked_sum(per_token, mask)
        divisor = denominator if denominator is not None else mask.float().sum().clamp(min=1)
    else:
        total = masked_sum(per_token, mask)
        divisor = float(n_seqs * (max_len or n_steps)) if denominator is None else denominator
    loss = total / divisor

    with torch.no_grad():
        expanded = advantages.expand_as(ratio)
        low = ((ratio < 1 - eps_low) & (expanded < 0)).float()
        high = ((ratio > 1 + eps_high) & (expanded > 0)).float()
        stats = {
            "clip_fraction_low": masked_mean(low, mask),
            "clip_fraction_high": masked_mean(high, mask),
            "clip_fraction": masked_mean(low + high, mask),
            "approx_kl": masked_mean((ratio - 1) - log_ratio, mask),
            "ratio_mean": masked_mean(ratio, mask),
        }
        if ref_kl is not None:
            stats["ref_kl"] = masked_mean(ref_kl, mask)
    return loss, stats
