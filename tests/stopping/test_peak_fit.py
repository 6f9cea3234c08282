"""The over-optimisation peak (monitoring.stats.peak): Gao et al.'s R(d) = r0 + d (alpha - beta ln d),
d = sqrt(KL), fitted to the proxy reward, corrected by gold points, with KL* = exp(2 (alpha/beta - 1)).

Synthetic curves have a known peak. The main one: alpha = 1, beta = 0.5, r0 = 0.2, so d* = e and
KL* = e^2 = 7.389, evaluated at 12 KLs evenly from 0.5 to 15.
"""

import math

import numpy as np
import pytest

from monitoring.stats.peak import (
    PeakEstimate,
    estimate_peak,
    fit_gao_curve,
    gao_curve,
    gao_peak,
    recommend_checkpoint,
)

KL = np.linspace(0.5, 15, 12)
TRUE_KL = math.e**2


def _curve(kl, alpha=1.0, beta=0.5, r0=0.2):
    return gao_curve(kl, alpha, beta, r0)


def test_peak_formula_by_hand():
    """dR/dd = alpha - beta ln d - beta = 0 -> d* = exp(alpha/beta - 1): alpha 1, beta 0.5 -> d* = e,
    KL* = e^2; alpha = beta -> d* = 1, KL* = 1; beta <= 0 -> no peak (None)."""
    assert gao_peak(1.0, 0.5) == pytest.approx(math.e**2)
    assert gao_peak(0.5, 0.5) == pytest.approx(1.0)
    assert gao_peak(1.0, 0.0) is None
    assert gao_peak(1.0, -0.2) is None


def test_curve_by_hand():
    """R(0) = r0 (d ln d -> 0); at KL = e^2 (d = e): R = 0.2 + e (1 - 0.5 ln e) = 0.2 + e / 2; at
    KL = 1 (d = 1, ln d = 0): R = 0.2 + 1."""
    assert _curve([0.0, TRUE_KL, 1.0]).tolist() == pytest.approx([0.2, 0.2 + math.e / 2, 1.2])


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_noise_free_curve_recovers_the_peak_exactly(fit_intercept):
    """Exact data: the fit returns alpha 1, beta 0.5 and KL* = e^2 to 1e-9, the peak's reward
    r0 + beta d* = r0 + e / 2, and a zero-width interval. Without an intercept the data start at 0."""
    r0 = 0.2 if fit_intercept else 0.0
    result = estimate_peak(KL, _curve(KL, r0=r0), fit_intercept=fit_intercept, n_boot=200)
    assert result.status == "peak" and not result.beyond_data
    assert (result.alpha, result.beta, result.intercept) == pytest.approx((1.0, 0.5, r0))
    assert result.kl == pytest.approx(TRUE_KL, rel=1e-9)
    assert result.sqrt_kl == pytest.approx(math.e, rel=1e-9)
    assert result.peak_reward == pytest.approx(r0 + math.e / 2)
    assert result.low == pytest.approx(TRUE_KL, rel=1e-6)
    assert result.high == pytest.approx(TRUE_KL, rel=1e-6)
    assert "peaks at KL 7.39" in result.message


def test_noisy_curves_recover_the_peak_within_tolerance():
    """Noise sd 0.05 on rewards up to 1.56 (100 runs, seeds fixed): the median relative error of KL*
    is under 10% and 90% of runs are within 25% (measured: 5.0% and 17.8%); every interval holds its
    estimate."""
    errors = []
    for i in range(100):
        rng = np.random.default_rng(1000 + i)
        result = estimate_peak(KL, _curve(KL) + rng.normal(0, 0.05, KL.size), n_boot=200, seed=i)
        assert result.status == "peak"
        assert result.low <= result.kl <= result.high
        errors.append(abs(result.kl / TRUE_KL - 1))
    assert np.median(errors) < 0.10
    assert np.quantile(errors, 0.9) < 0.25


@pytest.mark.parametrize(("n_points", "noise"), [(12, 0.05), (8, 0.1)])
def test_interval_coverage(n_points, noise):
    """Over 300 synthetic runs the 90% interval holds the true KL* on 85-95% of them (3 standard
    errors of a 90% rate over 300 runs: +-0.052). Measured: 0.900 (12 points, sd 0.05) and 0.900
    (8 points, sd 0.1; there 47 of 300 intervals have no upper bound: some replicas have no peak)."""
    rng = np.random.default_rng(0)
    kls = np.linspace(0.5, 15, n_points)
    covered = 0
    for i in range(300):
        result = estimate_peak(
            kls, _curve(kls) + rng.normal(0, noise, n_points), n_boot=1000, seed=i
        )
        covered += result.low <= TRUE_KL <= result.high
    assert 0.85 <= covered / 300 <= 0.95


# Proxy: alpha 1.0, beta 0.3 -> KL* = exp(2 (1/0.3 - 1)) = 106, far beyond the data. Gold falls behind
# by 0.4 d and sits 0.1 higher: alpha 0.6, beta 0.3 -> KL* = exp(2 (2 - 1)) = e^2.
PROXY_KL = np.linspace(0.5, 15, 15)
GOLD_KL = np.array([1.0, 4.0, 9.0, 14.0])


def _proxy(kl):
    return gao_curve(kl, 1.0, 0.3, 0.2)


def _gold(kl):
    return gao_curve(kl, 0.6, 0.3, 0.3)


def test_gold_points_correct_the_proxy_peak():
    """Alone, the proxy's fitted peak is at KL 106, seven times the largest KL evaluated (15): not
    determined (still rising; more than MAX_EXTRAPOLATION = 2 times beyond the data); four exact
    gold points give the correction offset +0.1 and slope -0.4 and move the peak to e^2, inside
    the data."""
    proxy_only = estimate_peak(PROXY_KL, _proxy(PROXY_KL), n_boot=200)
    assert proxy_only.fitted_kl == pytest.approx(math.exp(2 * (1 / 0.3 - 1)))
    assert proxy_only.status == "not_determined" and proxy_only.reason == "still_rising"
    assert proxy_only.kl is None and "106" not in proxy_only.message
    corrected = estimate_peak(
        PROXY_KL, _proxy(PROXY_KL), gold_kl=GOLD_KL, gold_reward=_gold(GOLD_KL), n_boot=200
    )
    assert corrected.correction == pytest.approx((0.1, -0.4))
    assert corrected.kl == pytest.approx(TRUE_KL, rel=1e-9)
    assert not corrected.beyond_data and "gold-corrected" in corrected.message


def test_one_gold_point_only_shifts_the_level():
    """With one gold point only the offset is corrected (gold - proxy at KL 4: 0.1 - 0.4 * 2 = -0.7),
    which cannot move the peak: the fitted KL* stays the proxy's (106, so not determined)."""
    result = estimate_peak(
        PROXY_KL, _proxy(PROXY_KL), gold_kl=[4.0], gold_reward=_gold(np.array([4.0])), n_boot=200
    )
    assert result.correction == pytest.approx((-0.7,))
    assert result.fitted_kl == pytest.approx(math.exp(2 * (1 / 0.3 - 1)))
    assert result.status == "not_determined"


@pytest.mark.parametrize("gold_std", [None, 0.05])
def test_gold_corrected_interval_coverage(gold_std):
    """Noise sd 0.05 on 15 proxy and 4 gold points, gold noise estimated (1 residual degree of
    freedom) or given: the 90% interval holds KL* = e^2 on 85-97% of 300 runs (measured 0.927 and
    0.887)."""
    rng = np.random.default_rng(0)
    covered = 0
    for i in range(300):
        result = estimate_peak(
            PROXY_KL,
            _proxy(PROXY_KL) + rng.normal(0, 0.05, PROXY_KL.size),
            gold_kl=GOLD_KL,
            gold_reward=_gold(GOLD_KL) + rng.normal(0, 0.05, GOLD_KL.size),
            gold_std=None if gold_std is None else np.full(GOLD_KL.size, gold_std),
            n_boot=1000,
            seed=i,
        )
        covered += result.low <= TRUE_KL <= result.high
    assert 0.85 <= covered / 300 <= 0.97


@pytest.mark.parametrize(
    "kl",
    [[1.0, 2.0, 3.0], [4.0, 4.0, 4.0, 4.0, 4.0], [0.0, 0.0, 0.0, 2.0]],
    ids=["three points", "one KL", "one KL above zero"],
)
def test_too_few_points_is_a_result(kl):
    """Three points (the fit with an intercept needs 4), or every point at one KL: a result saying so,
    not an exception, with nothing estimated."""
    result = estimate_peak(kl, np.ones(len(kl)))
    assert result.status == "not_determined" and result.reason == "too_few_points"
    assert result.kl is None and result.alpha is None
    assert "Too few evaluations" in result.message
    assert recommend_checkpoint(result, {"step-100": 1.0}) is None


def test_no_peak_is_a_result():
    """A reward still rising (beta = -0.2 <= 0: convex, no maximum): not determined, still rising,
    no KL*, a message saying so; recommend_checkpoint says keep training (None)."""
    result = estimate_peak(KL, _curve(KL, alpha=0.5, beta=-0.2), n_boot=200)
    assert result.status == "not_determined" and result.reason == "still_rising"
    assert result.kl is None and result.fitted_kl is None
    assert result.beta == pytest.approx(-0.2)
    assert "still rising at KL 15" in result.message
    assert result.no_peak_share == 1.0 and math.isinf(result.high)
    assert recommend_checkpoint(result, {"step-100": 1.0}) is None


def test_same_seed_same_interval():
    """The bootstrap is seeded: equal inputs and seed give equal intervals."""
    rewards = _curve(KL) + np.random.default_rng(5).normal(0, 0.05, KL.size)
    first, second = estimate_peak(KL, rewards, seed=3), estimate_peak(KL, rewards, seed=3)
    assert (first.low, first.high) == (second.low, second.high)


def test_recommend_checkpoint_measures_on_sqrt_kl():
    """KL* = 4 (d* = 2). Checkpoints at KL 2.0 (d 1.414, 0.586 away) and 6.5 (d 2.550, 0.550 away):
    the second is nearer on the curve's axis (though farther in KL: 2.5 vs 2.0). On a tie (KL 2.25
    and 6.25, d 1.5 and 2.5, both 0.5 away) the less optimised one wins."""
    assert recommend_checkpoint(4.0, {"step-200": 2.0, "step-650": 6.5}) == "step-650"
    assert recommend_checkpoint(4.0, {"early": 2.25, "late": 6.25}) == "early"
    estimate = estimate_peak(KL, _curve(KL), n_boot=200)
    checkpoints = {100 * (i + 1): kl for i, kl in enumerate(KL)}
    assert recommend_checkpoint(estimate, checkpoints) == 600  # KL 7.09, d 2.663: nearest d* = e


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"kl": np.ones((2, 3)), "reward": np.ones(3)}, "kl"),
        ({"kl": [-0.1, 1, 2, 3], "reward": [0, 1, 2, 3]}, "kl"),
        ({"kl": KL, "reward": np.ones(5)}, "reward"),
        ({"kl": KL, "reward": np.full(KL.size, np.nan)}, "reward"),
        ({"kl": KL, "reward": np.ones(KL.size), "gold_kl": [1.0], "gold_reward": []}, "gold_reward"),
        ({"kl": KL, "reward": np.ones(KL.size), "gold_kl": [1.0, 2.0], "gold_reward": [1.0, 2.0],
          "gold_terms": 3}, "gold_terms"),
        ({"kl": KL, "reward": np.ones(KL.size), "gold_kl": [1.0], "gold_reward": [1.0],
          "gold_std": [0.0]}, "gold_std"),
        ({"kl": KL, "reward": np.ones(KL.size), "level": 1.5}, "level"),
        ({"kl": KL, "reward": np.ones(KL.size), "n_boot": 10}, "n_boot"),
    ],
)  # fmt: skip
def test_bad_input_names_the_argument(kwargs, argument):
    """Malformed input (wrong shape, negative KL, NaN, mismatched gold arrays, impossible settings)
    raises ValueError naming the argument."""
    with pytest.raises(ValueError, match=argument):
        estimate_peak(**kwargs)


def test_bad_checkpoints_and_fit_input():
    """No checkpoints, a negative checkpoint KL, a non-finite target; fit_gao_curve on too few points."""
    with pytest.raises(ValueError, match="checkpoint_kls"):
        recommend_checkpoint(4.0, {})
    with pytest.raises(ValueError, match="checkpoint_kls"):
        recommend_checkpoint(4.0, {"a": -1.0})
    with pytest.raises(ValueError, match="estimate"):
        recommend_checkpoint(float("inf"), {"a": 1.0})
    with pytest.raises(ValueError, match="kl"):
        fit_gao_curve([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert isinstance(estimate_peak(KL, _curve(KL), n_boot=100), PeakEstimate)
