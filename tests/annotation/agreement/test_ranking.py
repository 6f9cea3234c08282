"""Ranking-task agreement (annotation.agreement.ranking) on published and hand-derived examples."""

from itertools import combinations

import numpy as np
import pytest
from scipy.stats import spearmanr

from annotation.agreement.ranking import (
    consensus_ranking,
    kendall_w,
    mean_pairwise_kendall_tau,
    pairwise_agreement_from_rankings,
    ranking_position_bias,
    ranking_to_pairs,
)

# Siegel (1956), Nonparametric Statistics for the Behavioral Sciences, section 9 (Kendall coefficient of
# concordance), the worked example: three company executives rank six job applicants. Rank sums
# 8 14 11 11 11 8, s = 25.5, W = 25.5 / (3^2 (6^3 - 6) / 12) = 25.5 / 157.5 = 0.16.
SIEGEL_EXECUTIVES = np.array(
    [
        [1, 6, 3, 2, 5, 4],
        [1, 5, 6, 4, 2, 3],
        [6, 3, 2, 5, 4, 1],
    ]
)


def test_kendall_w_siegel_1956_executives():
    assert kendall_w(SIEGEL_EXECUTIVES) == pytest.approx(25.5 / 157.5, abs=1e-12)
    assert round(kendall_w(SIEGEL_EXECUTIVES), 2) == 0.16


def test_kendall_w_with_ties_hand_derived():
    """Rankings 1 2 3 4 / 1 2 2 4 (mid-ranks 1 2.5 2.5 4) / 2 1 3 4 of four responses. Rank sums
    4, 5.5, 8.5, 12 about m (n + 1) / 2 = 7.5: S = 12.25 + 4 + 1 + 20.25 = 37.5. One tie of 2: T = 6.
    Corrected (Siegel & Castellan 1988, eq. 9.16): 12 * 37.5 / (9 * 60 - 3 * 6) = 450 / 522 = 25/29;
    uncorrected (eq. 9.15): 450 / 540 = 5/6."""
    ranks = [[1, 2, 3, 4], [1, 2, 2, 4], [2, 1, 3, 4]]
    assert kendall_w(ranks) == pytest.approx(25 / 29, abs=1e-12)
    assert kendall_w(ranks, correct_ties=False) == pytest.approx(5 / 6, abs=1e-12)


def test_kendall_w_and_the_mean_spearman_correlation():
    """Kendall & Babington Smith (1939): without ties the mean Spearman rho over rater pairs is
    (m W - 1) / (m - 1); W = 1 for identical rankings."""
    rhos = [
        spearmanr(SIEGEL_EXECUTIVES[i], SIEGEL_EXECUTIVES[j]).statistic
        for i, j in combinations(range(3), 2)
    ]
    assert np.mean(rhos) == pytest.approx((3 * kendall_w(SIEGEL_EXECUTIVES) - 1) / 2, abs=1e-12)
    assert kendall_w([[1, 2, 3], [1, 2, 3]]) == pytest.approx(1.0)
    assert np.isnan(kendall_w([[1, 1, 1], [1, 1, 1]]))


def test_kendall_w_rejects_bad_input():
    with pytest.raises(ValueError, match="at least 2 rater"):
        kendall_w([[1, 2, 3]])
    with pytest.raises(ValueError, match="finite"):
        kendall_w([[1, 2], [np.nan, 1]])
    with pytest.raises(ValueError, match="2-d"):
        kendall_w([1, 2, 3])


def test_mean_pairwise_kendall_tau_b_hand_derived():
    """X = 1 2 3 4, Y = 1 2 4 3, Z = 1 1 3 4. X-Y: 5 concordant, 1 discordant of 6, tau = 4/6.
    X-Z: Z ties pair (0, 1); 5 concordant: tau-b = 5 / sqrt(6 * 5). Y-Z: 4 concordant, 1 discordant,
    one tied in Z: tau-b = 3 / sqrt(30)."""
    ranks = [[1, 2, 3, 4], [1, 2, 4, 3], [1, 1, 3, 4]]
    expected = (4 / 6 + 5 / np.sqrt(30) + 3 / np.sqrt(30)) / 3
    assert mean_pairwise_kendall_tau(ranks) == pytest.approx(expected, abs=1e-12)
    # A rater who tied everything has no tau-b with anyone: the pair is left out.
    assert mean_pairwise_kendall_tau([[1, 2, 3], [1, 1, 1], [1, 2, 3]]) == pytest.approx(1.0)
    assert np.isnan(mean_pairwise_kendall_tau([[1, 1], [1, 1]]))


def test_ranking_to_pairs_margins_and_ties():
    """Ranks 2 1 3 1: responses 1 and 3 tied best; margins are differences of the given ranks."""
    assert ranking_to_pairs([2, 1, 3, 1]) == [
        (0, 2, 1.0),
        (1, 0, 1.0),
        (1, 2, 2.0),
        (3, 0, 1.0),
        (3, 2, 2.0),
    ]
    assert (1, 3, 0.0) in ranking_to_pairs([2, 1, 3, 1], ties=True)
    assert ranking_to_pairs([1, np.nan, 2]) == [(0, 2, 1.0)]
    # K responses without ties give K (K - 1) / 2 pairs.
    assert len(ranking_to_pairs([4, 2, 1, 3, 5])) == 10


def test_pairwise_agreement_from_rankings_hand_derived():
    """Three raters rank three responses: 1 2 3, 1 3 2, 1 1 3. Pairs: (0, 1) a a tie, (0, 2) a a a,
    (1, 2) a b a. Agreeing ordered rater pairs 2 + 6 + 2 of 18: 5/9; without ties 10 / 14 = 5/7.
    Fleiss with the mirrored pairs: pa = 5/9, shares a = b = 4/9, tie = 1/9, pe = 33/81 = 11/27,
    kappa = (15/27 - 11/27) / (16/27) = 1/4."""
    result = pairwise_agreement_from_rankings([[[1, 2, 3], [1, 3, 2], [1, 1, 3]]])
    assert result.n_pairs == 3
    assert result.counts.shape == (6, 4)
    assert result.percent_agreement == pytest.approx(5 / 9)
    assert result.percent_agreement_no_ties == pytest.approx(5 / 7)
    assert result.fleiss_kappa == pytest.approx(0.25)


def test_pairwise_agreement_is_independent_of_response_order_and_skips_single_raters():
    ranks = np.array([[1, 2, 3, 4], [2, 1, 3, 4], [1, 3, 2, 4]])
    order = [3, 1, 0, 2]
    first = pairwise_agreement_from_rankings([ranks])
    again = pairwise_agreement_from_rankings([ranks[:, order]])
    assert again.fleiss_kappa == pytest.approx(first.fleiss_kappa)
    assert again.percent_agreement == pytest.approx(first.percent_agreement)
    # A prompt with one rater, or a response pair only one rater ranked, adds no item.
    lonely = pairwise_agreement_from_rankings([[[1, 2]], [[1, 2, np.nan], [2, 1, 1]]])
    assert lonely.n_pairs == 1
    assert np.isnan(pairwise_agreement_from_rankings([]).percent_agreement)


def test_ranking_position_bias_hand_derived():
    """Ranking 1 shows responses in index order and ranks them 1 2 3: tau +1, first shown is best.
    Ranking 2 shows response 0 last (positions 2 0 1) with ranks 1 2 3: tau-b between 2 0 1 and 1 2 3
    is (1 - 2) / 3 = -1/3; the first shown (response 1) is second. Ranking 3 (K = 2) ties both: no
    tau; the first shown holds the best rank. tau = (1 - 1/3) / 2 = 1/3; first best 2 of 3 against an
    expected (1/3 + 1/3 + 1) / 3 = 5/9. Normalised ranks by position: (0 + .5 + .5) / 3,
    (.5 + 1 + .5) / 3, (1 + 0) / 2."""
    result = ranking_position_bias([[0, 1, 2], [2, 0, 1], [1, 0]], [[1, 2, 3], [1, 2, 3], [1, 1]])
    assert result.n_rankings == 3
    assert result.tau == pytest.approx(1 / 3)
    assert result.first_best_rate == pytest.approx(2 / 3)
    assert result.first_best_expected == pytest.approx(5 / 9)
    np.testing.assert_allclose(result.mean_rank_by_position, [1 / 3, 2 / 3, 0.5])
    assert result.n_by_position.tolist() == [3, 3, 2]


def test_ranking_position_bias_rejects_bad_display_orders():
    with pytest.raises(ValueError, match="permutation"):
        ranking_position_bias([[0, 0, 1]], [[1, 2, 3]])
    with pytest.raises(ValueError, match="one each"):
        ranking_position_bias([[0, 1]], [])


def test_consensus_ranking_mean_rank_with_ties_kept():
    assert consensus_ranking([[1, 2, 3, 4], [2, 1, 3, 4], [1, 2, 4, 3]]).tolist() == [1, 2, 3, 4]
    assert consensus_ranking([[1, 2, 3], [2, 1, 3]]).tolist() == [1, 1, 3]
    # Ties in the input: 1 1 3 and 1 2 2 have mid-rank sums 1.5 + 1 = 2.5, 1.5 + 2.5 = 4, 3 + 2.5.
    assert consensus_ranking([[1, 1, 3], [1, 2, 2]]).tolist() == [1, 2, 3]


def test_mean_tau_b_agrees_with_scipy_on_tied_rankings():
    """The batched tau-b against scipy.stats.kendalltau (variant b) over random rankings with ties."""
    from scipy.stats import kendalltau

    rng = np.random.default_rng(7)
    for _ in range(20):
        ranks = rng.integers(1, 4, size=(4, 6))
        expected = [
            kendalltau(ranks[i], ranks[j], variant="b").statistic
            for i, j in combinations(range(4), 2)
            if np.ptp(ranks[i]) and np.ptp(ranks[j])
        ]
        got = mean_pairwise_kendall_tau(ranks)
        assert got == pytest.approx(np.mean(expected)) if expected else np.isnan(got)
