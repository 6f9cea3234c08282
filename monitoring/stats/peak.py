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

When the peak counts as determined. A least-squares fit always returns numbers, and on a curve that
has not turned yet (or is noise) they are absurd: beta a hair above zero puts KL* at 1e+136. So the
estimate's status is ``peak`` only when all of these hold, else ``not_determined`` with a ``reason``
(and then no checkpoint is recommended from it):

- ``too_few_points``: enough points to fit the curve and its noise (above);
- ``flat``: the evaluated reward changes with KL beyond its noise: the F-test of the curve's d
  terms against a constant (against zero without an intercept) has p <= 1 - level;
- ``still_rising`` / ``falling``: the fitted beta > 0 (else the curve never turns down: still
  rising at the largest KL evaluated, or falling across the whole range without a turn);
- ``still_rising``: KL* at most ``MAX_EXTRAPOLATION`` (2) times the largest KL evaluated: the form
  is fitted, not known, and a turn further out than that is an extrapolation the data cannot check
  (a KL* between the largest KL and twice it is reported, ``beyond_data``: not reached yet);
- ``falling``: KL* at least the smallest KL evaluated above zero over ``MAX_EXTRAPOLATION``: a turn
  further towards zero is the same extrapolation on the other side (the reward falls from the first
  evaluation on; alpha / beta very negative puts KL* at 1e-120);
- ``uncertain``: beta significantly > 0 and the interval bounded: its upper end finite and at most
  ``MAX_EXTRAPOLATION`` times the largest KL evaluated. An infinite upper end means more than
  (1 - level) / 2 of the replicas had no peak (beta <= 0), so this is beta > 0 at one-sided level
  (1 + level) / 2 by the bootstrap.

The panel's sentence for each is ``peak_line``'s; its numbers stay within the evaluated range (an
interval's lower end below the smallest KL evaluated over ``MAX_EXTRAPOLATION`` is printed as "under"
that value).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from scipy.special import fdtrc

K = TypeVar("K")
ArrayLike = np.ndarray | Sequence[float]
STATUSES = ("peak", "not_determined")
# Why a peak is not determined (module docstring), each with the panel's short phrase.
REASONS = {
    "too_few_points": "too few evaluations",
    "flat": "flat",
    "still_rising": "still rising at the largest KL evaluated",
    "falling": "falling from the smallest KL evaluated",
    "uncertain": "the turn is within the noise",
}
# A peak (or an interval's upper end) more than this many times the largest KL evaluated, or a peak
# under the smallest KL evaluated above zero divided by it, is an extrapolation of the fitted form
# the data cannot check: not determined.
MAX_EXTRAPOLATION = 2.0
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
    and reports the peak not determined, reason "too_few_points", instead)."""
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

    status: ``peak`` (kl, low, high set: the peak is determined) or ``not_determined`` (kl None;
    ``reason`` says why: a key of ``REASONS``, module docstring); ``message`` says it in words.
    kl: KL* (nats); low, high: its ``level`` interval (high may be inf: some replicas had no peak;
    also set when not determined, when a fit was made); fitted_kl: the fitted curve's own KL*
    whatever the status (None when beta <= 0 or nothing was fitted; may be huge or inf: never for
    display); sqrt_kl: d*; peak_reward: the curve's value at the peak; alpha, beta, intercept: the
    curve used (gold-corrected when there were gold points); proxy: the proxy-only fit; correction:
    the gold correction's coefficients (c0, c1, ...), empty without gold; no_peak_share: share of
    bootstrap replicas without a peak; flat_p: the F-test's p-value of the proxy curve against a
    constant; beyond_data: KL* lies beyond the largest KL evaluated (extrapolated, not yet
    reached); largest_kl, smallest_kl: the largest KL evaluated and the smallest above zero (proxy
    and gold points; None without any).
    """

    status: str
    message: str
    level: float
    n_proxy: int
    n_gold: int
    reason: str | None = None
    kl: float | None = None
    low: float | None = None
    high: float | None = None
    fitted_kl: float | None = None
    sqrt_kl: float | None = None
    peak_reward: float | None = None
    alpha: float | None = None
    beta: float | None = None
    intercept: float | None = None
    proxy: GaoFit | None = None
    correction: tuple[float, ...] = field(default_factory=tuple)
    no_peak_share: float | None = None
    flat_p: float | None = None
    beyond_data: bool = False
    largest_kl: float | None = None
    smallest_kl: float | None = None

    @property
    def determined(self) -> bool:
        return self.status == "peak"


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

    Never raises for too few points, a flat curve or no peak: the status is ``not_determined``
    with its reason (module docstring). Raises ValueError naming the argument for malformed input
    (shapes, NaN, negative KL, level outside (0, 1), ...).
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
    evaluated = np.concatenate([kl_values, gold_kls])
    positive = evaluated[evaluated > 0]
    base = {
        "level": level, "n_proxy": kl_values.size, "n_gold": gold_kls.size,
        "largest_kl": float(evaluated.max()) if evaluated.size else None,
        "smallest_kl": float(positive.min()) if positive.size else None,
    }  # fmt: skip

    d = np.sqrt(kl_values)
    if not _enough_points(d, fit_intercept):
        return PeakEstimate(
            status="not_determined",
            reason="too_few_points",
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
    peak_kl = gao_peak(alpha, beta)
    common = {
        **base,
        "alpha": alpha,
        "beta": beta,
        "intercept": intercept,
        "proxy": proxy,
        "correction": tuple(float(v) for v in correction),
        "no_peak_share": no_peak_share,
        "flat_p": _flat_p(rewards, proxy, fit_intercept),
        "low": low,
        "high": high,
        "fitted_kl": peak_kl,
    }
    reason = _undetermined_reason(common, level)
    if reason is not None:
        return PeakEstimate(
            status="not_determined",
            reason=reason,
            message=_undetermined_message(reason, source, common),
            **common,
        )
    assert peak_kl is not None
    sqrt_kl = float(np.sqrt(peak_kl))
    beyond = peak_kl > common["largest_kl"]
    where = "beyond the largest KL evaluated, so not reached yet" if beyond else "inside the data"
    if peak_kl < common["smallest_kl"]:
        where = "just before the smallest KL evaluated above zero"
    bounds = _kl_interval_text(low, high, common["smallest_kl"])
    return PeakEstimate(
        status="peak",
        message=(
            f"The {source} reward peaks at KL {_kl_text(peak_kl, common['smallest_kl'])}"
            f" ({level:.0%} interval {bounds}), {where}."
        ),
        kl=peak_kl,
        sqrt_kl=sqrt_kl,
        peak_reward=intercept + beta * sqrt_kl,
        beyond_data=beyond,
        **common,
    )


def _flat_p(rewards: np.ndarray, fit: GaoFit, fit_intercept: bool) -> float:
    """p-value of the F-test of the curve's d terms (alpha, beta) against a constant reward (zero
    without an intercept): small when the reward changes with KL beyond its noise; 1 when nothing
    is explained, 0 when the fit is exact and explains something."""
    base = rewards - rewards.mean() if fit_intercept else rewards
    rss_null = float(np.sum(base**2))
    rss = fit.residual_std**2 * fit.dof
    explained = max(rss_null - rss, 0.0)
    if explained <= 1e-12 * max(rss_null, 1e-300):
        return 1.0
    if rss <= 0:
        return 0.0
    return float(fdtrc(2, fit.dof, (explained / 2) / (rss / fit.dof)))


def _undetermined_reason(fit: Mapping[str, Any], level: float) -> str | None:
    """Which test of the module docstring the fit fails first (a ``REASONS`` key), None when the
    peak is determined."""
    largest = fit["largest_kl"]
    limit = MAX_EXTRAPOLATION * largest
    if fit["flat_p"] > 1.0 - level:
        return "flat"
    peak_kl = fit["fitted_kl"]
    if peak_kl is None or not np.isfinite(peak_kl):
        d_max = np.sqrt(largest)
        slope = fit["alpha"] - fit["beta"] * (1.0 + np.log(d_max))  # dR/dd at the largest KL
        return "still_rising" if slope > 0 or fit["beta"] > 0 else "falling"
    if peak_kl > limit:
        return "still_rising"
    if peak_kl < fit["smallest_kl"] / MAX_EXTRAPOLATION:
        return "falling"  # a turn before the data: extrapolated towards zero just as far
    if not fit["high"] <= limit:
        return "still_rising" if peak_kl > largest else "uncertain"
    return None


def _undetermined_message(reason: str, source: str, fit: Mapping[str, Any]) -> str:
    largest = f"{fit['largest_kl']:.3g}"
    return {
        "flat": (
            f"Peak not determined: the evaluated reward does not change with KL beyond its noise"
            f" (F-test p = {fit['flat_p']:.2g}) up to KL {largest}, the largest evaluated."
        ),
        "still_rising": (
            f"Peak not determined: the {source} reward is still rising at KL {largest}, the"
            " largest evaluated (no turn within twice that KL)."
        ),
        "falling": (
            f"Peak not determined: the {source} reward falls from KL {fit['smallest_kl']:.3g}, the"
            f" smallest evaluated above zero (up to {largest}); a turn, if any, lies before it."
        ),
        "uncertain": (
            f"Peak not determined: the {source} reward's turn is within its noise (the interval"
            f" on the peak's KL reaches past twice {largest}, the largest KL evaluated)."
        ),
    }[reason]


def _kl_text(value: float, smallest: float | None) -> str:
    """A KL for display: "under x" below the smallest KL evaluated over MAX_EXTRAPOLATION, so a
    far extrapolation towards zero never prints as 1e-56."""
    floor = None if smallest is None else smallest / MAX_EXTRAPOLATION
    if floor is not None and value < floor:
        return f"under {floor:.3g}"
    return f"{value:.3g}"


def _kl_interval_text(low: float, high: float, smallest: float | None) -> str:
    upper = _kl_text(high, smallest) if np.isfinite(high) else _upper(high)
    return f"{_kl_text(low, smallest)} to {upper}"


def _upper(high: float) -> str:
    return f"{high:.3g}" if np.isfinite(high) else "no upper bound"


def recommend_checkpoint(
    estimate: PeakEstimate | float, checkpoint_kls: Mapping[K, float]
) -> K | None:
    """The checkpoint nearest the peak: the key of ``checkpoint_kls`` (checkpoint -> its KL, nats)
    whose d = sqrt(KL) is closest to d* (the curve's own axis); on a tie, the one with the smaller KL
    (less optimised). ``estimate`` is a PeakEstimate or KL* itself; None when the peak is not
    determined (status ``not_determined``: too few points, flat, still rising, uncertain; nothing
    to roll back to from it). Raises ValueError on no checkpoints or a bad KL.
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
    the checkpoint nearest the estimated peak (a key of the checkpoints given; None when the peak
    is not determined or without checkpoints) and ``text``, the sentence the panel shows."""

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
    the d = sqrt(KL) axis). When the peak is not determined (``estimate_peak``'s reasons) the line
    says so with the largest KL evaluated, never the fitted KL*, and names no checkpoint: "Peak not
    yet determined: reward still rising at KL 3.2 (the largest evaluated); current KL 3.2".
    Malformed input raises ValueError naming the argument (``estimate_peak``).
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
            f"Estimated peak at KL {_kl_text(estimate.kl, estimate.smallest_kl)} ({level:.0%}"
            f" interval {_kl_interval_text(estimate.low, estimate.high, estimate.smallest_kl)}),"
            f" {now}{where}"
        )
        if checkpoint_kls:
            checkpoint = recommend_checkpoint(estimate, checkpoint_kls)
            text += f"; checkpoint nearest the peak: {checkpoint}"
    else:
        text = f"Peak not yet determined: {_undetermined_phrase(estimate)}; {now}"
    gold = f" (corrected by {estimate.n_gold} gold-rated point{'s' * (estimate.n_gold != 1)})"
    return PeakLine(
        estimate, current_kl, checkpoint, text + (gold if estimate.n_gold else "") + "."
    )


def _undetermined_phrase(estimate: PeakEstimate) -> str:
    """The panel's reason a peak is not determined, in a few words with the largest KL evaluated
    (never the fitted KL*, which can be absurd)."""
    if estimate.reason == "too_few_points" or estimate.largest_kl is None:
        return (
            f"too few evaluations ({estimate.n_proxy}; at least 4 at two or more KL values above"
            " zero)"
        )
    largest = f"KL {estimate.largest_kl:.3g} (the largest evaluated)"
    return {
        "flat": f"reward flat (no change with KL beyond its noise) up to {largest}",
        "still_rising": f"reward still rising at {largest}",
        "falling": (
            f"reward falling from KL {estimate.smallest_kl:.3g}, the smallest evaluated above zero"
            f" (up to {estimate.largest_kl:.3g})"
        ),
        "uncertain": f"the reward's turn is within its noise up to {largest}",
    }[str(estimate.reason)]
