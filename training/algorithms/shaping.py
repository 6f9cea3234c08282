"""Reward shaping against reward hacking (PIPELINE.md "Reward hacking defences"), and EOS handling.

Shapes: B responses, T response tokens. Rewards are float tensors [B].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


def length_penalty(
    rewards: Tensor, lengths: Tensor, *, coef: float = 0.01, base_length: int = 256
) -> Tensor:
    """reward - coef * max(0, length - base_length); lengths in tokens, [B]."""
    if coef < 0:
        raise ValueError(f"coef must be >= 0, got {coef}")
    excess = (lengths.to(rewards.dtype) - base_length).clamp(min=0)
    return rewards - coef * excess


def missing_eos_penalty(rewards: Tensor, finished: Tensor, *, penalty: float = 1.0) -> Tensor:
    """Subtract ``penalty`` from the reward of every response that never emitted EOS.

    finished: [B] bool, True when the response ended with EOS. Truncated responses would otherwise
    learn that rambling to the length limit is free.
    """
    if penalty < 0:
        raise ValueError(f"penalty must be >= 0, got {penalty}")
    return rewards - penalty * (~finished.bool()).to(rewards.dtype)


def verbosity_penalty(
    rewards: Tensor, response_lengths: Tensor, prompt_lengths: Tensor, *, threshold: float
) -> Tensor:
    """The shaping constraint of PIPELINE.md for verbose exploitation, as a term to subtract:

    max(0, reward - threshold) * (len(response) / len(prompt) - 1)^2

    ``threshold`` is the reward model's mean on the validation set: only rewards above it, earned by
    responses far longer (or shorter) than their prompt, are taxed. Lengths [B] in tokens.
    """
    ratio = response_lengths.to(rewards.dtype) / prompt_lengths.to(rewards.dtype).clamp(min=1)
    return (rewards - threshold).clamp(min=0) * (ratio - 1) ** 2


@dataclass(frozen=True)
class RewardNormalizer:
    """Min-max map of raw rewards into [low, high] (PIPELINE.md default [0.1, 1.0]), fitted once on a
    reference set so the scale does not drift with each batch; values outside the reference range are
    clamped. A positive floor keeps the policy gradient from vanishing on tiny rewards."""

    reference_min: float
    reference_max: float
    low: float = 0.1
    high: float = 1.0

    def __post_init__(self) -> None:
        if not self.low < self.high:
            raise ValueError(f"need low < high, got low={self.low}, high={self.high}")
        if not self.reference_min < self.reference_max:
            raise ValueError(
                "reference_min must be below reference_max (a constant reference set cannot be "
                f"normalised), got {self.reference_min}, {self.reference_max}"
            )

    @classmethod
    def fit(cls, reference: Tensor, *, low: float = 0.1, high: float = 1.0) -> RewardNormalizer:
        """Normaliser whose range is the min and max of ``reference`` (any shape)."""
        return cls(float(reference.min()), float(reference.max()), low, high)

    def __call__(self, rewards: Tensor) -> Tensor:
        unit = (rewards - self.reference_min) / (self.reference_max - self.reference_min)
        return self.low + (self.high - self.low) * unit.clamp(0.0, 1.0)


def mask_after_first_eos(tokens: Tensor, mask: Tensor, eos_token_id: int) -> tuple[Tensor, Tensor]:
    """Keep each response up to and including its first EOS; drop everything after it.

    tokens, mask: [B, T] sampled response tokens and their mask (generation pads after EOS, and some
    models keep sampling). Returns (new mask [B, T], finished [B] bool: an EOS was emitted inside the
    mask).
    """
    is_eos = (tokens == eos_token_id) & mask.bool()
    # Count the EOS tokens strictly before each position; a position survives if that count is 0.
    eos_before = torch.cumsum(is_eos.long(), dim=1) - is_eos.long()
    new_mask = mask.bool() & (eos_before == 0)
    return new_mask.to(mask.dtype), is_eos.any(dim=1)
