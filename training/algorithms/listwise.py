"""Reward-model losses beyond pairs: the Plackett-Luce likelihood of K-way rankings, and the masked
mean squared error of a multi-aspect regression head (HelpSteer2 style) with its weighted-sum reward.

Shapes: B lists (or rows), K responses per list (padded, with a mask), A aspects. float32 maths.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def _checked_mask(
    values: Tensor, other: Tensor, mask: Tensor | None, *, names: tuple[str, str], shape: str
) -> Tensor:
    """The mask of two 2-d tensors of one shape (all True when None); ValueError naming them."""
    if values.dim() != 2 or other.shape != values.shape:
        raise ValueError(
            f"{names[0]} and {names[1]} must both be {shape}, got {tuple(values.shape)} and "
            f"{tuple(other.shape)}"
        )
    if mask is None:
        return torch.ones_like(values, dtype=torch.bool)
    if mask.shape != values.shape or mask.dtype != torch.bool:
        raise ValueError(
            f"mask must be a bool {shape} like {names[0]}, got {mask.dtype} {tuple(mask.shape)}"
        )
    return mask


def plackett_luce_loss(
    scores: Tensor, ranks: Tensor, mask: Tensor | None = None, *, reduction: str = "mean"
) -> Tensor:
    """Negative log-likelihood of rankings under the Plackett-Luce model (Plackett 1975; Luce 1959).

    scores: [B, K] rewards; ranks: [B, K] ranks given, 1 = best, ties share a rank (only the order
    matters); mask: [B, K] bool, True for the responses a list really has (None: all K). The
    ranking is read as a sequence of choices, best first: each response i is chosen from its risk
    set R_i, the responses ranked no better than it, so

        NLL_b = - sum_i [ s_i - log sum_{j in R_i} exp(s_j) ],  R_i = {j : rank_j >= rank_i}.

    Ties use Breslow's rule (Breslow 1974, from the Cox model): every response of a tied group is
    chosen from the same risk set, the group and everything ranked below it; a tied group of size
    t at the bottom of a list thus still costs t log t at equal scores and pulls its scores
    together. Without ties this is the exact Plackett-Luce likelihood; with K = 2 it is
    Bradley-Terry's -log sigmoid(s_better - s_worse). A list with fewer than two responses costs 0.
    Invariant to permuting a list's responses (with their ranks and mask) and to adding a constant
    to a list's scores. reduction: "mean" over lists (a scalar) or "none" ([B]).
    """
    mask = _checked_mask(scores, ranks, mask, names=("scores", "ranks"), shape="[B, K]")
    if reduction not in ("mean", "none"):
        raise ValueError(f"reduction must be 'mean' or 'none', not {reduction!r}")
    ranks = ranks.float()
    if not torch.isfinite(ranks[mask]).all():
        raise ValueError("ranks must be finite where the mask is True")
    s = scores.float()
    # risk[b, i, j]: response j is still to choose from when response i is chosen. Every response
    # is in its own set (already so for a real one), so a padded one's sum stays finite and its
    # gradient (multiplied by 0 below) cannot turn into NaN.
    own = torch.eye(s.shape[1], dtype=torch.bool, device=s.device)
    risk = ((ranks[:, None, :] >= ranks[:, :, None]) & mask[:, None, :]) | own
    expanded = s[:, None, :].expand(-1, s.shape[1], -1)
    log_denominator = torch.logsumexp(expanded.masked_fill(~risk, float("-inf")), dim=-1)
    terms = torch.where(mask, s - log_denominator, torch.zeros_like(s))
    nll = -terms.sum(dim=-1)
    return nll.mean() if reduction == "mean" else nll


def normalise_ratings(values: Tensor, low: Tensor | float, high: Tensor | float) -> Tensor:
    """Ratings on a scale [low, high] -> [0, 1]: (y - low) / (high - low), elementwise (any shape,
    low and high broadcast; e.g. [B, A] values with [B, 1] per-row scales)."""
    return (values.float() - low) / (torch.as_tensor(high) - torch.as_tensor(low)).float()


def aspect_regression_loss(
    predictions: Tensor, targets: Tensor, mask: Tensor | None = None
) -> Tensor:
    """Mean squared error of a multi-aspect regression head over the rated cells (HelpSteer2, Wang
    et al. 2024: one linear output per aspect, MSE on the ratings).

    predictions, targets: [B, A] (targets scale-normalised, ``normalise_ratings``); mask: [B, A]
    bool, True where row b rated aspect a (None: all). loss = sum mask (p - t)^2 / sum mask, a
    scalar (0 when nothing is rated).
    """
    mask = _checked_mask(
        predictions, targets, mask, names=("predictions", "targets"), shape="[B, A]"
    )
    squared = torch.where(mask, (predictions.float() - targets.float()) ** 2, 0.0)
    return squared.sum() / mask.sum().clamp(min=1)


def weighted_aspect_reward(predictions: Tensor, weights: Tensor | Sequence[float]) -> Tensor:
    """The scalar reward of a multi-aspect head: sum_a w_a * p_a. predictions [S, A], weights [A]
    -> [S] (on the normalised scale the head was trained on)."""
    w = torch.as_tensor(weights, dtype=torch.float32, device=predictions.device)
    if predictions.dim() != 2 or w.shape != (predictions.shape[1],):
        raise ValueError(
            f"predictions must be [S, A] and weights [A], got {tuple(predictions.shape)} and "
            f"{tuple(w.shape)}"
        )
    return predictions.float() @ w
