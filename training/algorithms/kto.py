"""KTO: Kahneman-Tversky optimisation on unpaired desirable / undesirable completions (Ethayarajh et
al. 2024, eq. 8), with TRL's KTOTrainer conventions.

Shapes: N labelled completions, M mismatched (prompt, completion of another prompt) pairs that estimate
the reference point. Log-probabilities are sequence totals log pi(y|x) over the completion tokens
(TRL sums, it does not average), float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class KTOOutput:
    """``losses`` [N] (weighted, with grad: the recipe takes their mean, as TRL does),
    ``rewards`` [N] = beta * (log pi - log pi_ref), detached, for logging, and
    ``reference_point`` (z0, a detached scalar)."""

    losses: Tensor
    rewards: Tensor
    reference_point: Tensor


def kto_kl_estimate(policy_kl_logps: Tensor, ref_kl_logps: Tensor) -> Tensor:
    """The batch's estimate of KL(pi || pi_ref) from mismatched pairs: mean over the M pairs of
    log pi(y'|x) - log pi_ref(y'|x), where y' is the completion of another prompt (TRL's "KL
    dataset" pairs each prompt with the completion of the previous row; see
    ``training.algorithms.unpaired.mismatched_pairs``). Detached: KTO gives it no gradient.

    policy_kl_logps, ref_kl_logps: [M] -> a scalar, not yet clamped. Under data parallelism,
    all-reduce the mean of this value across ranks before ``kto_loss`` (TRL gathers it the same way).
    """
    if policy_kl_logps.shape != ref_kl_logps.shape or policy_kl_logps.dim() != 1:
        raise ValueError(
            f"policy_kl_logps {tuple(policy_kl_logps.shape)} and ref_kl_logps "
            f"{tuple(ref_kl_logps.shape)} must both be [M]"
        )
    if policy_kl_logps.numel() == 0:
        raise ValueError("the KL estimate needs at least one mismatched pair")
    return (policy_kl_logps.float() - ref_kl_logps.float()).mean().detach()


def kto_loss(
    policy_logps: Tensor,
    ref_logps: Tensor,
    desirable: Tensor,
    *,
    kl_estimate: Tensor | float,
    beta: float = 0.1,
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
) -> KTOOutput:
    """Per-example KTO losses (Ethayarajh et al. 2024, eq. 8; TRL ``KTOTrainer.kto_loss``).

    policy_logps, ref_logps: [N] sequence log-probabilities; desirable: [N] bool (True: a good
    completion); kl_estimate: ``kto_kl_estimate``'s value. With r = log pi(y|x) - log pi_ref(y|x) and
    the reference point z0 = max(kl_estimate, 0) (detached):

        desirable:    lambda_D * (1 - sigmoid(beta * (r - z0)))
        undesirable:  lambda_U * (1 - sigmoid(beta * (z0 - r)))

    At the start of training (pi = pi_ref, so r = 0 and z0 = 0) every loss is lambda / 2.

    Differences from TRL: losses keep the input order (TRL returns all desirable then all
    undesirable) and the labels come as one mask instead of two pre-split batches; a batch with only
    one kind of example needs no special case here. TRL's ``loss_type="apo_zero_unpaired"`` and its
    optional skipping of the KL estimate are not implemented (pass kl_estimate=0 for the latter).
    """
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    if desirable_weight <= 0 or undesirable_weight <= 0:
        raise ValueError(
            f"desirable_weight and undesirable_weight must be > 0, got {desirable_weight}, "
            f"{undesirable_weight}"
        )
    if not policy_logps.shape == ref_logps.shape == desirable.shape or policy_logps.dim() != 1:
        raise ValueError(
            f"policy_logps {tuple(policy_logps.shape)}, ref_logps {tuple(ref_logps.shape)} and "
            f"desirable {tuple(desirable.shape)} must all be [N]"
        )
    if desirable.dtype != torch.bool:
        raise ValueError(f"desirable must be a bool tensor, got {desirable.dtype}")
    reference_point = torch.as_tensor(kl_estimate, dtype=torch.float32, device=policy_logps.device)
    reference_point = reference_point.detach().clamp(min=0)
    logratios = policy_logps.float() - ref_logps.float()
    gain = logratios - reference_point
    # desirable: 1 - sigmoid(beta * gain); undesirable: 1 - sigmoid(-beta * gain)
    sign = torch.where(desirable, 1.0, -1.0)
    weight = torch.where(desirable, desirable_weight, undesirable_weight)
    losses = weight * (1 - torch.sigmoid(sign * beta * gain))
    return KTOOutput(
        losses=losses, rewards=(beta * logratios).detach(), reference_point=reference_point
    )


def kto_balanced_weights(n_desirable: int, n_undesirable: int) -> tuple[float, float]:
    """(desirable_weight, undesirable_weight) for an unbalanced data set: the rarer kind's weight
    is raised so that lambda_D * n_D = lambda_U * n_U, the lower end of the range [1, 4/3] that the
    KTO paper (section 4.2) and TRL's documentation recommend for lambda_D n_D / (lambda_U n_U)."""
    if n_desirable <= 0 or n_undesirable <= 0:
        raise ValueError(
            f"KTO needs both kinds of example, got {n_desirable} desirable and {n_undesirable} "
            "undesirable"
        )
    if n_desirable >= n_undesirable:
        return 1.0, n_desirable / n_undesirable
    return n_undesirable / n_desirable, 1.0
