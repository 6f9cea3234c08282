"""Rating-task agreement (annotation.agreement.ratings) on hand-derived values and published examples."""

import numpy as np
import pytest

from annotation.agreement.coefficients import cohen_kappa
from annotation.agreement.ratings import (
    aspect_alpha,
    rater_leniency,
    rating_matrix,
    scale_use,
    weighted_kappa_pairs,
)
from tests.helpers.published_agreement import KRIPPENDORFF_C

NA = np.nan


def test_weighted_kappa_counts_scale_steps_across_unused_points():
    """Scale 1-5, rater 1 = 1 2 5 5, rater 2 = 2 2 5 1 (points 3 and 4 unused). On codes 0..4 the
    margins are rows {0: 1, 1: 1, 4: 2}, columns {0: 1, 1: 2, 4: 1}, n = 4.
    Linear: observed disagreement |0-1| + |4-0| = 5; expected sum r_i c_j |i-j| / n = 30 / 4 = 7.5;
    kappa = 1 - 5 / 7.5 = 1/3. Quadratic: observed 1 + 16 = 17, expected 96 / 4 = 24, kappa = 7/24.
    (cohen_kappa ranks only the labels seen, 1 2 5 -> 0 1 2, and gives linear 1/7: a different figure.)"""
    [pair] = weighted_kappa_pairs([[1, 2, 5, 5], [2, 2, 5, 1]], scale=(1, 5))
    assert (pair.first, pair.second, pair.n_items) == (0, 1, 4)
    assert pair.linear == pytest.approx(1 / 3, abs=1e-12)
    assert pair.quadratic == pytest.approx(7 / 24, abs=1e-12)
    assert cohen_kappa([1, 2, 5, 5], [2, 2, 5, 1], weights="linear") == pytest.approx(1 / 7)


def test_weighted_kappa_matches_cohen_kappa_when_every_point_is_used():
    """scikit-learn's weighting example (test_published): linear 0.9412, quadratic 0.9541."""
    first = np.array([0] * 46 + [1] * 44 + [2] * 10) + 1
    second = np.array([0] * 50 + [1] * 40 + [2] * 10) + 1
    [pair] = weighted_kappa_pairs([first, second], scale=(1, 3))
    assert round(pair.linear, 4) == 0.9412
    assert round(pair.quadratic, 4) == 0.9541


def test_weighted_kappa_pairs_use_the_items_both_rated_and_skip_thin_pairs():
    data = [[1, 2, 3, NA], [1, 2, 3, 3], [NA, NA, NA, 3]]
    pairs = weighted_kappa_pairs(data, scale=(1, 3))
    assert [(p.first, p.second, p.n_items) for p in pairs] == [(0, 1, 3), (1, 2, 1)]
    assert pairs[0].linear == pytest.approx(1.0)
    assert np.isnan(
        pairs[1].linear
    )  # one shared item: one shared item, same point: no chance disagreement
    assert [(p.first, p.second) for p in weighted_kappa_pairs(data, scale=(1, 3), min_items=2)] == [
        (0, 1)
    ]


@pytest.mark.parametrize("bad", [[[1, 6]], [[1, 2.5]], [[0, 1]]])
def test_ratings_off_the_scale_are_an_error(bad):
    with pytest.raises(ValueError, match="not points of the scale"):
        weighted_kappa_pairs([*bad, [1, 1]], scale=(1, 5))
    with pytest.raises(ValueError, match="not points of the scale"):
        scale_use(bad, scale=(1, 5))


def test_bad_scales_and_shapes_are_errors():
    with pytest.raises(ValueError, match="low < high"):
        scale_use([[1, 2]], scale=(3, 3))
    with pytest.raises(ValueError, match="2-d"):
        scale_use([1, 2], scale=(1, 5))
    with pytest.raises(ValueError, match="finite"):
        rater_leniency([[1, np.inf]])


def test_aspect_alpha_on_krippendorff_2011_section_c():
    """Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", section C data (4
    observers, 12 units, values 1-5): ordinal .815 (section D), interval .849 (section E); an aspect
    where no item has two ratings has no alpha."""
    lonely = np.array([[1, NA], [NA, 2]])
    result = aspect_alpha({"helpfulness": KRIPPENDORFF_C, "verbosity": lonely})
    assert list(result) == ["helpfulness", "verbosity"]
    helpful = result["helpfulness"]
    assert (round(helpful.ordinal, 3), round(helpful.interval, 3)) == (0.815, 0.849)
    # Units 1-11 have two or more values (unit 12 has one): 3 + 4 * 5 + 3 + 4 * 3 + 3 + 2 = 40 ratings.
    assert (helpful.n_items, helpful.n_ratings) == (11, 40)
    assert result["verbosity"].n_items == 0
    assert np.isnan(result["verbosity"].ordinal) and np.isnan(result["verbosity"].interval)


def test_rater_leniency_hand_derived():
    """Item 0: raters 0 and 1 give 5 and 3, mean 4, offsets +1 and -1. Item 1: 4, 4, 1, mean 3, offsets
    +1, +1, -2. Item 2 has one rater and is left out. Means: rater 0 (1 + 1) / 2 = 1, rater 1
    (-1 + 1) / 2 = 0, rater 2 -2; rater 3 rated nothing."""
    data = [[5, 4, NA], [3, 4, 2], [NA, 1, NA], [NA, NA, NA]]
    result = rater_leniency(data)
    np.testing.assert_allclose(result.offset[:3], [1.0, 0.0, -2.0])
    assert np.isnan(result.offset[3])
    assert result.n_items.tolist() == [2, 2, 1, 0]


def test_scale_use_hand_derived():
    """Rater 0 gives 1 5 5 3: shares .25 0 .25 0 .5, extremes .75, mean 3.5, variance 11 / 4.
    Rater 1 gives 2 2 3: extremes 0, mean 7/3, variance 2/9. Rater 2 rated nothing."""
    result = scale_use([[1, 5, 5, 3], [2, 2, NA, 3], [NA, NA, NA, NA]], scale=(1, 5))
    assert result.points.tolist() == [1, 2, 3, 4, 5]
    assert result.counts.tolist() == [[1, 0, 1, 0, 2], [0, 2, 1, 0, 0], [0, 0, 0, 0, 0]]
    np.testing.assert_allclose(result.shares[0], [0.25, 0, 0.25, 0, 0.5])
    np.testing.assert_allclose(result.extreme_share[:2], [0.75, 0.0])
    np.testing.assert_allclose(result.mean[:2], [3.5, 7 / 3])
    np.testing.assert_allclose(result.std[:2], [np.sqrt(11 / 4), np.sqrt(2 / 9)])
    assert result.n_ratings.tolist() == [4, 3, 0]
    assert np.isnan(result.shares[2]).all() and np.isnan(result.mean[2])


def test_rating_matrix_from_columnar_answers():
    matrix = rating_matrix([0, 1, 1], [2, 0, 2], [5, 3, 4], n_raters=2, n_items=3)
    np.testing.assert_array_equal(matrix, [[NA, NA, 5], [3, NA, 4]])
    with pytest.raises(ValueError, match="more than once"):
        rating_matrix([0, 0], [1, 1], [5, 4], n_raters=1, n_items=2)
    with pytest.raises(ValueError, match="out of range"):
        rating_matrix([2], [0], [5], n_raters=2, n_items=1)
