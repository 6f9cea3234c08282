"""A judge measured like an annotator (annotation/agreement/judges.py), on a small hand-worked case.

Six items. The judge's verdicts, in stored terms, with the response it saw first:
    item 0: A first -> A, B first -> A     consistent A
    item 1: A first -> A, B first -> B     a flip (it picked the first shown both times)
    item 2: A first -> B, B first -> B     consistent B
    item 3: A first -> tie, B first -> A   a half flip
    item 4: A first -> A                   one order only
    item 5: not judged
Humans (annotators 0, 1, 2), lengths and gold are in ``humans()``.
"""

import math
import re

import numpy as np
import pytest
from statsmodels.stats.proportion import proportion_confint

from annotation.agreement import MISSING, TIE, A, B, JudgementTable
from annotation.agreement import judges as j


def verdicts() -> j.JudgeVerdicts:
    rows = [  # (item, shown first, verdict)
        (0, A, A),
        (0, B, A),
        (1, A, A),
        (1, B, B),
        (2, A, B),
        (2, B, B),
        (3, A, TIE),
        (3, B, A),
        (4, A, A),
    ]
    item, shown_first, choice = (np.array(col) for col in zip(*rows, strict=True))
    return j.JudgeVerdicts(item=item, choice=choice, shown_first=shown_first, n_items=6)


def humans() -> JudgementTable:
    rows = [  # (item, annotator, choice)
        (0, 0, A), (1, 0, B), (2, 0, B), (3, 0, A), (4, 0, B), (5, 0, B),
        (0, 1, A), (1, 1, A), (2, 1, B), (3, 1, TIE), (4, 1, A), (5, 1, A),
        (1, 2, B), (3, 2, A), (4, 2, B),
    ]  # fmt: skip
    item, annotator, choice = (np.array(col) for col in zip(*rows, strict=True))
    return JudgementTable(
        item=item,
        annotator=annotator,
        choice=choice,
        n_items=6,
        n_annotators=3,
        gold=np.array([A, B, MISSING, A, B, A]),
        length_a=np.array([10, 20, 5, 5, 30, 1]),
        length_b=np.array([5, 30, 5, 10, 10, 2]),
    )


def test_combining_the_two_orders():
    """Same verdict in both orders: kept; different: a tie; one order: that verdict; none: MISSING."""
    combined = j.combine_orders(verdicts())
    np.testing.assert_array_equal(combined, [A, TIE, B, TIE, A, MISSING])


def test_swap_flip_rate_counts_changes_of_the_preferred_response():
    """Judged in both orders: items 0-3 (4 pairs), the same verdict on 0 and 2 (0.5). Decisive in
    both orders: 0, 1, 2; the preferred response changed on item 1 only: flip rate 1/3. Item 3 went
    from a tie to A: a half flip, not a flip."""
    swap = j.swap_consistency(verdicts())
    assert (swap.pairs, swap.decisive_pairs, swap.flips, swap.half_flips) == (4, 3, 1, 1)
    assert swap.same_rate == pytest.approx(0.5)
    assert swap.flip_rate == pytest.approx(1 / 3)


def test_position_bias_with_an_exact_interval():
    """8 decisive verdicts (9 less the tie); those that picked the response shown first: item 0 A
    when A was first (1), item 1 both (2), item 2 B when B was first (1), item 4 (1): 5 of 8, share
    0.625, bias +0.125. Two-sided binomial p = 2 * P(X >= 5 | 8, 0.5) = 2 * 93/256 = 0.7265625.
    The interval is Clopper-Pearson's, checked against statsmodels' "beta" method."""
    bias = j.position_bias(verdicts())
    assert (bias.n, bias.first_picks) == (8, 5)
    assert bias.share == pytest.approx(0.625)
    assert bias.bias == pytest.approx(0.125)
    assert bias.p_value == pytest.approx(0.7265625)
    low, high = proportion_confint(5, 8, alpha=0.05, method="beta")
    assert (bias.low, bias.high) == pytest.approx((low, high), abs=1e-10)


@pytest.mark.parametrize(("k", "n"), [(0, 10), (10, 10), (3, 17), (250, 1000)])
def test_clopper_pearson_matches_statsmodels(k, n):
    assert j.clopper_pearson(k, n, confidence=0.9) == pytest.approx(
        proportion_confint(k, n, alpha=0.1, method="beta"), abs=1e-10
    )


def test_length_bias_against_the_humans_share():
    """Longer response: item 0 A, 1 B, 2 equal (left out), 3 B, 4 A. The judge's decisive verdicts
    on unequal items: item 0 A, A (2 longer), item 1 A, B (1), item 3 A (0), item 4 A (1): 4 of 6.
    Humans on the items the judge judged (item 5 left out), decisive, unequal: annotator 0: 0 A yes,
    1 B yes, 3 A no, 4 B no; annotator 1: 0 A yes, 1 A no, 4 A yes (3 tie left out); annotator 2:
    1 B yes, 3 A no, 4 B no: 5 of 10. Bias 2/3 - 1/2 = 1/6; p = 2 * P(X >= 4 | 6, 0.5) = 2 * 22/64."""
    bias = j.length_bias(verdicts(), humans())
    assert (bias.n, bias.human_n) == (6, 10)
    assert bias.share == pytest.approx(2 / 3)
    assert bias.human_share == pytest.approx(0.5)
    assert bias.bias == pytest.approx(1 / 6)
    assert bias.p_value == pytest.approx(0.6875)


def test_kappa_against_each_human_and_the_consensus():
    """The judge's combined verdicts on items 0-4: [A, tie, B, tie, A].
    Annotator 0 [A, B, B, A, B]: agreement 2/5; margins judge (A 2, B 1, tie 2), human (A 2, B 3):
    chance (4 + 3) / 25 = 0.28, kappa = (0.4 - 0.28) / 0.72 = 1/6.
    Annotator 1 [A, A, B, tie, A]: 4/5; human margins (A 3, B 1, tie 1): chance 9/25 = 0.36,
    kappa = 0.44 / 0.64 = 0.6875.
    Annotator 2 on items 1, 3, 4 [B, A, B] vs judge [tie, tie, A]: 0 agreement, chance 1/9,
    kappa = -1/8.
    Majority of the humans: [A, B, B, A, B] on items 0-4 (item 5 split), the same as annotator 0:
    kappa 1/6 on 5 items."""
    kappas = j.judge_kappas(j.combine_orders(verdicts()), humans())
    np.testing.assert_allclose(kappas.per_human, [1 / 6, 0.6875, -0.125])
    np.testing.assert_array_equal(kappas.per_human_n, [5, 5, 3])
    assert kappas.consensus == pytest.approx(1 / 6)
    assert kappas.consensus_n == 5


def test_the_report_puts_it_together_with_gold_accuracy():
    """Gold [A, B, -, A, B, A]: judged gold items 0, 1, 3, 4 (5 was not judged); the combined
    verdict [A, tie, tie, A] is right on item 0 only: 1/4. One tie in 9 verdicts."""
    report = j.judge_report(verdicts(), humans())
    assert (report.n_verdicts, report.n_items) == (9, 5)
    assert report.tie_rate == pytest.approx(1 / 9)
    assert (report.gold_n, report.gold_accuracy) == (4, 0.25)
    assert report.swap.flips == 1
    assert report.position.first_picks == 5
    assert report.length is not None and report.length.bias == pytest.approx(1 / 6)
    assert report.kappas.consensus_n == 5


def test_a_judge_that_always_picks_the_first_shown():
    """Every pair in both orders, always the first shown: every decisive pair flips (rate 1), the
    first-shown share is 1 with p = 2 / 2^20 on 20 verdicts, the combined verdicts all ties."""
    items = np.repeat(np.arange(10), 2)
    first = np.tile([A, B], 10)
    judge = j.JudgeVerdicts(item=items, choice=first, shown_first=first, n_items=10)
    swap = j.swap_consistency(judge)
    assert (swap.flips, swap.decisive_pairs, swap.flip_rate) == (10, 10, 1.0)
    bias = j.position_bias(judge)
    assert bias.share == 1.0 and bias.high == 1.0
    assert bias.p_value == pytest.approx(2 / 2**20)
    assert (j.combine_orders(judge) == TIE).all()


def test_no_decisive_verdicts_give_nan_not_an_error():
    judge = j.JudgeVerdicts(
        item=np.array([0, 0]), choice=np.array([TIE, TIE]), shown_first=np.array([A, B]), n_items=1
    )
    swap = j.swap_consistency(judge)
    assert swap.decisive_pairs == 0 and math.isnan(swap.flip_rate)
    bias = j.position_bias(judge)
    assert bias.n == 0 and math.isnan(bias.share) and (bias.low, bias.high) == (0.0, 1.0)


@pytest.mark.parametrize(
    ("item", "choice", "shown_first", "message"),
    [
        ([0, 0], [A, B], [A, A], "at most one verdict per item and order"),
        ([0], [A], [TIE], "shown_first must be A"),
        ([0], [7], [A], "choice codes must lie in 0..3"),
        ([3], [A], [A], "item indices must lie in 0..1"),
        ([0, 1], [A], [A, B], "choice must have shape (2,)"),
    ],
)
def test_bad_verdicts_are_clear_errors(item, choice, shown_first, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        j.JudgeVerdicts(
            item=np.array(item),
            choice=np.array(choice),
            shown_first=np.array(shown_first),
            n_items=2,
        )


def test_the_report_needs_the_same_items():
    with pytest.raises(ValueError, match="must equal the humans'"):
        j.judge_report(
            j.JudgeVerdicts(np.array([0]), np.array([A]), np.array([A]), n_items=2), humans()
        )


def test_reward_verdicts_and_the_calibrated_tie_band():
    """Differences [2, 1, 0.1, -0.1, -1, -2] labelled [A, A, tie, tie, B, B] by the humans. Band 0:
    verdicts [A, A, A, B, B, B], agreement 4/6, chance (3*2 + 3*2 + 0)/36 = 1/3, kappa 0.5.
    Band 0.1 (|d| <= 0.1 is a tie): [A, A, tie, tie, B, B], kappa 1, the narrowest perfect band.
    Band 1: [A, tie, tie, tie, tie, B], agreement 4/6, chance (1*2 + 1*2 + 4*2)/36 = 1/3: 0.5.
    An item without a human label (MISSING) is left out of the calibration."""
    d = np.array([2, 1, 0.1, -0.1, -1, -2])
    humans_say = np.array([A, A, TIE, TIE, B, B])
    np.testing.assert_array_equal(j.reward_verdicts(d, tie_band=1), [A, TIE, TIE, TIE, TIE, B])
    band = j.calibrate_tie_band(np.r_[d, 5.0], np.r_[humans_say, MISSING])  # unlabelled: left out
    assert (band.width, band.kappa, band.n) == (0.1, 1.0, 6)
    assert j.calibrate_tie_band(d, np.array([A, A, A, B, B, B])).width == 0.0
    with pytest.raises(ValueError, match="tie_band must be >= 0"):
        j.reward_verdicts(d, tie_band=-1)
    with pytest.raises(ValueError, match="at least 2 items"):
        j.calibrate_tie_band(d[:2], np.array([MISSING, A]))


def _with_combined() -> j.JudgeVerdicts:
    """Items 0-1 per order (0: A, A; 1: A first -> A, B first -> B, a flip); item 2 combined A by
    its source; item 3 combined, its orders disagreeing (a tie); items 4-5 none."""
    return j.verdicts_from_rows(
        item=np.array([0, 0, 1, 1, 2, 3]),
        shown_first=np.array([A, B, A, B, MISSING, MISSING]),
        choice=np.array([A, A, A, B, A, TIE]),
        orders_disagree=np.array([False, False, False, False, False, True]),
        n_items=6,
    )


def test_source_combined_verdicts_count_once_and_keep_their_disagreement():
    """combine_orders: A, tie (flip), A (source), tie (source, inconsistent), -, -. Swap: pairs 0, 1,
    2 known (2 the same), 3 disagreeing without detail -> same 2 of 4; decisive known 0, 1, 2 with
    1 flip -> 1/3, at most (1 + 1) / (3 + 1) = 1/2. Position: per-order verdicts only, 4 decisive,
    the first shown picked on item 0 (A first) and both of item 1 -> 3 of 4."""
    v = _with_combined()
    assert j.combine_orders(v).tolist() == [A, TIE, A, TIE, MISSING, MISSING]
    swap = j.swap_consistency(v)
    assert (swap.pairs, swap.same_rate, swap.decisive_pairs, swap.flips) == (4, 0.5, 3, 1)
    assert (swap.flip_rate, swap.flip_rate_high, swap.undetailed) == (1 / 3, 0.5, 1)
    position = j.position_bias(v)
    assert (position.n, position.first_picks) == (4, 3)
    assert [c.tolist() for c in v.every_verdict()] == [[0, 0, 1, 1, 2, 3], [A, A, A, B, A, TIE]]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (([0, 0], [A, MISSING], [A, A], [False, False]), "per-order verdicts or a combined one"),
        (([0, 0], [MISSING, MISSING], [A, A], [False, False]), "one source-combined verdict"),
        (([0], [A], [TIE], [True]), "only a source-combined verdict"),
        (([0], [MISSING], [A], [True]), "must have a combined tie"),
    ],
)
def test_rows_that_cannot_be_one_judges_verdicts_are_refused(rows, message):
    item, first, choice, disagree = (np.array(x) for x in rows)
    with pytest.raises(ValueError, match=message):
        j.verdicts_from_rows(
            item=item, shown_first=first, choice=choice, orders_disagree=disagree, n_items=2
        )
