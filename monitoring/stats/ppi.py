"""Prediction-powered estimates of a human-eval round's mean: pure NumPy/SciPy, no Django.

A judge (a reward model or an LLM) rates every one of the round's N items; reviewers rate a random
subset of n of them. The judge's mean alone is biased by however the judge is biased; the reviewers'
mean alone is unbiased but wide. Prediction-powered inference (PPI++, Angelopoulos, Duchi & Zrnic 2023,
"PPI++: Efficient Prediction-Powered Inference", arXiv:2311.01453) keeps the humans' unbiasedness and
uses the judge only to cancel noise, as far as it correlates with the humans:

    theta(lam) = lam * mean over all N items of f  +  mean over the n rated items of (Y - lam * f)

f: the judge's score, Y: the humans' score (the mean of an item's reviewers), lam in [0, 1] the
power-tuning parameter. For any fixed lam the estimate is unbiased, whatever the judge's bias; lam = 0 is
the humans' mean (the classical estimate); lam is estimated from the data to make the variance
smallest, then clipped to [0, 1] (as the paper and its reference code do), so a useless judge gets
lam ~ 0 and changes nothing.

Same estimator, paper's notation: the paper splits the items into n labelled and N - n unlabelled ones
and writes theta = mean_lab(Y - lam' f) + lam' mean_unlab(f). Here the judge's mean runs over all N
items (the rated ones too), which is the same family with lam' = lam * (1 - n/N); tests check it. With
all N items in the judge's mean the variance-optimal lam is Cov(Y, f) / Var(f), the regression slope
of the humans on the judge, whatever n/N.

Uses: ``ppi_win_rate`` (outcomes 1 win / 0.5 tie / 0 loss; the judge on the same scale or a
probability of a win) and ``ppi_usefulness`` (1-5). ``choose_estimate`` says which of the two
estimates the stopping panel should use, and why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from monitoring.stats.intervals import EstimateChoice, Interval

ArrayLike = np.ndarray | list[float] | tuple[float, ...]


@dataclass(frozen=True)
class PPIBatch:
    """Results for S rounds (or S simulations) at once; every field is an array [S].

    estimate/low/high/std_error: the prediction-powered estimate and its interval;
    classical_*: the humans-only estimate on the same rated items (lam = 0);
    lam: the power-tuning parameter used, in [0, 1]; n: rated items; n_items: N, all items;
    effective_n: n * classical variance / prediction-powered variance, the number of human-rated
    items the humans-only estimate would need for the prediction-powered interval's width.
    """

    estimate: np.ndarray
    low: np.ndarray
    high: np.ndarray
    std_error: np.ndarray
    classical_estimate: np.ndarray
    classical_low: np.ndarray
    classical_high: np.ndarray
    classical_std_error: np.ndarray
    lam: np.ndarray
    effective_n: np.ndarray
    n: np.ndarray
    n_items: int


@dataclass(frozen=True)
class PPIEstimate:
    """One round: the prediction-powered interval beside the humans-only one.

    ppi, classical: estimate and interval (``n`` of both: the human-rated items). lam: the
    power-tuning parameter in [0, 1]. effective_n: human ratings the humans-only interval would need
    to be as narrow (>= n; at most about N). std_error, classical_std_error: the standard errors.
    """

    ppi: Interval
    classical: Interval
    lam: float
    effective_n: float
    n_items: int
    std_error: float
    classical_std_error: float

    @property
    def ratings_saved(self) -> float:
        """effective_n - n: the human ratings the judge is worth in this round."""
        return self.effective_n - self.ppi.n

    def as_dict(self) -> dict[str, object]:
        return {
            "ppi": self.ppi.as_dict(),
            "classical": self.classical.as_dict(),
            "lam": self.lam,
            "effective_n": self.effective_n,
            "n_items": self.n_items,
        }


def _z(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return float(ndtri(0.5 + confidence / 2))


def _check_inputs(
    judge: np.ndarray, human: np.ndarray, inclusion_probability: float | ArrayLike | None
) -> np.ndarray:
    """Validate the [S, N] inputs; return the inclusion probabilities as [S, N] (ones if None)."""
    if judge.ndim != 2 or judge.shape != human.shape:
        raise ValueError(
            "judge_scores and human_scores must have the same shape (N items, NaN where no human "
            f"rated), got {judge.shape} and {human.shape}"
        )
    if not np.isfinite(judge).all():
        raise ValueError("judge_scores must be finite numbers for every item (the judge rates all)")
    if np.isinf(human).any():
        raise ValueError("human_scores must be finite numbers, or NaN for an item no human rated")
    n = (~np.isnan(human)).sum(axis=1)
    if n.min() < 2:
        row = int(np.argmin(n))
        raise ValueError(
            f"need at least 2 human-rated items to estimate a variance, got {int(n[row])}"
            + (f" in row {row}" if judge.shape[0] > 1 else "")
        )
    if inclusion_probability is None:
        return np.ones_like(judge)
    pi = np.broadcast_to(np.asarray(inclusion_probability, dtype=float), judge.shape)
    rated_pi = pi[~np.isnan(human)]
    if not ((rated_pi > 0) & (rated_pi <= 1)).all():
        raise ValueError("inclusion_probability must be in (0, 1] for every rated item")
    return pi


def ppi_mean_batch(
    judge_scores: ArrayLike,
    human_scores: ArrayLike,
    *,
    inclusion_probability: float | ArrayLike | None = None,
    confidence: float = 0.95,
    bounds: tuple[float, float] | None = None,
) -> PPIBatch:
    """PPI++ estimates of S means at once (S rounds, or S simulated rounds in a test).

    judge_scores: [S, N] (or [N]) the judge's score of every item. human_scores: same shape, the
    humans' score of each rated item (the mean of its reviewers), NaN where no human rated it.
    inclusion_probability: the chance each item had of being sent to humans, a number or [S, N] /
    [N]; None or a constant: a uniform random subset (any constant gives the same result: given its
    size, the subset is a uniform draw). Unequal probabilities weight each rated item by 1/pi (the
    Hajek estimator; the variance treats the draws as independent coin flips, Poisson sampling).
    bounds: (low, high) the interval is clipped to, e.g. (0, 1) for a win rate.

    With weights w_i = 1/pi_i on rated items (0 elsewhere), a_i = N w_i / sum(w) (N/n when uniform):
        theta(lam) = lam * mean(f) + (Ybar_w - lam * fbar_w)
    and its linearisation theta - truth ~ (1/N) sum_i psi_i(lam), psi_i = lam * g_i + h_i with
        g_i = (f_i - mean(f)) - a_i (f_i - fbar_w),   h_i = a_i (Y_i - Ybar_w)
    so Var(theta) ~ sum(psi^2) / N^2 (for a uniform subset: Var(Y - lam f)/n + (2 lam Cov(Y, f)
    - lam^2 Var(f))/N; at lam = 0 exactly the classical Var(Y)/n, population variances, ddof 0).
    The variance is quadratic in lam and smallest at lam* = -sum(g h) / sum(g^2); lam is lam*
    clipped to [0, 1] (0 when the judge does not vary), so the prediction-powered variance is never
    above the classical one. Intervals: estimate -/+ z * std_error (normal, as in the paper).
    """
    z = _z(confidence)
    f = np.atleast_2d(np.asarray(judge_scores, dtype=float))
    y = np.atleast_2d(np.asarray(human_scores, dtype=float))
    pi = _check_inputs(f, y, inclusion_probability)
    rated = ~np.isnan(y)
    n_items = f.shape[1]
    y0 = np.where(rated, y, 0.0)
    w = np.where(rated, 1.0 / np.where(rated, pi, 1.0), 0.0)
    w_sum = w.sum(axis=1, keepdims=True)
    a = n_items * w / w_sum
    f_mean = f.mean(axis=1, keepdims=True)
    f_w = (w * f).sum(axis=1, keepdims=True) / w_sum
    y_w = (w * y0).sum(axis=1, keepdims=True) / w_sum
    g = (f - f_mean) - a * (f - f_w)
    h = a * (y0 - y_w)
    gg, gh, hh = (g * g).sum(axis=1), (g * h).sum(axis=1), (h * h).sum(axis=1)
    # A judge that does not vary (or every item rated) leaves g ~ 0: nothing to learn, lam = 0.
    informative = gg > 1e-12 * np.maximum(hh, 1.0)
    lam = np.clip(np.where(informative, -gh / np.where(informative, gg, 1.0), 0.0), 0.0, 1.0)
    estimate = lam * f_mean[:, 0] + y_w[:, 0] - lam * f_w[:, 0]
    n = rated.sum(axis=1)
    # n / (n - 1): the usual small-sample correction, so that the classical interval is the
    # textbook mean -/+ z * s / sqrt(n) with s the sample standard deviation (ddof 1).
    scale = n / (n - 1) / n_items**2
    var = np.maximum(lam * lam * gg + 2 * lam * gh + hh, 0.0) * scale
    var_classical = hh * scale
    effective_n = np.where(var > 0, n * var_classical / np.where(var > 0, var, 1.0), n)
    se, se_classical = np.sqrt(var), np.sqrt(var_classical)
    lo, hi = bounds if bounds is not None else (-np.inf, np.inf)
    return PPIBatch(
        estimate=estimate,
        low=np.clip(estimate - z * se, lo, hi),
        high=np.clip(estimate + z * se, lo, hi),
        std_error=se,
        classical_estimate=y_w[:, 0],
        classical_low=np.clip(y_w[:, 0] - z * se_classical, lo, hi),
        classical_high=np.clip(y_w[:, 0] + z * se_classical, lo, hi),
        classical_std_error=se_classical,
        lam=lam,
        effective_n=effective_n.astype(float),
        n=n,
        n_items=n_items,
    )


def ppi_mean(
    judge_scores: ArrayLike,
    human_scores: ArrayLike,
    *,
    inclusion_probability: float | ArrayLike | None = None,
    confidence: float = 0.95,
    bounds: tuple[float, float] | None = None,
) -> PPIEstimate:
    """PPI++ estimate of one round's mean. judge_scores, human_scores: [N] (human NaN where not
    rated); the rest as ``ppi_mean_batch``, whose docstring gives the equations."""
    f = np.asarray(judge_scores, dtype=float)
    y = np.asarray(human_scores, dtype=float)
    if f.ndim != 1:
        raise ValueError(f"judge_scores must be 1-d (one score per item), got shape {f.shape}")
    batch = ppi_mean_batch(
        f,
        y,
        inclusion_probability=inclusion_probability,
        confidence=confidence,
        bounds=bounds,
    )
    n = int(batch.n[0])
    return PPIEstimate(
        ppi=Interval(float(batch.estimate[0]), float(batch.low[0]), float(batch.high[0]), n),
        classical=Interval(
            float(batch.classical_estimate[0]),
            float(batch.classical_low[0]),
            float(batch.classical_high[0]),
            n,
        ),
        lam=float(batch.lam[0]),
        effective_n=float(batch.effective_n[0]),
        n_items=batch.n_items,
        std_error=float(batch.std_error[0]),
        classical_std_error=float(batch.classical_std_error[0]),
    )


def _check_range(values: np.ndarray, low: float, high: float, name: str, meaning: str) -> None:
    known = values[~np.isnan(values)]
    if known.size and (known.min() < low or known.max() > high):
        raise ValueError(f"{name} must be in [{low:g}, {high:g}] ({meaning})")


def ppi_win_rate(
    judge_outcomes: ArrayLike,
    human_outcomes: ArrayLike,
    *,
    inclusion_probability: float | ArrayLike | None = None,
    confidence: float = 0.95,
) -> PPIEstimate:
    """The checkpoint's win rate against the baseline, prediction-powered.

    human_outcomes: [N] per item 1 win / 0.5 tie / 0 loss from the checkpoint's side (the mean over
    the item's reviewers), NaN where no human rated it. judge_outcomes: [N] the judge's outcome on the
    same scale, or its probability that the checkpoint wins (e.g. the mean of its verdicts in both
    orders). The interval is clipped to [0, 1]. The humans-only interval is the normal one
    (mean -/+ z sd/sqrt(n)) over the same unit, the item, so the two differ only by the judge;
    ``win_rates.win_rate`` (Wilson's interval at the item means' effective sample size) is better
    for few items near 0 or 1.
    """
    f = np.asarray(judge_outcomes, dtype=float)
    y = np.asarray(human_outcomes, dtype=float)
    _check_range(f, 0, 1, "judge_outcomes", "1 win, 0.5 tie, 0 loss, or a probability of a win")
    _check_range(y, 0, 1, "human_outcomes", "1 win, 0.5 tie, 0 loss")
    return ppi_mean(
        f, y, inclusion_probability=inclusion_probability, confidence=confidence, bounds=(0, 1)
    )


def ppi_usefulness(
    judge_ratings: ArrayLike,
    human_ratings: ArrayLike,
    *,
    inclusion_probability: float | ArrayLike | None = None,
    confidence: float = 0.95,
) -> PPIEstimate:
    """Mean 1-5 usefulness, prediction-powered. human_ratings: [N] per item the mean of its
    reviewers' ratings, NaN where none; judge_ratings: [N] the judge's 1-5 rating (or its expected
    rating). The interval is clipped to [1, 5]."""
    f = np.asarray(judge_ratings, dtype=float)
    y = np.asarray(human_ratings, dtype=float)
    _check_range(f, 1, 5, "judge_ratings", "usefulness from 1 to 5")
    _check_range(y, 1, 5, "human_ratings", "usefulness from 1 to 5")
    return ppi_mean(
        f, y, inclusion_probability=inclusion_probability, confidence=confidence, bounds=(1, 5)
    )


# --- Which estimate the stopping panel uses -------------------------------------------------------


NO_HUMAN_RATING = "No human rating yet, so there is no human estimate and no interval."


def _span(interval: Interval) -> str:
    return f"{interval.estimate:.3f} [{interval.low:.3f}, {interval.high:.3f}]"


def choose_estimate(
    *,
    classical: Interval,
    ppi: PPIEstimate | None,
    judge_kappa: float | None,
    overlap_items: int,
    kappa_threshold: float,
    min_overlap: int = 20,
) -> EstimateChoice:
    """Use the prediction-powered estimate only when the judge has earned it on this round.

    classical: the humans-only estimate. ppi: the prediction-powered one (None: no judge in the
    round). judge_kappa: Cohen's kappa between the judge and the humans on the items both rated
    (None or NaN: not measurable). overlap_items: how many items that kappa rests on.
    kappa_threshold: the reviewer's bar, in [-1, 1]. min_overlap: fewer shared items than this and
    the kappa is too uncertain to trust (on 10 items a kappa of 0.7 is compatible with ~0.3).
    A classical interval on no item (n = 0): no human rating, so no estimate at all to use.

    The PPI interval is valid for any judge (a poor judge only widens it toward the classical one);
    the kappa bar is the reviewer's trust rule on top of that, and every refusal says which rule.
    """
    if not -1 <= kappa_threshold <= 1:
        raise ValueError(f"kappa_threshold must be in [-1, 1], got {kappa_threshold}")
    if overlap_items < 0 or min_overlap < 1:
        raise ValueError("overlap_items must be >= 0 and min_overlap >= 1")

    def human(why: str) -> EstimateChoice:
        return EstimateChoice(
            "human", classical, f"Human-only estimate {_span(classical)} used: {why}."
        )

    if classical.n == 0:
        return EstimateChoice("human", classical, NO_HUMAN_RATING)
    if ppi is None:
        return human("this round has no judge")
    if judge_kappa is None or math.isnan(judge_kappa):
        return human(
            "the judge's agreement with the reviewers cannot be measured on this round "
            f"({overlap_items} shared items, or every verdict in one category)"
        )
    if overlap_items < min_overlap:
        return human(
            f"the judge's kappa {judge_kappa:.2f} rests on only {overlap_items} shared items "
            f"(at least {min_overlap} needed)"
        )
    if judge_kappa < kappa_threshold:
        return human(
            f"the judge's kappa with the reviewers is {judge_kappa:.2f} on {overlap_items} shared "
            f"items, below your threshold {kappa_threshold:.2f}"
        )
    return EstimateChoice(
        "ppi",
        ppi.ppi,
        f"Prediction-powered estimate {_span(ppi.ppi)} used: the judge's kappa with the reviewers "
        f"is {judge_kappa:.2f} on {overlap_items} shared items, at or above your threshold "
        f"{kappa_threshold:.2f}; it is worth {ppi.effective_n:.0f} human ratings from "
        f"{ppi.ppi.n} (human-only: {_span(ppi.classical)}).",
    )


# --- Which items reviewers rate --------------------------------------------------------------------


def human_subset(
    n_items: int, *, fraction: float, minimum: int, seed: int
) -> tuple[np.ndarray, float]:
    """The items a round sends to reviewers when a judge rates them all: a simple random sample
    without replacement of n = min(N, max(minimum, ceil(fraction * N))) of the N items, drawn with
    ``seed`` (the same seed, the same subset). Returns (mask [N] bool, inclusion probability n / N,
    the same for every item of a simple random sample).

    fraction in (0, 1]; minimum >= 2 (``ppi_mean`` needs two rated items for a variance).
    """
    if n_items < 0:
        raise ValueError(f"n_items must be >= 0, got {n_items}")
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    if minimum < 2:
        raise ValueError(f"minimum must be >= 2 (a variance needs two ratings), got {minimum}")
    n = min(n_items, max(minimum, math.ceil(fraction * n_items - 1e-9)))
    mask = np.zeros(n_items, dtype=bool)
    mask[np.random.default_rng(seed).choice(n_items, size=n, replace=False)] = True
    return mask, (n / n_items if n_items else 1.0)
