"""PPO's clipped objectives (Schulman et al. 2017) at token level, with the statistics worth logging.

Shapes: B sequences, T response tokens; every tensor [B, T] with a right-padded mask.

Token-level losses are a masked *sum* divided by a token count. By default the count is the tokens in
this call, which is the masked mean. Under gradient accumulation pass ``token_count`` = the tokens of the
whole optimiser batch: then the micro-batch gradients add up to exactly the full-batch gradient, while
a mean of per-micro-batch means weights short micro-batches' tokens more.
"""

from __future__ import annotations

import torch
from torch import Tensor

from training.algorithms.logprobs import masked_mean, masked_sum


def _normaliser(mask: Tensor, token_count: float | Tensor | None) -> Tensor | float:
    if token_count is None:
        return mask.float().sum().clamp(min=1)
    if float(token_count) <= 0:
        raise ValueError(f"token_count must be > 0, got {token_count}")
    return token_count


def ppo_policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_ratio: float = 0.2,
    token_count: float | Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped surrogate loss (Schulman et al. 2017, eq. 7), negated for minimisation.

    rho_t = exp(log pi(a_t) - log pi_old(a_t));
    loss = sum_t m_t * max(-A_t rho_t, -A_t clip(rho_t, 1 - eps, 1 + eps)) / token_count.

    Returns (loss scalar, stats) with stats (detached scalars, masked means over this call's tokens):
    ``clip_fraction`` (share of tokens where the clipped term was the active one), ``approx_kl``
    (the k3 estimator of KL(pi_old || pi): E_old[(rho - 1) - log rho], non-negative, Schulman 2020),
    and ``ratio_mean``.
    """
    if clip_ratio <= 0:
        raise ValueError(f"clip_ratio must be > 0, got {clip_ratio}")
    log_ratio = logprobs.float() - old_logprobs.float()
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - clip_ratio, 1 + clip_ratio)
    per_token = torch.maximum(unclipped, clipped)
    loss = masked_sum(per_token, mask) / _normaliser(mask, token_count)
    with torch.no_grad():
        stats = {
            "clip_fraction": masked_mean((clipped > unclipped).float(), mask),
            "approx_kl": masked_mean((ratio - 1) - log_ratio, mask),
            "ratio_mean": masked_mean(ratio, mask),
        }
    return loss, stats


def clipped_value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    clip_range: float = 0.2,
    token_count: float | Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Clipped value loss (the PPO2 form of OpenAI baselines, used by Ziegler et al. 2019).

    V_clip = old_V + clamp(V - old_V, -c, c);
    loss = sum_t m_t * max((V_t - R_t)^2, (V_clip,t - R_t)^2) / token_count  (no factor 1/2 inside:
    the recipe's value coefficient, default 0.5, is the only weight).

    Returns (loss scalar, clip_fraction: share of tokens where the clipped error was larger).
    """
    if clip_range <= 0:
        raise ValueError(f"clip_range must be > 0, got {clip_range}")
    clipped_values = old_values + torch.clamp(values - old_values, -clip_range, clip_range)
    error = (values.float() - returns.float()) ** 2
    error_clipped = (clipped_values.float() - returns.float()) ** 2
    loss = masked_sum(torch.maximum(error, error_clipped), mask) / _normaliser(mask, token_count)
    with torch.no_grad():
        clip_fraction = masked_mean((error_clipped > error).float(), mask)
    return loss, clip_fraction


def entropy_bonus(
    entropy: Tensor, mask: Tensor, *, token_count: float | Tensor | None = None
) -> Tensor:
    """Token-level masked mean of the policy entropy [B, T] (subtract coef * this from the loss)."""
    return masked_sum(entropy, mask) / _normaliser(mask, token_count)


def kl_early_stop(approx_kl: float, *, limit: float | None = 0.1) -> bool:
    """True when PPO's remaining epochs on this batch should be skipped.

    ``approx_kl`` is the mean KL(pi_old || pi) of the last minibatch (``ppo_policy_loss``'s stat);
    a policy this far from the one that sampled the batch is optimising a stale surrogate.
    ``limit`` None disables the check.
    """
    return limit is not None and approx_kl > limit
