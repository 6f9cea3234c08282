"""Pairwise preference losses: Bradley-Terry for reward models, DPO and its variants for policies.

Shapes: B preference pairs. Log-probabilities are sequence totals over the response tokens (or, for IPO,
the per-token average), float32.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

DPOLossType = Literal["sigmoid", "ipo", "hinge"]
DPO_LOSS_TYPES: tuple[str, ...] = ("sigmoid", "ipo", "hinge")


def bradley_terry_loss(
    chosen_rewards: Tensor,
    rejected_rewards: Tensor,
    *,
    margin: Tensor | None = None,
    center_rewards_coef: float = 0.0,
) -> Tensor:
    """Mean Bradley-Terry negative log-likelihood of the human preferences (Ouyang et al. 2022, eq. 1).

    loss = mean_i[ -log sigmoid(r_c,i - r_r,i - m_i) ] + c * mean_i[ (r_c,i + r_r,i)^2 ]

    chosen_rewards, rejected_rewards: [B] scalar rewards; margin: [B] or None, the required gap from
    the preference strength (Llama 2's margin loss, Touvron et al. 2023, eq. 2); center_rewards_coef c:
    the auxiliary term of Eisenstein et al. 2023 that keeps rewards centred on zero (the BT likelihood
    alone is invariant to a shift). Returns a scalar.
    """
    if chosen_rewards.shape != rejected_rewards.shape:
        raise ValueError(
            f"chosen {tuple(chosen_rewards.shape)} and rejected {tuple(rejected_rewards.shape)} differ"
        )
    if center_rewards_coef < 0:
        raise ValueError(f"center_rewards_coef must be >= 0, got {center_rewards_coef}")
    diff = chosen_rewards.float() - rejected_rewards.float()
    if margin is not None:
        diff = diff - margin.float()
    loss = -F.logsigmoid(diff).mean()
    if center_rewards_coef:
        loss = (
            loss + center_rewards_coef * ((chosen_rewards + rejected_rewards).float() ** 2).mean()
        )
    return loss


def dpo_loss(
    policy_chosen_logps: Tensor,
    policy_rejected_logps: Tensor,
    ref_chosen_logps: Tensor,
    ref_rejected_logps: Tensor,
    *,
    beta: float = 0.1,
    loss_type: DPOLossType = "sigmoid",
    label_smoothing: float = 0.0,
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-pair DPO losses and implicit rewards.

    All inputs [B] float (log pi(y|x) summed over response tokens; for ``ipo`` pass length-averaged
    log-probabilities). With h = (log pi(y_w) - log pi_ref(y_w)) - (log pi(y_l) - log pi_ref(y_l)):

    - ``sigmoid`` (Rafailov et al. 2023, eq. 7), with the conservative label smoothing eps of cDPO
      (Mitchell 2023): -(1 - eps) log sigmoid(beta h) - eps log sigmoid(-beta h).
    - ``ipo`` (Azar et al. 2023, eq. 17): (h - 1 / (2 beta))^2; beta plays the role of tau.
    - ``hinge`` (SLiC-HF, Zhao et al. 2023, eq. 1 with delta = 1): max(0, 1 - beta h).

    Returns (losses [B], chosen_rewards [B], rejected_rewards [B]); the implicit rewards
    beta * (log pi - log pi_ref) are detached (they are for logging and accuracy).
    """
    if loss_type not in DPO_LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {DPO_LOSS_TYPES}, got {loss_type!r}")
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    if not 0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5), got {label_smoothing}")
    if label_smoothing and loss_type != "sigmoid":
        raise ValueError(f"label_smoothing applies to loss_type 'sigmoid' only, not {loss_type!r}")

    chosen_logratios = policy_chosen_logps.float() - ref_chosen_logps.float()
    rejected_logratios = policy_rejected_logps.float() - ref_rejected_logps.float()
    h = chosen_logratios - rejected_logratios
    if loss_type == "sigmoid":
        losses = -(1 - label_smoothing) * F.logsigmoid(beta * h) - label_smoothing * F.logsigmoid(
            -beta * h
        )
    elif loss_type == "ipo":
        losses = (h - 1 / (2 * beta)) ** 2
    else:
        losses = torch.relu(1 - beta * h)
    chosen_rewards = (beta * chosen_logratios).detach()
    rejected_rewards = (beta * rejected_logratios).detach()
    return losses, chosen_rewards, rejected_rewards
