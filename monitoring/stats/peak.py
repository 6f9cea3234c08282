"""Where over-optimisation starts: fit Gao et al.'s reward-vs-KL curve and estimate the KL of its peak.
Pure NumPy, no Django, no I/O; cheap enough (milliseconds) to rerun after every evaluation (online).

The curve (Gao, Schulman & Hilton 2023, "Scaling Laws for Reward Model Overoptimization", eq. for RL):

    R(d) = r0 + d (alpha - beta ln d),    d = sqrt(KL(pi || pi_ref))  (KL in nats)

r0 is the reward at d = 0 (the reference policy; Gao et al. fit reward gains, r0 = 0: pass
``fit_intercept=False`` for that). The peak, from dR/dd = alpha - beta ln d - beta = 0:

    ln d* = alpha / beta - 1,   d* = exp(alpha / beta - 1),   KL* = d*^2 = exp(2 (alpha / beta - 1))

and d2R/dd2 = -beta / d, so d* is a maximum exactly when beta > 0; with beta <= 0 the fitted reward
never turns down (no peak). The reward at the peak is R(d*) = r0 + beta d* (since alpha - beta ln d* =
beta). Example: alpha = 1, beta = 0.5 -> d* = e, KL* = e^2 = 7.389, R(d*) = r0 + e / 2.

R is linear in (r0, alpha, beta) with regressors (1, d, -d ln d) (d ln d = 0 at d = 0), so the fit is
ordinary least squares; it needs more points than parameters (one residual degree of freedom at least,
to estimate the noise) and two distinct d > 0 for alpha and beta.

Correction by gold (human-rated) points. The proxy reward (the reward model the policy optimises) is
evaluated often, gold (human eval, or the gold reward model of a farm) rarely; the proxy keeps rising
after gold has turned (that is over-optimisation), so the gold points correct the proxy's curve. The
gold curve is the proxy's fitted curve plus a correction in the same family, fitted by (weighted) least
squares to the gold points' residuals from the proxy curve:

    gold(d) = proxy_fit(d) + c0 + c1 d (+ c2 (-d ln d))

The terms are added in that order as far as ``gold_terms`` says; by default one term per gold point up
to all but the last (offset and slope with an intercept; with one gold point only the offset, which
cannot move the peak). A slope c1 < 0 says gold falls behind the proxy in proportion to the distance
travelled, which moves the peak earlier. Proxy and gold should be on one scale (both normalised, e.g.
by ``training.algorithms.RewardNormalizer``); the offset absorbs a level difference, not a scale one.

Interval on KL*: a parametric bootstrap (posterior simulation of the linear fit). Each replica draws
the noise level sigma^2 = s^2 dof / chi2(dof) (s the residual standard deviation), new rewards at the
observed d from the fitted curve plus Normal(0, sigma^2) noise, refits proxy and correction, and
computes KL*; a replica without a peak counts as KL* = infinity. The interval is the replicas'
percentiles. Why not the delta method: KL* = exp(2 (alpha / beta - 1)) is the exponential of a ratio,
strongly skewed, and unbounded as beta -> 0; a delta-method interval is symmetric, can go below zero
and cannot express "no peak" at all, while percentiles follow the skew, are the same whether taken on
d* or KL* (the map is monotone), and report an unbounded upper end honestly. Drawing sigma (not
plugging in s) keeps the coverage near its level with few points (tests measure it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

K = TypeVar("K")
ArrayLike = np.ndarray | Sequence[float]
STATUSES = ("peak", "no_peak", "too_few_points")
N_BOOT = 2000


def gao_peak(alpha: float, beta: float) -> float | None:
    """KL* = exp(2 (alpha / beta - 1)) for R(d) = d (alpha - beta ln d); None when beta <= 0 (no
    peak). Overflows to infinity for alpha / beta above ~355."""
    if not beta > 0:
        return None
    with np.errstate(over="ignore"):
        return float(np.exp(2.0 * (alpha / beta - 1.0)))


def gao_curve(
    kl: ArrayLike | float, alpha: float, beta: float, intercept: float = 0.0
) -> np.ndarray:
    """R = intercept + d (alpha - beta ln d) at d = sqrt(kl), elementwise (R(0) = intercept)."""
    d = np.sqrt(_kl_array(kl, "kl", allow_scalar=True))
    return intercept + alpha * d - beta * _d_log_d(d)


def _d_log_d(d: np.ndarray) -> np.ndarray:
    safe = np.where(d > 0, d, 1.0)
    return np.where(d > 0, d * np.log(safe), 0.0)


def _kl_array(values: ArrayLike | float, name: str, *, allow_scalar: bool = False) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 and not (allow_scalar and array.ndim == 0):
        raise ValueError(f"{name} must be a 1-d array of KL values, got shape {array.shape}")
    if not np.isfinite(array).all() or (array < 0).any():
        raise ValueError(f"{name} must be finite and >= 0 (KL in nats)")
    return array


def _reward_array(values: ArrayLike, name: str, n: int, kl_name: str) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.shape != (n,):
        raise ValueError(f"{name} must have one value per {kl_name} ({n}), got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"{name} must be finite")
    return array


def _design(d: np.ndarray, fit_intercept: bool) -> np.ndarray:
    """Regressors [n, p]: (1,) d, -d ln d; coefficients (r0,) alpha, beta."""
    columns = [d, -_d_log_d(d)]
    return np.column_stack(([np.ones_like(d)] if fit_intercept else []) + columns)


@dataclass(frozen=True)
class GaoFit:
    """A least-squares fit of R(d) = intercept + d (alpha - beta ln d): the coefficients, their
    covariance [p, p] (order: intercept if fitted, alpha, beta), the residual standard deviation and
    its degrees of freedom (n - p)."""

    alpha: float
    beta: float
    intercept: float
    covariance: np.ndarray
    residual_std: float
    dof: int

    @property
    def peak_kl(self) -> float | None:
        return gao_peak(self.alpha, self.beta)

    def predict(self, kl: ArrayLike | float) -> np.ndarray:
        return gao_curve(kl, self.alpha, self.beta, self.intercept)


def _enough_points(d: np.ndarray, fit_intercept: bool) -> bool:
    p = 3 if fit_intercept else 2
    return d.size >= p + 1 and np.unique(d[d > 0]).size >= 2 and np.unique(d).size >= p


def fit_gao_curve(kl: ArrayLike, reward: ArrayLike, *, fit_intercept: bool = True) -> GaoFit:
    """Ordinary least squares of reward [n] on d = sqrt(kl [n]). Needs n > p (p = 3 with the
    intercept, 2 without) and two distinct KL > 0 (else ValueError: ``estimate_peak`` checks first
    and reports "too_few_points" instead)."""
    kl_values = _kl_array(kl, "kl")
    rewards = _reward_array(reward, "reward", kl_values.size, "kl")
    d = np.sqrt(kl_values)
    if not _enough_points(d, fit_intercept):
        raise ValueError(
            f"kl has too few distinct points ({kl_values.size}) to fit the curve and its noise"
        )
    x = _design(d, fit_intercept)
    coef, *_ = np.linalg.lstsq(x, rewards, rcond=None)
    dof = d.size - x.shape[1]
    residual_std = float(np.sqrt(np.sum((rewards - x @ coef) ** 2) / dof))
    covariance = residual_std**2 * np.linalg.pinv(x.T @ x)
    intercept = float(coef[0]) if fit_intercept else 0.0
    return GaoFit(
        alpha=float(coef[-2]),
        beta=float(coef[-1]),
        intercept=intercept,
        covariance=covariance,
        residual_std=residual_std,
        dof=dof,
    )


@dataclass(frozen=True)
class PeakEstimate:
    """The estimated peak of the (gold-corrected) reward-vs-KL curve.

    status: ``peak`` (kl, low, high set), ``no_peak`` (the fitted curve never turns down: the reward
    is still rising; kl None) or ``too_few_points`` (nothing fitted); ``message`` says it in words.
    kl: KL* (nats); low, high: its ``level`` interval (high may be inf: some replicas had no peak);
    sqrt_kl: d*; peak_reward: the curve's value at the peak; alpha, beta, intercept: the curve used
    (gold-corrected when there were gold points); proxy: the proxy-only fit; correction: the gold
    correction's coefficients (c0, c1, ...), empty without gold; no_peak_share: share of bootstrap
    replicas without a peak; beyond_data: KL* lies beyond the largest KL evaluated (extrapolated, not
    yet reached).
    """

    status: str
    message: str
    level: float
    n_proxy: int
    n_gold: int
    kl: float | None = None
    low: float | None = None
    high: float | None = None
    sqrt_kl: float | None = None
    peak_reward: float | None = None
    alpha: float | None = None
    beta: float | None = None
    intercept: float | None = None
    proxy: GaoFit | None = None
    correction: tuple[float, ...] = field(default_factory=tuple)
    no_peak_share: float | None = None
    beyond_data: bool = False


def _peak_kl_array(alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """KL* per replica; +inf where beta <= 0 (no peak) or the peak overflows."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        value = np.exp(2.0 * (alpha / np.where(beta > 0, beta, 1.0) - 1.0))
    return np.where(beta > 0, value, np.inf)


def estimate_peak(
    kl: ArrayLike,
    reward: ArrayLike,
    *,
    gold_kl: ArrayLike = (),
    gold_reward: ArrayLike = (),
    gold_std: ArrayLike | None = None,
    gold_terms: int | None = None,
    fit_intercept: bool = True,
    level: float = 0.9,
    n_boot: int = N_BOOT,
    seed: int = 0,
) -> PeakEstimate:
    """The KL at which the reward peaks, with a ``level`` interval (module docstring for the model).

    kl [n], reward [n]: the proxy reward evaluated at each checkpoint's KL (nats, >= 0); gold_kl [m],
    gold_reward [m]: gold-rated points (human eval or a gold reward model) on the same scale, m >= 0;
    gold_std [m]: their standard errors if known (e.g. a human-eval round's), else estimated from
    the gold residuals or, with too few gold points, taken as the proxy's noise. gold_terms: how many
    correction terms (offset, slope, curvature) to fit; default min(m, p - 1). n_boot, seed: the
    bootstrap's replicas and seed (same inputs and seed, same result).

    Never raises for too few points or no peak: those are statuses. Raises ValueError naming the
    argument for malformed input (shapes, NaN, negative KL, level outside (0, 1), ...).
    """
    kl_values = _kl_array(kl, "kl")
    rewards = _reward_array(reward, "reward", kl_values.size, "kl")
    gold_kls = _kl_array(gold_kl, "gold_kl")
    gold_rewards = _reward_array(gold_reward, "gold_reward", gold_kls.size, "gold_kl")
    p = 3 if fit_intercept else 2
    if gold_std is not None:
        gold_stds = _reward_array(gold_std, "gold_std", gold_kls.size, "gold_kl")
        if (gold_stds <= 0).any():
            raise ValueError("gold_std must be > 0")
    if gold_terms is None:
        gold_terms = min(gold_kls.size, p - 1)
    if not 0 <= gold_terms <= min(gold_kls.size, p):
        raise ValueError(
            f"gold_terms must be between 0 and min(gold points, {p}) = {min(gold_kls.size, p)},"
            f" got {gold_terms}"
        )
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_boot < 100:
        raise ValueError(f"n_boot must be >= 100, got {n_boot}")
    base = {"level": level, "n_proxy": kl_values.size, "n_gold": gold_kls.size}

    d = np.sqrt(kl_values)
    if not _enough_points(d, fit_intercept):
        return PeakEstimate(
            status="too_few_points",
            message=(
                f"Too few evaluations to fit the curve: {kl_values.size} given, at least {p + 1} at"
                " two or more different KL values above zero are needed."
            ),
            **base,
        )
    proxy = fit_gao_curve(kl_values, rewards, fit_intercept=fit_intercept)
    x = _design(d, fit_intercept)
    theta_p = np.array(([proxy.intercept] if fit_intercept else []) + [proxy.alpha, proxy.beta])

    # Gold correction: weighted least squares of the gold residuals on the first gold_terms columns.
    gold_d = np.sqrt(gold_kls)
    x_gold = _design(gold_d, fit_intercept)
    c = x_gold[:, :gold_terms]
    weights = 1.0 / gold_stds**2 if gold_std is not None else np.ones(gold_kls.size)
    solve_c = (
        np.linalg.pinv(c.T @ (weights[:, None] * c)) @ (c.T * weights)
        if gold_terms
        else np.zeros((0, gold_kls.size))
    )  # [k, m]: correction = solve_c @ residuals
    residuals = gold_rewards - x_gold @ theta_p
    correction = solve_c @ residuals
    theta = theta_p.copy()
    theta[:gold_terms] += correction
    gold_dof = gold_kls.size - gold_terms
    gold_fit_std = (
        float(np.sqrt(np.sum(weights * (residuals - c @ correction) ** 2) / gold_dof))
        if gold_dof > 0 and gold_std is None
        else None
    )

    # Parametric bootstrap: sigma from its scaled-inverse-chi2 law, noise, refit (all linear).
    rng = np.random.default_rng(seed)
    solve_p = np.linalg.pinv(x)  # [p, n]
    sigma_p = proxy.residual_std * np.sqrt(proxy.dof / rng.chisquare(proxy.dof, n_boot))
    theta_pb = theta_p + (sigma_p[:, None] * rng.standard_normal((n_boot, d.size))) @ solve_p.T
    theta_b = theta_pb.copy()
    if gold_terms:
        if gold_std is not None:
            gold_sigma = np.broadcast_to(gold_stds, (n_boot, gold_kls.size))
        elif gold_fit_std is not None:
            draw = gold_fit_std * np.sqrt(gold_dof / rng.chisquare(gold_dof, n_boot))
            gold_sigma = np.broadcast_to(draw[:, None], (n_boot, gold_kls.size))
        else:  # no residual left to tell the gold noise: take the proxy's
            gold_sigma = np.broadcast_to(sigma_p[:, None], (n_boot, gold_kls.size))
        gold_b = x_gold @ theta + gold_sigma * rng.standard_normal((n_boot, gold_kls.size))
        theta_b[:, :gold_terms] += (gold_b - theta_pb @ x_gold.T) @ solve_c.T
    peaks = _peak_kl_array(theta_b[:, -2], theta_b[:, -1])
    tail = (1.0 - level) / 2.0
    # No interpolation: it would subtract infinities when the upper end has no peak.
    low, high = (float(v) for v in np.quantile(peaks, [tail, 1.0 - tail], method="inverted_cdf"))
    no_peak_share = float(np.mean(np.isinf(peaks)))

    alpha, beta = float(theta[-2]), float(theta[-1])
    intercept = float(theta[0]) if fit_intercept else 0.0
    source = "gold-corrected" if gold_terms else "proxy"
    common = {
        **base,
        "alpha": alpha,
        "beta": beta,
        "intercept": intercept,
        "proxy": proxy,
        "correction": tuple(float(v) for v in correction),
        "no_peak_share": no_peak_share,
        "low": low,
        "high": high,
    }
    peak_kl = gao_peak(alpha, beta)
    if peak_kl is None or not np.isfinite(peak_kl):
        return PeakEstimate(
            status="no_peak",
            message=(
                f"No peak yet: the {source} reward is still rising along the fitted curve"
                f" (beta = {beta:.3g})."
            ),
            **common,
        )
    sqrt_kl = float(np.sqrt(peak_kl))
    largest = float(max(kl_values.max(), gold_kls.max(initial=0.0)))
    beyond = peak_kl > largest
    where = "beyond the largest KL evaluated, so not reached yet" if beyond else "inside the data"
    return PeakEstimate(
        status="peak",
        message=(
            f"The {source} reward peaks at KL {peak_kl:.3g} ({level:.0%} interval {low:.3g} to"
            f" {_upper(high)}), {where}."
        ),
        kl=peak_kl,
        sqrt_kl=sqrt_kl,
        peak_reward=intercept + beta * sqrt_kl,
        beyond_data=beyond,
        **common,
    )


def _upper(high: float) -> str:
    return f"{high:.3g}" if np.isfinite(high) else "no upper bound"


def recommend_checkpoint(
    estimate: PeakEstimate | float, checkpoint_kls: Mapping[K, float]
) -> K | None:
    """The checkpoint nearest the peak: the key of ``checkpoint_kls`` (checkpoint -> its KL, nats)
    whose d = sqrt(KL) is closest to d* (the curve's own axis); on a tie, the one with the smaller KL
    (less optimised). ``estimate`` is a PeakEstimate or KL* itself; None when it has no peak (too few
    points or still rising: keep training). Raises ValueError on no checkpoints or a bad KL.
    """
    if not checkpoint_kls:
        raise ValueError("checkpoint_kls must name at least one checkpoint")
    keys = list(checkpoint_kls)
    values = _kl_array([checkpoint_kls[k] for k in keys], "checkpoint_kls")
    if isinstance(estimate, PeakEstimate):
        if estimate.status != "peak" or estimate.kl is None:
            return None
        target = estimate.kl
    else:
        target = float(estimate)
        if not (np.isfinite(target) and target >= 0):
            raise ValueError(f"estimate must be a KL >= 0 or a PeakEstimate, got {estimate}")
    distance = np.abs(np.sqrt(values) - np.sqrt(target))
    best = min(range(len(keys)), key=lambda i: (distance[i], values[i]))
    return keys[best]


@dataclass(frozen=True)
class PeakLine:
    """The stopping panel's peak line: the estimate, the run's current KL (nats; None before any),
    the checkpoint nearest the estimated peak (a key of the checkpoints given; None without a peak
    or checkpoints) and ``text``, the sentence the panel shows."""

    estimate: PeakEstimate
    current_kl: float | None
    checkpoint: object | None
    text: str


def peak_line(
    *,
    eval_kl: ArrayLike,
    eval_reward: ArrayLike,
    gold_kl: ArrayLike = (),
    gold_reward: ArrayLike = (),
    current_kl: float | None,
    checkpoint_kls: Mapping[K, float] | None = None,
    level: float = 0.9,
    n_boot: int = N_BOOT,
    seed: int = 0,
) -> PeakLine:
    """The panel's line "estimated peak at KL x (interval), current KL y" from the evaluated proxy
    reward [n] at its KL [n] (nats), corrected by gold (human-rated) points [m] (``estimate_peak``),
    and the checkpoint nearest the peak (``recommend_checkpoint`` over ``checkpoint_kls``: key ->
    KL).

    Worked example: the noise-free curve alpha 1, beta 0.5 (KL* = e^2 = 7.389) evaluated at KL 0.5
    .. 15, current KL 15, checkpoints at KL 4, 7 and 12: "Estimated peak at KL 7.39 (90% interval
    7.39 to 7.39), current KL 15: past the peak; checkpoint nearest the peak: 7" (7 is nearest on
    the d = sqrt(KL) axis). Malformed input raises ValueError naming the argument (``estimate_peak``).
    """
    if current_kl is not None and not (np.isfinite(current_kl) and current_kl >= 0):
        raise ValueError(f"current_kl must be a KL >= 0 (nats) or None, got {current_kl}")
    estimate = estimate_peak(
        eval_kl,
        eval_reward,
        gold_kl=gold_kl,
        gold_reward=gold_reward,
        level=level,
        n_boot=n_boot,
        seed=seed,
    )
    now = "no KL logged yet" if current_kl is None else f"current KL {current_kl:.3g}"
    checkpoint = None
    if estimate.status == "peak" and estimate.kl is not None:
        assert estimate.low is not None and estimate.high is not None
        where = ""
        if current_kl is not None:
            where = ": past the peak" if current_kl > estimate.kl else ": before the peak"
        text = (
            f"Estimated peak at KL {estimate.kl:.3g} ({level:.0%} interval {estimate.low:.3g} to "
            f"{_upper(estimate.high)}), {now}{where}"
        )
        if checkpoint_kls:
            checkpoint = recommend_checkpoint(estimate, checkpoint_kls)
            text += f"; checkpoint nearest the peak: {checkpoint}"
    elif estimate.status == "no_peak":
        text = f"No peak estimated yet: the reward is still rising along the fitted curve, {now}"
    else:
        text = (
            f"Too few evaluations to estimate the peak ({estimate.n_proxy}; at least "
            f"4 at two or more KL values above zero), {now}"
        )
    gold = f" (corrected by {estimate.n_gold} gold-rated point{'s' * (estimate.n_gold != 1)})"
    return PeakLine(
        estimate, current_kl, checkpoint, text + (gold if estimate.n_gold else "") + "."
    )
