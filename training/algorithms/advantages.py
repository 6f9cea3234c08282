"""Advantage estimators: GAE for PPO, leave-one-out for RLOO, a moving baseline for REINFORCE.

Shapes: B sequences (or prompts), T response tokens, K samples per prompt.
"""

from __future__ import annotations

import torch
from torch import Tensor


def gae(
    rewards: Tensor, values: Tensor, mask: Tensor, *, gamma: float = 1.0, lam: float = 0.95
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016, eqs. 11-16) over right-padded rows.

    rewards, values, mask: [B, T]; mask is 1 on the response tokens and 0 on the right padding.
    With m_t the mask, the value after a row's last valid token is zero (the episode ended there):

        delta_t = r_t + gamma * m_{t+1} V_{t+1} - V_t
        A_t     = delta_t + gamma * lam * m_{t+1} A_{t+1}

    Returns (advantages, returns) [B, T] with returns = A + V, both exactly 0 on padding. Padding values
    never enter the recursion, so a value head that outputs garbage on padding changes nothing.
    """
    if not rewards.shape == values.shape == mask.shape:
        raise ValueError(
            f"rewards {tuple(rewards.shape)}, values {tuple(values.shape)} and mask "
            f"{tuple(mask.shape)} must have the same shape [B, T]"
        )
    keep = mask.to(values.dtype)
    values = values * keep
    rewards = rewards * keep
    n_steps = rewards.shape[1]
    advantages = torch.zeros_like(values)
    next_advantage = torch.zeros_like(values[:, 0])
    next_value = torch.zeros_like(values[:, 0])
    next_keep = torch.zeros_like(values[:, 0])
    for t in reversed(range(n_steps)):
        delta = rewards[:, t] + gamma * next_keep * next_value - values[:, t]
        next_advantage = delta + gamma * lam * next_keep * next_advantage
        advantages[:, t] = next_advantage
        next_value, next_keep = values[:, t], keep[:, t]
    advantages = advantages * keep
    return advantages, (advantages + values) * keep


def rloo_advantages(rewards: Tensor) -> Tensor:
    """REINFORCE leave-one-out advantages (Kool et al. 2019; Ahmadian et al. 2024, eq. 5).

    rewards: [B, K], K >= 2 samples per prompt -> [B, K]:
        A_i = r_i - (1 / (K - 1)) sum_{j != i} r_j  =  K / (K - 1) * (r_i - mean_j r_j)
    Each row sums to zero. The baseline excludes the sample itself, so it is unbiased.
    """
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must be [B, K] with K >= 2, got {tuple(rewards.shape)}")
    k = rewards.shape[1]
    baseline = (rewards.sum(dim=1, keepdim=True) - rewards) / (k - 1)
    return rewards - baseline


class MovingAverageBaseline:
    """REINFORCE with an exponential moving-average baseline (Williams 1992, section 4).

    ``advantages(rewards)`` returns r - b with the baseline b from *before* this batch (so the batch's
    own rewards do not bias it), then updates b <- decay * b + (1 - decay) * mean(r). The first batch
    uses its own mean as the starting baseline. State round-trips through ``state_dict``.
    """

    def __init__(self, decay: float = 0.9) -> None:
        if not 0 <= decay < 1:
            raise ValueError(f"decay must be in [0, 1), got {decay}")
        self.decay = decay
        self.value: float | None = None

    def advantages(self, rewards: Tensor) -> Tensor:
        """rewards: [B] -> advantages [B]."""
        batch_mean = float(rewards.float().mean())
        baseline = batch_mean if self.value is None else self.value
        self.value = (
            batch_mean
            if self.value is None
            else self.decay * self.value + (1 - self.decay) * batch_mean
        )
        return rewards - baseline

    def state_dict(self) -> dict[str, float | None]:
        return {"decay": self.decay, "value": self.value}

    def load_state_dict(self, state: dict[str, float | None]) -> None:
        self.decay = float(state["decay"])  # type: ignore[arg-type]
        self.value = state["value"]
