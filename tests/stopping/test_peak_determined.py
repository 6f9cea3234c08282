"""When the peak counts as determined (monitoring.stats.peak, module docstring): a least-squares fit
always returns numbers, so an estimate is reported only when the curve has turned significantly
within reach of the data; otherwise the status is ``not_determined`` with its reason, no checkpoint
is recommended and nothing absurd (1e+136) is printed.

Synthetic curves on 12 KLs evenly from 0.5 to 15 (d = sqrt(KL) from 0.71 to 3.87), seeded noise."""

import math

import numpy as np
import pytest

from monitoring.stats.peak import (
    MAX_EXTRAPOLATION,
    estimate_peak,
    gao_curve,
    peak_line,
    recommend_checkpoint,
)

KL = np.linspace(0.5, 15, 12)
CHECKPOINTS = {f"step {10 * (i + 1)}": float(kl) for i, kl in enumerate(KL)}


def _noise(seed, sd=0.05):
    return np.random.default_rng(seed).normal(0, sd, KL.size)


@pytest.mark.parametrize("seed", range(5))
def test_a_curve_with_a_known_peak_is_still_found(seed):
    """alpha 1, beta 0.5, r0 0.2 (KL* = e^2 = 7.39) with noise sd 0.05: determined, the interval
    holds the true peak, and the checkpoint nearest the estimate is recommended."""
    estimate = estimate_peak(KL, gao_curve(KL, 1.0, 0.5, 0.2) + _noise(seed), n_boot=500)
    assert estimate.status == "peak" and estimate.reason is None
    assert estimate.low <= math.e**2 <= estimate.high
    assert estimate.high <= MAX_EXTRAPOLATION * 15
    assert recommend_checkpoint(estimate, CHECKPOINTS) is not None


@pytest.mark.parametrize("seed", range(5))
def test_a_monotone_rising_curve_is_not_determined(seed):
    """Reward 0.4 d (linear in sqrt(KL), no turn) plus noise: not determined, still rising at the
    largest KL evaluated (15); no checkpoint, and the line says so without the fitted KL*."""
    reward = 0.4 * np.sqrt(KL) + _noise(seed)
    estimate = estimate_peak(KL, reward, n_boot=500)
    assert estimate.status == "not_determined" and estimate.reason == "still_rising"
    assert estimate.kl is None
    assert recommend_checkpoint(estimate, CHECKPOINTS) is None
    line = peak_line(
        eval_kl=KL, eval_reward=reward, current_kl=15.0, checkpoint_kls=CHECKPOINTS, n_boot=500
    )
    assert line.checkpoint is None
    assert line.text == (
        "Peak not yet determined: reward still rising at KL 15 (the largest evaluated); "
        "current KL 15."
    )


@pytest.mark.parametrize("seed", range(5))
def test_a_flat_noisy_curve_is_not_determined(seed):
    """Pure noise (sd 0.05 around 0): the curve's d terms explain nothing beyond the noise (F-test
    p > 0.1): not determined, flat; no checkpoint."""
    estimate = estimate_peak(KL, _noise(seed), n_boot=500)
    assert estimate.status == "not_determined" and estimate.reason == "flat"
    assert estimate.flat_p > 0.1
    assert recommend_checkpoint(estimate, CHECKPOINTS) is None
    line = peak_line(eval_kl=KL, eval_reward=_noise(seed), current_kl=15.0, n_boot=500)
    assert line.text.startswith("Peak not yet determined: reward flat")


def test_a_constant_curve_is_flat():
    """Every evaluation at the same reward: nothing to explain (p = 1)."""
    estimate = estimate_peak(KL, np.full(KL.size, 0.3), n_boot=200)
    assert estimate.reason == "flat" and estimate.flat_p == 1.0


def test_two_points_are_not_determined():
    """Two evaluations cannot fit three coefficients and the noise: too few evaluations."""
    estimate = estimate_peak([1.0, 2.0], [0.1, 0.2], n_boot=200)
    assert estimate.status == "not_determined" and estimate.reason == "too_few_points"
    line = peak_line(eval_kl=[1.0, 2.0], eval_reward=[0.1, 0.2], current_kl=2.0, n_boot=200)
    assert line.text == (
        "Peak not yet determined: too few evaluations (2; at least 4 at two or more KL values "
        "above zero); current KL 2."
    )


def test_a_barely_bending_curve_prints_no_absurd_number():
    """alpha 0.5, beta 0.01: the fitted KL* = exp(2 (50 - 1)) ~ 1e+42 (a farm run printed 4.25e+136
    the same way): not determined, still rising; neither the message nor the line has an exponent,
    though the fitted value is kept for diagnosis."""
    reward = gao_curve(KL, 0.5, 0.01) + _noise(0, sd=0.01)
    estimate = estimate_peak(KL, reward, n_boot=500)
    assert estimate.reason == "still_rising" and estimate.fitted_kl > 1e6
    line = peak_line(eval_kl=KL, eval_reward=reward, current_kl=15.0, n_boot=500)
    assert "e+" not in estimate.message and "e+" not in line.text


def test_a_peak_within_twice_the_data_is_reported_beyond_it():
    """alpha 1.249, beta 0.5 (KL* = exp(2 (2.498 - 1)) = 20.0), exact: 20 <= 2 x 15, so it is
    reported, beyond the data (not reached yet)."""
    estimate = estimate_peak(KL, gao_curve(KL, 1.249, 0.5, 0.2), n_boot=200)
    assert estimate.status == "peak" and estimate.beyond_data
    assert estimate.kl == pytest.approx(math.exp(2 * (1.249 / 0.5 - 1)))


def test_an_unbounded_interval_inside_the_data_is_uncertain():
    """A turn inside the data the noise cannot confirm: 8 points of the main curve with sd 0.15
    (seed 1). The fitted KL* (7.35) is inside the range and the curve is not flat (F-test p =
    0.067), but the interval's upper end (about 4000) runs far past twice the largest KL (30): not
    determined, uncertain, and no checkpoint."""
    kls = np.linspace(0.5, 15, 8)
    reward = gao_curve(kls, 1.0, 0.5, 0.2) + np.random.default_rng(1).normal(0, 0.15, 8)
    estimate = estimate_peak(kls, reward, n_boot=500)
    assert estimate.status == "not_determined" and estimate.reason == "uncertain"
    assert estimate.fitted_kl == pytest.approx(7.35, abs=0.01)
    assert estimate.high > MAX_EXTRAPOLATION * 15
    assert recommend_checkpoint(estimate, CHECKPOINTS) is None
    line = peak_line(eval_kl=kls, eval_reward=reward, current_kl=15.0, n_boot=500)
    assert line.text.startswith("Peak not yet determined: the reward's turn is within its noise")


def test_an_early_peak_prints_its_far_low_end_as_under():
    """alpha 0.2, beta 0.5: KL* = exp(2 (0.4 - 1)) = 0.301, just under the smallest KL evaluated
    (0.5). With noise (seed 2) the estimate is 0.289, above half the smallest KL (0.25): reported;
    its interval's lower end (0.067) is an extrapolation towards zero, printed "under 0.25"."""
    estimate = estimate_peak(KL, gao_curve(KL, 0.2, 0.5) + _noise(2), n_boot=500)
    assert estimate.status == "peak"
    assert estimate.kl == pytest.approx(0.289, abs=0.001)
    assert "peaks at KL 0.289 (90% interval under 0.25 to 0.52" in estimate.message
    assert "e-" not in estimate.message


def test_a_peak_far_before_the_data_is_not_determined():
    """alpha -1, beta 0.5: KL* = exp(2 (-2 - 1)) = 0.0025, a fifth of a percent of the smallest KL
    evaluated (0.5): the reward falls from the first evaluation; a turn that far towards zero is
    an extrapolation (the farm printed 2.89e-120): not determined, falling, no checkpoint."""
    reward = gao_curve(KL, -1.0, 0.5, 2.0) + _noise(0)
    estimate = estimate_peak(KL, reward, n_boot=500)
    assert estimate.status == "not_determined" and estimate.reason == "falling"
    assert estimate.fitted_kl < 0.25
    line = peak_line(eval_kl=KL, eval_reward=reward, current_kl=15.0, checkpoint_kls=CHECKPOINTS)
    assert line.checkpoint is None
    assert line.text == (
        "Peak not yet determined: reward falling from KL 0.5, the smallest evaluated above zero "
        "(up to 15); current KL 15."
    )
