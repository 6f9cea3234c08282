"""RL objectives on a reward-model ensemble, and the members' disagreement (Coste et al., "Reward Model
Ensembles Help Mitigate Overoptimization", ICLR 2024, section 3).

Shapes: M ensemble members score the same B responses; ``member_rewards`` is [M, B] (one row per
member), any float dtype; every result keeps it. With R_1..R_M the members' rewards for one response,
mean = (1/M) sum_i R_i and the intra-ensemble variance Var = (1/M) sum_i (R_i - mean)^2 (the population
variance, divisor M, as in the paper's eq. for UWO; one member has variance 0):

    mean:  R_mean = mean                              (plain ensemble average)
    wco:   R_wco  = min_i R_i                         (worst-case optimisation)
    uwo:   R_uwo  = mean - lambda * Var               (uncertainty-weighted optimisation, lambda >= 0)

So wco <= mean and uwo <= mean always, and all three agree when the members agree. Gradients flow to the
members' rewards (wco's to the lowest member only), though recipes score under ``no_grad``.

``ensemble_disagreement`` gives the per-response spread and its batch summaries to log every step: a
policy that games the ensemble shows first as rising disagreement on its own answers (PIPELINE.md:
alert at twice its value on the first checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

ENSEMBLE_OBJECTIVES = ("mean", "wco", "uwo")
UWO_LAMBDA = 0.5  # PIPELINE.md's starting point


def _check_members(member_rewards: Tensor) -> None:
    if member_rewards.dim() != 2:
        raise ValueError(
            f"member_rewards must be [M, B] (members x responses), got shape "
            f"{tuple(member_rewards.shape)}"
        )
    if member_rewards.shape[0] == 0 or member_rewards.shape[1] == 0:
        raise ValueError(
            f"member_rewards needs at least one member and one response, got shape "
            f"{tuple(member_rewards.shape)}"
        )
    if not member_rewards.is_floating_point():
        raise ValueError(f"member_rewards must be a float tensor, got {member_rewards.dtype}")


def ensemble_reward(
    member_rewards: Tensor, objective: str = "mean", *, uwo_lambda: float = UWO_LAMBDA
) -> Tensor:
    """The reward the policy optimises, from the members' rewards: [M, B] -> [B].

    objective: ``mean``, ``wco`` (minimum over members) or ``uwo`` (mean - uwo_lambda * Var, Var the
    population variance over members); uwo_lambda (>= 0, default 0.5) is used by ``uwo`` only.
    Raises ValueError naming the argument on a bad shape, an unknown objective or a negative lambda.
    """
    _check_members(member_rewards)
    if objective not in ENSEMBLE_OBJECTIVES:
        raise ValueError(f"objective must be one of {ENSEMBLE_OBJECTIVES}, got {objective!r}")
    if not uwo_lambda >= 0:  # also rejects NaN
        raise ValueError(f"uwo_lambda must be >= 0, got {uwo_lambda}")
    if objective == "mean":
        return member_rewards.mean(dim=0)
    if objective == "wco":
        return member_rewards.min(dim=0).values
    return member_rewards.mean(dim=0) - uwo_lambda * member_rewards.var(dim=0, unbiased=False)


@dataclass(frozen=True)
class EnsembleDisagreement:
    """The members' disagreement, detached (for logging). Per response, [B]: ``std`` (population
    standard deviation over members, the square root of uwo's Var) and ``range`` (max - min). Batch
    summaries, 0-d tensors: ``mean_std``, ``max_std`` and ``mean_range``."""

    std: Tensor
    range: Tensor
    mean_std: Tensor
    max_std: Tensor
    mean_range: Tensor

    def as_log(self, prefix: str = "ensemble/") -> dict[str, float]:
        """The batch summaries as plain floats under metric names, for the step log."""
        return {
            f"{prefix}disagreement_std": float(self.mean_std),
            f"{prefix}disagreement_std_max": float(self.max_std),
            f"{prefix}disagreement_range": float(self.mean_range),
        }


def ensemble_disagreement(member_rewards: Tensor) -> EnsembleDisagreement:
    """How much the M members disagree on each of the B responses: [M, B] -> ``EnsembleDisagreement``.

    Worked example: members [[1, 3], [3, 3]] (two members, two responses): response 0 has mean 2,
    Var = ((1-2)^2 + (3-2)^2) / 2 = 1, std 1, range 2; response 1 has std 0, range 0; so mean_std
    0.5, max_std 1, mean_range 1.
    """
    _check_members(member_rewards)
    rewards = member_rewards.detach()
    std = rewards.var(dim=0, unbiased=False).sqrt()
    spread = rewards.max(dim=0).values - rewards.min(dim=0).values
    return EnsembleDisagreement(
        std=std, range=spread, mean_std=std.mean(), max_std=std.max(), mean_range=spread.mean()
    )


def bootstrap_counts(*, n_items: int, members: int, seed: int) -> Tensor:
    """How often each of ``n_items`` training items is drawn in each member's bootstrap resample
    (Efron's bootstrap: n_items draws with replacement, uniform): [members, n_items] int64.

    Every row sums to n_items; about 1 - (1 - 1/n)^n ~ 63.2% of the items appear in a row (the rest
    have count 0). Row k depends on (seed, k) only, so adding members never changes the first ones.
    A member trains on its row: each item's loss weighted by its count (``bootstrap_weighted_bt``)
    or the item repeated count times. Raises ValueError for n_items < 1 or members < 1.
    """
    if n_items < 1:
        raise ValueError(f"n_items must be >= 1, got {n_items}")
    if members < 1:
        raise ValueError(f"members must be >= 1, got {members}")
    rows = []
    for member in range(members):
        generator = torch.Generator().manual_seed(seed * 1_000_003 + member)
        draws = torch.randint(n_items, (n_items,), generator=generator)
        rows.append(torch.bincount(draws, minlength=n_items))
    return torch.stack(rows)


def bootstrap_weighted_bt(
    chosen_rewards: Tensor, rejected_rewards: Tensor, weights: Tensor, *, normaliser: float
) -> Tensor:
    """The members' Bradley-Terry losses on their bootstrap resamples, averaged over members:

        loss = (1/M) sum_k (1/N) sum_i w_ki * -log sigmoid(r^c_ki - r^r_ki)

    chosen_rewards, rejected_rewards: [M, B] member rewards; weights: [M, B] the items' bootstrap
    counts (``bootstrap_counts`` columns); normaliser N > 0: the number of items the step averages
    over (a batch's size: expected weights are 1, so this is each member's mean loss on its
    resample). With M = 1 and all weights 1 and N = B it is ``bradley_terry_loss``. Returns a
    scalar.
    """
    if chosen_rewards.shape != rejected_rewards.shape or chosen_rewards.shape != weights.shape:
        raise ValueError(
            f"chosen {tuple(chosen_rewards.shape)}, rejected {tuple(rejected_rewards.shape)} and "
            f"weights {tuple(weights.shape)} must all be [M, B]"
        )
    if chosen_rewards.dim() != 2:
        raise ValueError(f"rewards must be [M, B], got {tuple(chosen_rewards.shape)}")
    if not normaliser > 0:
        raise ValueError(f"normaliser must be > 0, got {normaliser}")
    per_item = -torch.nn.functional.logsigmoid(chosen_rewards.float() - rejected_rewards.float())
    return (weights.float() * per_item).sum(dim=1).mean() / normaliser
