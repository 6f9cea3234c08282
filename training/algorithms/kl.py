"""KL to the reference model: per-token estimators, the penalty folded into rewards, and the
controllers that set its coefficient.

Shapes: B sequences, T response tokens. Log-probabilities are of the sampled tokens, float32.

Every controller has the same small surface: ``value`` (the coefficient to use now),
``update(current_kl, n_steps)`` after each optimiser batch, and ``state_dict`` / ``load_state_dict``
so a resumed run continues with the same coefficient.
"""

from __future__ import annotations

import statistics
from collections import deque
from typing import Any, Literal, Protocol

import torch
from torch import Tensor

KLEstimator = Literal["k1", "k2", "k3"]


def kl_k1(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k1 = log pi(x) - log pi_ref(x) per sampled token: unbiased for KL(pi || pi_ref), can be negative."""
    return logprobs.float() - ref_logprobs.float()


def kl_k2(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k2 = (log pi - log pi_ref)^2 / 2: biased, low variance, non-negative (Schulman 2020)."""
    return 0.5 * (logprobs.float() - ref_logprobs.float()) ** 2


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k3 = (r - 1) - log r with r = pi_ref(x) / pi(x): unbiased for KL(pi || pi_ref) and
    non-negative per token (Schulman 2020, "Approximating KL divergence")."""
    log_r = ref_logprobs.float() - logprobs.float()
    return torch.expm1(log_r) - log_r


def kl_estimate(logprobs: Tensor, ref_logprobs: Tensor, estimator: KLEstimator = "k1") -> Tensor:
    """Per-token KL estimate by name ('k1', 'k2' or 'k3'); shapes as the inputs."""
    estimators = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}
    if estimator not in estimators:
        raise ValueError(f"estimator must be one of {sorted(estimators)}, got {estimator!r}")
    return estimators[estimator](logprobs, ref_logprobs)


def kl_penalized_rewards(
    scores: Tensor,
    logprobs: Tensor,
    ref_logprobs: Tensor,
    mask: Tensor,
    *,
    kl_coef: float,
    estimator: KLEstimator = "k1",
) -> tuple[Tensor, Tensor]:
    """Per-token rewards with the KL penalty folded in (Ziegler et al. 2019, eq. 2; Stiennon et al. 2020).

    scores: [B] sequence rewards (reward model, after shaping); logprobs, ref_logprobs, mask: [B, T].
    r_t = -kl_coef * KL_t on every response token, plus the score on each row's last valid token.
    Returns (rewards [B, T], kl [B, T]); both 0 on padding. A row with no valid token gets no score.
    """
    kl = kl_estimate(logprobs, ref_logprobs, estimator) * mask
    rewards = -kl_coef * kl
    lengths = mask.long().sum(dim=1)
    has_tokens = lengths > 0
    last = (lengths - 1).clamp(min=0)
    rows = torch.arange(rewards.shape[0], device=rewards.device)
    bonus = torch.where(has_tokens, scores.float(), torch.zeros_like(scores, dtype=torch.float32))
    rewards = rewards.index_put((rows, last), bonus, accumulate=True)
    return rewards, kl


class KLController(Protocol):
    """What PPO and RLOO ask of a KL coefficient schedule."""

    @property
    def value(self) -> float: ...

    def update(self, current_kl: float, n_steps: int) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class _StateMixin:
    def state_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, deque) else v) for k, v in vars(self).items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            current = getattr(self, key)
            setattr(
                self,
                key,
                deque(value, maxlen=current.maxlen) if isinstance(current, deque) else value,
            )


class FixedKLController(_StateMixin):
    """A constant coefficient (PIPELINE.md default 0.02)."""

    def __init__(self, kl_coef: float = 0.02) -> None:
        if kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
        self._value = kl_coef

    @property
    def value(self) -> float:
        return self._value

    def update(self, current_kl: float, n_steps: int) -> None:
        """Nothing to adapt."""


class AdaptiveKLController(_StateMixin):
    """Adaptive coefficient of Ziegler et al. 2019 (section 2.2, eq. 3).

    e_t = clip(KL_t / KL_target - 1, -0.2, 0.2);  beta_{t+1} = beta_t (1 + K_beta e_t), K_beta =
    n_steps / horizon. ``n_steps`` is the number of samples (episodes) in the batch just used, as in the
    paper's code, so ``horizon`` is in samples (10,000 there).
    """

    def __init__(self, init_kl_coef: float, target: float, horizon: int) -> None:
        if init_kl_coef <= 0:
            raise ValueError(f"init_kl_coef must be > 0, got {init_kl_coef}")
        if target <= 0:
            raise ValueError(f"target must be > 0, got {target}")
        if horizon <= 0:
            raise ValueError(f"horizon must be > 0, got {horizon}")
        self._value = init_kl_coef
        self.target = target
        self.horizon = horizon

    @property
    def value(self) -> float:
        return self._value

    def update(self, current_kl: float, n_steps: int) -> None:
        proportional_error = min(max(current_kl / self.target - 1, -0.2), 0.2)
        self._value *= 1 + proportional_error * n_steps / self.horizon


class VarianceKLScheduler(_StateMixin):
    """The variance-driven schedule of PIPELINE.md: steady KL may be pushed harder, jumpy KL reined in.

    Keeps the last ``window`` KL values; once the window is full, after each update: if their sample
    standard deviation exceeds ``high_std`` the coefficient is multiplied by ``increase`` (capped at
    ``max_coef``), if it is under ``low_std`` by ``decrease`` (floored at ``min_coef``). Defaults: 10
    values, 0.05 / 0.01, x1.2 / x0.8, bounds [0.02, 0.5].
    """

    def __init__(
        self,
        init_kl_coef: float = 0.02,
        *,
        window: int = 10,
        high_std: float = 0.05,
        low_std: float = 0.01,
        increase: float = 1.2,
        decrease: float = 0.8,
        min_coef: float = 0.02,
        max_coef: float = 0.5,
    ) -> None:
        if window < 2:
            raise ValueError(f"window must be >= 2, got {window}")
        if not 0 <= low_std <= high_std:
            raise ValueError(f"need 0 <= low_std <= high_std, got {low_std}, {high_std}")
        if not 0 < min_coef <= max_coef:
            raise ValueError(f"need 0 < min_coef <= max_coef, got {min_coef}, {max_coef}")
        self._value = min(max(init_kl_coef, min_coef), max_coef)
        self.high_std, self.low_std = high_std, low_std
        self.increase, self.decrease = increase, decrease
        self.min_coef, self.max_coef = min_coef, max_coef
        self.history: deque[float] = deque(maxlen=window)

    @property
    def value(self) -> float:
        return self._value

    def update(self, current_kl: float, n_steps: int = 1) -> None:
        self.history.append(float(current_kl))
        if len(self.history) < (self.history.maxlen or 0):
            return
        spread = statistics.stdev(self.history)
        if spread > self.high_std:
            self._value = min(self._value * self.increase, self.max_coef)
        elif spread < self.low_std:
            self._value = max(self._value * self.decrease, self.min_coef)


class LinearKLSchedule(_StateMixin):
    """Coefficient decaying linearly from ``start`` to ``end`` over ``total_updates`` updates, then
    constant (PIPELINE.md: 0.2 -> 0.02)."""

    def __init__(self, start: float = 0.2, end: float = 0.02, total_updates: int = 1000) -> None:
        if total_updates <= 0:
            raise ValueError(f"total_updates must be > 0, got {total_updates}")
        if start < 0 or end < 0:
            raise ValueError(f"start and end must be >= 0, got {start}, {end}")
        self.start, self.end, self.total_updates = start, end, total_updates
        self.updates = 0

    @property
    def value(self) -> float:
        progress = min(self.updates / self.total_updates, 1.0)
        return self.start + (self.end - self.start) * progress

    def update(self, current_kl: float, n_steps: int = 1) -> None:
        self.updates += 1
