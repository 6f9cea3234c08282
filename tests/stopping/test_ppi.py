"""Prediction-powered estimates (monitoring/stats/ppi.py): hand-worked values, the paper's form, and seeded
simulations (numpy only, every simulation of a test in one vectorised call)."""

import math
import re

import numpy as np
import pytest

from monitoring.stats import ppi
from monitoring.stats.intervals import Interval

SIMULATIONS = 2000
OUTCOMES = np.array([1.0, 0.5, 0.0])  # win, tie, loss from the checkpoint's side
OUTCOME_P = np.array([0.45, 0.15, 0.40])  # true win rate 0.45 + 0.15 / 2 = 0.525
RATINGS = np.arange(1.0, 6.0)
RATING_P = np.array([0.05, 0.10, 0.25, 0.35, 0.25])  # true mean usefulness 3.65


def _uniform_subset(rng, shape, n):
    """[S, N] mask with exactly n rated items per row, a uniform random subset."""
    keys = rng.random(shape)
    return keys <= np.sort(keys, axis=1)[:, n - 1 : n]


def _covers(low, high, truth):
    return float(((low <= truth) & (truth <= high)).mean())


def test_hand_worked_example():
    """N = 5 items; humans rated the first three: Y = [1, 0, 0.5], judge f = [0.8, 0.4, 0.4, 1, 0].
    mean(f) = 0.52, fbar_rated = 1.6/3, Ybar = 0.5, a = N/n = 5/3.
    g = (f - 0.52) - a (f - 1.6/3) on rated, f - 0.52 elsewhere = [-1.48/9, 0.92/9, 0.92/9, 0.48, -0.52]
    h = a (Y - 0.5) = [5/6, -5/6, 0, 0, 0].
    sum(g h) = -2/9, sum(g^2) = 3.8832/81 + 0.5008 = 0.548741, so lam = (2/9) / 0.548741 = 0.404968.
    estimate = 0.5 + lam (0.52 - 1.6/3) = 0.4946.
    sum(psi^2) = sum(h^2) - sum(gh)^2 / sum(g^2) = 25/18 - 0.089993 = 1.298896; times n/(n-1)/N^2
    = 0.06: variance 0.0779337, se 0.279166. Classical: se = s/sqrt(3) = 0.5/sqrt(3) = 0.288675.
    effective n = 3 * (25/18) / 1.298896 = 3.20785."""
    result = ppi.ppi_mean([0.8, 0.4, 0.4, 1.0, 0.0], [1.0, 0.0, 0.5, math.nan, math.nan])
    assert result.lam == pytest.approx(0.404968, abs=1e-6)
    assert result.ppi.estimate == pytest.approx(0.494600, abs=1e-6)
    assert result.std_error == pytest.approx(0.279166, abs=1e-6)
    assert result.classical.estimate == pytest.approx(0.5)
    assert result.classical_std_error == pytest.approx(0.5 / math.sqrt(3))
    assert result.effective_n == pytest.approx(3.20785, abs=1e-5)
    assert result.ppi.low == pytest.approx(0.4946 - 1.959964 * 0.279166, abs=1e-5)
    assert (result.ppi.n, result.classical.n, result.n_items) == (3, 3, 5)


def test_a_perfect_judge_is_worth_every_item():
    """N = 4, humans rated items 0 and 1 (Y = [1, 0]); the judge says f = [1, 0, 1, 0], equal to
    the humans where both rated. g = [-0.5, 0.5, 0.5, -0.5], h = [1, -1, 0, 0]: lam = 1/1 = 1, the
    estimate is the judge's mean 0.5, psi = g + h = [0.5, -0.5, 0.5, -0.5], variance 1 * 2/16 = 1/8;
    classical variance s^2/n = 0.5/2 = 1/4; effective n = 2 * (1/4) / (1/8) = 4 = N."""
    result = ppi.ppi_win_rate([1, 0, 1, 0], [1, 0, math.nan, math.nan])
    assert result.lam == pytest.approx(1.0)
    assert result.ppi.estimate == pytest.approx(0.5)
    assert result.std_error == pytest.approx(math.sqrt(1 / 8))
    assert result.classical_std_error == pytest.approx(0.5)
    assert result.effective_n == pytest.approx(4.0)
    assert result.ratings_saved == pytest.approx(2.0)


def test_same_estimator_as_the_papers_labelled_unlabelled_form():
    """PPI++ (and ppi_py) write theta = mean_lab(Y - lam' f) + lam' mean_unlab(f) with the
    variance var(Y - lam' f)/n + lam'^2 var_unlab(f)/(N - n). Our lam applies to the mean over all
    N items; lam' = lam (1 - n/N) gives the same number exactly, and the two variance estimates
    agree up to their plug-ins (ours: n/(n-1) and the judge's spread over all N): within 2% here."""
    rng = np.random.default_rng(7)
    n_items, n = 3000, 300
    y = rng.choice(RATINGS, p=RATING_P, size=n_items)
    f = np.clip(y + 0.5 + rng.normal(0, 1.0, n_items), 1, 5)
    rated = _uniform_subset(rng, (1, n_items), n)[0]
    result = ppi.ppi_usefulness(f, np.where(rated, y, np.nan))
    lam_paper = result.lam * (1 - n / n_items)
    paper = (y[rated] - lam_paper * f[rated]).mean() + lam_paper * f[~rated].mean()
    paper_var = (y[rated] - lam_paper * f[rated]).var() / n + lam_paper**2 * f[~rated].var() / (
        n_items - n
    )
    assert 0.3 < result.lam < 1
    assert result.ppi.estimate == pytest.approx(paper, abs=1e-12)
    assert result.std_error**2 == pytest.approx(paper_var, rel=0.02)


def test_win_rate_coverage_with_a_judge_biased_toward_the_checkpoint():
    """2,000 seeded rounds of N = 1000 items, 200 rated by humans (a uniform subset). The judge
    agrees with the humans 70% of the time and otherwise declares a checkpoint win, so its own mean
    is 0.7 * 0.525 + 0.3 = 0.6675, far off the truth 0.525. The 95% PPI interval still covers 0.525
    in at least 94% of rounds (binomial sd of the coverage estimate: 0.5%), is never wider than the
    humans-only interval, and is clearly narrower (median width ratio ~0.76 at correlation ~0.72)."""
    rng = np.random.default_rng(19)
    shape = (SIMULATIONS, 1000)
    y = rng.choice(OUTCOMES, p=OUTCOME_P, size=shape)
    judge = np.where(rng.random(shape) < 0.7, y, 1.0)
    human = np.where(_uniform_subset(rng, shape, 200), y, np.nan)
    result = ppi.ppi_mean_batch(judge, human, bounds=(0, 1))
    assert judge.mean() == pytest.approx(0.6675, abs=0.002)
    assert _covers(result.low, result.high, 0.525) >= 0.94
    assert _covers(result.classical_low, result.classical_high, 0.525) >= 0.94
    ratio = (result.high - result.low) / (result.classical_high - result.classical_low)
    assert ratio.max() <= 1 + 1e-12
    assert np.median(ratio) < 0.8
    assert np.median(result.effective_n) > 300
    assert (result.n == 200).all()


def test_usefulness_coverage_with_a_generous_noisy_judge():
    """Usefulness 1-5 (true mean 3.65); the judge rates every answer 0.7 higher than the humans
    plus normal noise (sd 0.8), clipped to 1-5. 2,000 rounds of N = 1000 with 200 human-rated:
    coverage of 3.65 >= 94% and the PPI interval narrower (median width ratio under 0.75)."""
    rng = np.random.default_rng(23)
    shape = (SIMULATIONS, 1000)
    y = rng.choice(RATINGS, p=RATING_P, size=shape)
    judge = np.clip(y + 0.7 + rng.normal(0, 0.8, shape), 1, 5)
    human = np.where(_uniform_subset(rng, shape, 200), y, np.nan)
    result = ppi.ppi_mean_batch(judge, human, bounds=(1, 5))
    assert _covers(result.low, result.high, 3.65) >= 0.94
    ratio = (result.high - result.low) / (result.classical_high - result.classical_low)
    assert np.median(ratio) < 0.75
    assert ratio.max() <= 1 + 1e-12


def test_a_noise_judge_changes_nothing_within_a_stated_tolerance():
    """A judge that rates at random (uniform on 1-5, independent of the humans). lam* is the
    humans-on-judge regression slope, whose sampling sd is sd(Y)/(sd(f) sqrt(n)) = 1.05/(1.15 *
    sqrt(200)) ~ 0.065: about half the rounds clip it to exactly 0 (the interval is then the
    classical one to the last bit) and 99% of them keep it under 3 sd ~ 0.2.
    Tolerance on the width: at lam* the variance ratio is 1 - r^2 (1 - n/N), r the sample
    correlation on the n rated items; n r^2 ~ chi-square(1) under independence, whose 99.99%
    quantile is 15.1, so r^2 <= 0.076 and the width ratio >= sqrt(1 - 0.076 * 0.8) = 0.969 in all
    2,000 rounds (asserted: >= 0.96). The estimate moves by lam (mean(f) - fbar_rated), at most
    half a classical standard error."""
    rng = np.random.default_rng(29)
    shape = (SIMULATIONS, 1000)
    y = rng.choice(RATINGS, p=RATING_P, size=shape)
    judge = rng.uniform(1, 5, shape)
    human = np.where(_uniform_subset(rng, shape, 200), y, np.nan)
    result = ppi.ppi_mean_batch(judge, human, bounds=(1, 5))
    zero = result.lam == 0
    assert 0.4 < zero.mean() < 0.6
    assert np.quantile(result.lam, 0.99) < 0.2
    np.testing.assert_array_equal(result.low[zero], result.classical_low[zero])
    np.testing.assert_array_equal(result.high[zero], result.classical_high[zero])
    ratio = (result.high - result.low) / (result.classical_high - result.classical_low)
    assert ratio.min() >= 0.96
    shift = np.abs(result.estimate - result.classical_estimate) / result.classical_std_error
    assert shift.max() < 0.5
    assert _covers(result.low, result.high, 3.65) >= 0.94


def test_unequal_inclusion_probabilities_are_weighted():
    """Items the judge calls a checkpoint win are sent to humans with probability 0.2, the others
    with 0.5 (independent coin flips): the rated items over-represent the judge's non-wins, so their
    plain mean is biased low; the 1/pi-weighted estimate is not. 2,000 rounds of N = 1000 (~316
    rated): the PPI interval covers 0.525 in at least 93.5% of rounds (nominal 95% minus 3 binomial
    sd of a 2,000-round estimate; the weighted variance is a linearisation, a little optimistic at
    this size) and is narrower than the weighted humans-only interval."""
    rng = np.random.default_rng(31)
    shape = (SIMULATIONS, 1000)
    y = rng.choice(OUTCOMES, p=OUTCOME_P, size=shape)
    judge = np.where(rng.random(shape) < 0.7, y, 1.0)
    pi = np.where(judge == 1.0, 0.2, 0.5)
    human = np.where(rng.random(shape) < pi, y, np.nan)
    result = ppi.ppi_mean_batch(judge, human, inclusion_probability=pi, bounds=(0, 1))
    assert np.nanmean(human) < 0.5  # the unweighted mean of the rated items is biased
    assert _covers(result.low, result.high, 0.525) >= 0.935
    assert abs(result.estimate.mean() - 0.525) < 0.002
    ratio = (result.high - result.low) / (result.classical_high - result.classical_low)
    assert np.median(ratio) < 0.9


def test_a_constant_inclusion_probability_is_the_uniform_case():
    """Given the subset's size, a constant probability is a uniform draw: same numbers as None."""
    rng = np.random.default_rng(3)
    y = rng.choice(OUTCOMES, p=OUTCOME_P, size=100)
    human = np.where(rng.random(100) < 0.3, y, np.nan)
    judge = np.clip(y + rng.normal(0, 0.3, 100), 0, 1)
    plain = ppi.ppi_win_rate(judge, human)
    weighted = ppi.ppi_win_rate(judge, human, inclusion_probability=0.3)
    assert weighted.ppi.estimate == pytest.approx(plain.ppi.estimate, abs=1e-12)
    assert weighted.std_error == pytest.approx(plain.std_error, rel=1e-12)


def test_lambda_is_clipped_to_zero_and_one():
    """A judge on a compressed scale (f = 0.5 + 0.1 (Y - 0.5)) has regression slope 10: lam is
    clipped to 1. A judge that says the opposite of the humans (f = 1 - Y) has slope -1: lam = 0
    and the estimate is the humans' own."""
    rng = np.random.default_rng(5)
    y = rng.choice(OUTCOMES, p=OUTCOME_P, size=400)
    human = np.where(np.arange(400) % 4 == 0, y, np.nan)
    compressed = ppi.ppi_win_rate(0.5 + 0.1 * (y - 0.5), human)
    assert compressed.lam == 1.0
    assert compressed.std_error < compressed.classical_std_error
    opposite = ppi.ppi_win_rate(1 - y, human)
    assert opposite.lam == 0.0
    assert opposite.ppi == opposite.classical


def test_a_constant_judge_or_every_item_rated_gives_the_classical_interval():
    """Nothing to learn from a judge that never varies, nor from the unrated items when there are
    none: lam = 0 and effective n = n."""
    y = np.array([1, 0, 0.5, 1, 1, 0])
    constant = ppi.ppi_win_rate(np.full(6, 0.7), np.where(np.arange(6) < 4, y, np.nan))
    every = ppi.ppi_win_rate(np.clip(y + 0.1, 0, 1), y)
    for result in (constant, every):
        assert result.lam == 0.0
        assert result.ppi == result.classical
        assert result.effective_n == result.ppi.n


@pytest.mark.parametrize(
    ("judge", "human", "kwargs", "message"),
    [
        ([0.5, 0.5, 0.5], [1, 0], {}, "same shape"),
        ([0.5, math.nan, 0.5], [1, 0, 1], {}, "judge_scores must be finite"),
        ([0.5, 0.5, 0.5], [1, math.nan, math.nan], {}, "items to estimate a variance, got 1"),
        ([0.5, 0.5, 0.5], [1, 0, math.nan], {"inclusion_probability": 0}, "inclusion_probability"),
        ([0.5, 0.5, 0.5], [1, 0, math.nan], {"confidence": 1.5}, "confidence"),
        ([0.5, 2, 0.5], [1, 0, math.nan], {}, "judge_outcomes must be in [0, 1]"),
        ([0.5, 0.5, 0.5], [1, 3, math.nan], {}, "human_outcomes must be in [0, 1]"),
    ],
)  # fmt: skip
def test_bad_input_is_a_clear_error(judge, human, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        ppi.ppi_win_rate(judge, human, **kwargs)


def test_usefulness_checks_its_scale():
    with pytest.raises(ValueError, match="judge_ratings must be in"):
        ppi.ppi_usefulness([0, 3, 4], [3, 4, math.nan])


# --- choose_estimate --------------------------------------------------------------------------------


def _round() -> ppi.PPIEstimate:
    rng = np.random.default_rng(11)
    y = rng.choice(OUTCOMES, p=OUTCOME_P, size=500)
    judge = np.where(rng.random(500) < 0.8, y, 1.0)
    return ppi.ppi_win_rate(judge, np.where(np.arange(500) < 100, y, np.nan))


def test_the_panel_uses_ppi_when_the_judge_earned_it():
    """kappa 0.72 on 100 shared items against a threshold of 0.6: the prediction-powered interval,
    and the sentence names it, the kappa, the threshold and what the judge is worth."""
    estimate = _round()
    choice = ppi.choose_estimate(
        classical=estimate.classical,
        ppi=estimate,
        judge_kappa=0.72,
        overlap_items=100,
        kappa_threshold=0.6,
    )
    assert choice.source == "ppi"
    assert choice.interval == estimate.ppi
    assert choice.reason.startswith("Prediction-powered estimate ")
    assert "kappa with the reviewers is 0.72 on 100 shared items" in choice.reason
    assert "at or above your threshold 0.60" in choice.reason
    assert f"worth {estimate.effective_n:.0f} human ratings from 100" in choice.reason


@pytest.mark.parametrize(
    ("kappa", "overlap", "has_judge", "why"),
    [
        (0.55, 100, True, "kappa with the reviewers is 0.55 on 100 shared items, below your threshold 0.60"),
        (math.nan, 100, True, "cannot be measured"),
        (None, 0, True, "cannot be measured"),
        (0.9, 8, True, "rests on only 8 shared items (at least 20 needed)"),
        (0.9, 100, False, "this round has no judge"),
    ],
)  # fmt: skip
def test_the_panel_falls_back_to_humans_and_says_why(kappa, overlap, has_judge, why):
    estimate = _round()
    choice = ppi.choose_estimate(
        classical=estimate.classical,
        ppi=estimate if has_judge else None,
        judge_kappa=kappa,
        overlap_items=overlap,
        kappa_threshold=0.6,
    )
    assert choice.source == "human"
    assert choice.interval == estimate.classical
    assert choice.reason.startswith("Human-only estimate ")
    assert why in choice.reason


def test_the_threshold_must_be_a_kappa():
    with pytest.raises(ValueError, match="kappa_threshold must be in"):
        ppi.choose_estimate(
            classical=Interval(0.5, 0.4, 0.6, 10),
            ppi=None,
            judge_kappa=0.5,
            overlap_items=10,
            kappa_threshold=1.5,
        )
