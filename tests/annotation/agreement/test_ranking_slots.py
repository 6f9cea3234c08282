"""Position bias of rankings by screen slot (annotation.agreement.ranking_slots): expected values
worked out by hand in each docstring."""

from __future__ import annotations

import math

import numpy as np
import pytest

from annotation.agreement.ranking_slots import slot_rank_bias, slot_ranks_from_stored


def test_two_rankings_that_both_put_slot_one_first():
    """Slots' ranks [1, 2, 3] and [1, 3, 2]: rank sums R = [2, 5, 5], n (K + 1) / 2 = 4, squared
    deviations 4 + 1 + 1 = 6, Q = 12 * 6 / (n K (K + 1)) = 72 / 24 = 3 on K - 1 = 2 degrees of
    freedom; a chi-square with 2 df has tail exp(-x / 2), so p = exp(-1.5) = 0.223130. Mean ranks
    by slot: [1, 2.5, 2.5] against 2 expected."""
    bias = slot_rank_bias([[1, 2, 3], [1, 3, 2]])
    (three,) = bias.by_size
    assert (three.k, three.n_rankings, three.expected, three.df) == (3, 2, 2.0, 2)
    np.testing.assert_allclose(three.mean_rank, [1.0, 2.5, 2.5])
    assert three.statistic == pytest.approx(3.0)
    assert (bias.n_rankings, bias.df) == (2, 2)
    assert bias.statistic == pytest.approx(3.0)
    assert bias.p_value == pytest.approx(math.exp(-1.5), abs=1e-9)


def test_ties_use_mid_ranks_and_the_tie_correction():
    """[1, 1, 3] is mid-ranks [1.5, 1.5, 3]; with [1, 2, 3]: R = [2.5, 3.5, 6], deviations from 4
    are -1.5, -0.5, 2 (squares sum 6.5); sum of squared mid-ranks 13.5 + 14 = 27.5, minus
    n K (K + 1)^2 / 4 = 24 leaves 3.5; Q = (K - 1) 6.5 / 3.5 = 13 / 3.5 = 3.714286, p =
    exp(-Q / 2) = 0.156118."""
    bias = slot_rank_bias([[1, 1, 3], [1, 2, 3]])
    np.testing.assert_allclose(bias.by_size[0].mean_rank, [1.25, 1.75, 3.0])
    assert bias.statistic == pytest.approx(13 / 3.5)
    assert bias.p_value == pytest.approx(0.156118045, abs=1e-8)


def test_a_balanced_rotation_shows_no_bias():
    """A Latin square of slots' ranks: every slot has rank sum 6 = n (K + 1) / 2, so Q = 0, p = 1,
    and every mean rank is 2."""
    bias = slot_rank_bias([[1, 2, 3], [2, 3, 1], [3, 1, 2]])
    np.testing.assert_allclose(bias.by_size[0].mean_rank, [2.0, 2.0, 2.0])
    assert bias.statistic == pytest.approx(0.0) and bias.p_value == pytest.approx(1.0)


def test_sizes_are_tested_apart_and_their_chi_squares_add():
    """K = 3: Q = 3 on 2 df (the first test). K = 4, one ranking [1, 2, 3, 4]: R - 2.5 =
    -1.5, -0.5, 0.5, 1.5 (squares sum 5), Q = 12 * 5 / (1 * 4 * 5) = 3 on 3 df. Together: Q = 6 on
    5 df; for odd df the tail is 2 (1 - Phi(sqrt x)) + sqrt(2x / pi) e^(-x/2) (1 + x/3) = 0.306219."""
    bias = slot_rank_bias([[1, 2, 3], [1, 3, 2], [1, 2, 3, 4]])
    assert [(s.k, s.n_rankings, s.df) for s in bias.by_size] == [(3, 2, 2), (4, 1, 3)]
    assert bias.by_size[1].statistic == pytest.approx(3.0)
    assert (bias.statistic, bias.df) == (pytest.approx(6.0), 5)
    assert bias.p_value == pytest.approx(0.306218918, abs=1e-8)


def test_all_tied_rankings_and_no_rankings_give_nan_not_a_false_zero():
    """A ranking that ties every response says nothing about slots: Q's denominator is 0."""
    tied = slot_rank_bias([[1, 1, 1]])
    assert math.isnan(tied.by_size[0].statistic)
    assert tied.df == 0 and math.isnan(tied.p_value) and math.isnan(tied.statistic)
    empty = slot_rank_bias([])
    assert (empty.n_rankings, empty.by_size, empty.df) == (0, [], 0)
    assert math.isnan(empty.p_value)


def test_a_ranking_of_one_response_is_refused():
    with pytest.raises(ValueError, match="ranking 1 ranks 1 response"):
        slot_rank_bias([[1, 2], [1]])


def test_stored_answers_become_ranks_by_slot():
    """order [2, 0, 1]: slot 0 showed stored position 2 (rank 2), slot 1 position 0 (rank 3),
    slot 2 position 1 (rank 1)."""
    assert slot_ranks_from_stored([2, 0, 1], [3, 1, 2]) == [2.0, 3.0, 1.0]
    with pytest.raises(ValueError, match="not a permutation"):
        slot_ranks_from_stored([0, 0, 1], [1, 2, 3])
