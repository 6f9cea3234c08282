"""Reference-free preference losses: SimPO and ORPO. No reference model, so no reference pass.

Shapes: B preference pairs. Both losses take *length-normalised* log-probabilities: the average
log pi(y_t | x, y_<t) over each completion's tokens (``sequence_logprobs(..., average=True)``),
float32, so each value is <= 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

_LN2 = math.log(2.0)
# An average log-prob of exactly 0 (a completion the model is certain of) has infinite odds.
_MAX_AVG_LOGP = -1e-7


def _check_pairs(chosen: Tensor, rejected: Tensor) -> None:
    if chosen.shape != rejected.shape or chosen.dim() != 1:
        raise ValueError(
            f"chosen {tuple(chosen.shape)} and rejected {tuple(rejected.shape)} must both be [B]"
        )


def simpo_loss(
    chosen_avg_logps: Tensor,
    rejected_avg_logps: Tensor,
    *,
    beta: float = 2.0,
    gamma: float = 0.5,
    label_smoothing: float = 0.0,
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-pair SimPO losses (Meng et al. 2024, eq. 6) and their rewards.

    chosen_avg_logps, rejected_avg_logps: [B] average log-probs. With h = beta * (avg_w - avg_l) - gamma:

        loss = -(1 - eps) log sigmoid(h) - eps log sigmoid(-h)

    (eps = ``label_smoothing``, 0 in the paper). ``beta`` 2.0 as the paper; ``gamma`` the target
    reward margin, 0.5 (PIPELINE.md's starting point, TRL's ``simpo_gamma`` default; the paper
    searches 0.3 to 1.6). At equal log-probs the loss is
    softplus(gamma), ln 2 when gamma is 0.

    TRL's ``CPOTrainer(loss_type="simpo")`` computes the same value from ``simpo_gamma`` = gamma (it
    divides by beta and multiplies back), but adds ``cpo_alpha`` (default 1.0) times the chosen NLL:
    set ``cpo_alpha=0`` there for SimPO itself.

    Returns (losses [B], chosen_rewards [B], rejected_rewards [B]); rewards = beta * avg log-prob,
    detached.
    """
    _check_pairs(chosen_avg_logps, rejected_avg_logps)
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0, got {gamma}")
    if not 0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5), got {label_smoothing}")
    chosen = chosen_avg_logps.float()
    rejected = rejected_avg_logps.float()
    margin = beta * (chosen - rejected) - gamma
    losses = -(1 - label_smoothing) * F.logsigmoid(margin)
    if label_smoothing:
        losses = losses - label_smoothing * F.logsigmoid(-margin)
    return losses, (beta * chosen).detach(), (beta * rejected).detach()


def log1mexp(x: Tensor) -> Tensor:
    """log(1 - exp(x)) for x < 0, accurate everywhere (Maechler 2012): log(-expm1(x)) near 0,
    log1p(-exp(x)) below -ln 2. Each branch sees only inputs where it is finite, so no NaN gradient
    leaks through ``torch.where``. x >= 0 is clamped to -1e-7."""
    x = x.clamp(max=_MAX_AVG_LOGP)
    near_zero = x > -_LN2
    small = torch.log(-torch.expm1(torch.where(near_zero, x, -_LN2)))
    large = torch.log1p(-torch.exp(torch.where(near_zero, -_LN2, x)))
    return torch.where(near_zero, small, large)


@dataclass(frozen=True)
class ORPOOutput:
    """``losses`` [B] = NLL + lambda * odds-ratio term (with grad; the recipe takes their mean);
    ``odds_ratio_losses`` [B] = -log sigmoid(log_odds); ``log_odds`` [B] (detached): log odds(y_w)
    - log odds(y_l); ``chosen_rewards``, ``rejected_rewards`` [B]: lambda * avg log-prob, detached
    (TRL's logging convention)."""

    losses: Tensor
    odds_ratio_losses: Tensor
    log_odds: Tensor
    chosen_rewards: Tensor
    rejected_rewards: Tensor


def orpo_loss(
    chosen_avg_logps: Tensor,
    rejected_avg_logps: Tensor,
    *,
    lam: float = 0.1,
    chosen_nll: Tensor | None = None,
) -> ORPOOutput:
    """ORPO (Hong et al. 2024, eqs. 6-7): supervised NLL on the chosen completion plus lambda times
    the odds-ratio term, per pair.

    chosen_avg_logps, rejected_avg_logps: [B] average log-probs, read as P(y|x) = exp(avg). With
    log odds(y) = log P - log(1 - P) (``log1mexp`` for the second term):

        L_OR = -log sigmoid(log odds(y_w) - log odds(y_l));   loss = NLL + lam * L_OR

    ``chosen_nll``: None uses each pair's own -avg log-prob of the chosen completion (a mean of
    per-sequence means). TRL's ``ORPOTrainer`` instead takes one token-level cross-entropy over
    all the batch's chosen tokens: pass that scalar here to reproduce TRL's loss exactly (its
    ``beta`` is our ``lam``, default 0.1 in both). At equal chosen and rejected log-probs L_OR = ln 2.
    """
    _check_pairs(chosen_avg_logps, rejected_avg_logps)
    if lam < 0:
        raise ValueError(f"lam must be >= 0, got {lam}")
    chosen = chosen_avg_logps.float()
    rejected = rejected_avg_logps.float()
    if chosen_nll is None:
        nll = -chosen
    elif chosen_nll.dim() == 0 or chosen_nll.shape == chosen.shape:
        nll = chosen_nll.float()
    else:
        raise ValueError(
            f"chosen_nll must be a scalar or [B] = {tuple(chosen.shape)}, got "
            f"{tuple(chosen_nll.shape)}"
        )
    log_odds = (chosen - log1mexp(chosen)) - (rejected - log1mexp(rejected))
    odds_ratio_losses = -F.logsigmoid(log_odds)
    return ORPOOutput(
        losses=nll + lam * odds_ratio_losses,
        odds_ratio_losses=odds_ratio_losses,
        log_odds=log_odds.detach(),
        chosen_rewards=(lam * chosen).detach(),
        rejected_rewards=(lam * rejected).detach(),
    )
