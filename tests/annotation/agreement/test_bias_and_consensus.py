"""Per-annotator bias statistics, flags, consensus labels and the whole report."""

import numpy as np
import pytest
from scipy import stats

from annotation.agreement import (
    COEFFICIENTS,
    MISSING,
    TIE,
    BiasThresholds,
    JudgementTable,
    _binomial_two_sided,
    agreement_report,
    annotator_stats,
    dawid_skene,
    fleiss_kappa,
    gwet_ac1,
    holm_adjust,
    item_counts,
    krippendorff_alpha,
    leave_one_out_consensus,
    majority_vote,
    side_margin,
    top_choice,
)
from tests.helpers.annotator_simulation import Habits, simulate

NAN = np.nan


def _hand_table() -> JudgementTable:
    """Four comparisons, three annotators (choice codes a=0, b=1, tie=2):

    item 0: ann0 a (left a), ann1 a (left b), ann2 b (left a)   gold a, A longer
    item 1: ann0 a (left a), ann1 b (left a), ann2 b (left b)   no gold, B longer
    item 2: ann0 tie,        ann1 a (left a), ann2 a (left b)   no gold, same length
    item 3: ann0 b (left b), ann1 b (left a), ann2 b (left a)   gold b, A longer
    Swap repeats (second verdict, sides flipped): ann0 on item 1 says a (first said a: same); ann1 on
    item 1 says a (first said b: changed); ann2 on item 0 says b (same) and on item 3 says a (first
    said b: changed).
    """
    return JudgementTable(
        item=np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]),
        annotator=np.array([0, 1, 2] * 4),
        choice=np.array([0, 0, 1, 0, 1, 1, 2, 0, 0, 1, 1, 1]),
        n_items=4,
        n_annotators=3,
        shown_left=np.array([0, 1, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0]),
        elapsed_ms=np.array(
            [1000, 4000, 9000, 3000, 5000, 9000, 2000, 6000, 9000, NAN, 8000, 9000]
        ),
        gold=np.array([0, MISSING, MISSING, 1]),
        length_a=np.array([500, 100, 300, 900]),
        length_b=np.array([200, 400, 300, 100]),
        repeat_item=np.array([1, 1, 0, 3]),
        repeat_annotator=np.array([0, 1, 2, 2]),
        repeat_choice=np.array([0, 0, 1, 0]),
    )


def test_leave_one_out_consensus_by_hand():
    """ann0's others: item 0 split (a, b) -> none; item 1 (b, b) -> b; item 2 (a, a) -> a;
    item 3 (b, b) -> b."""
    table = _hand_table()
    loo = leave_one_out_consensus(table, item_counts(table.item, table.choice, n_items=4))
    assert loo[table.annotator == 0].tolist() == [MISSING, 1, 0, 1]


def test_annotator_stats_by_hand():
    """The numbers worked out from the table above (see _hand_table)."""
    s = annotator_stats(_hand_table())
    assert s.n_judgements.tolist() == [4, 4, 4]
    assert s.tie_rate.tolist() == [0.25, 0.0, 0.0]
    # ann0 picked the left side in all 3 decisive judgements: two-sided p = 2 * 0.5^3.
    assert (s.left_n[0], s.left_share[0], s.left_p_value[0]) == (3, 1.0, 0.25)
    # ann0 agrees with the others' majority on item 3 only (item 0 has none).
    assert (s.loo_n[0], s.loo_agreement[0]) == (3, pytest.approx(1 / 3))
    # Longer response: ann0 picked it on item 0 only (of 0, 1, 3); its consensus on items 1, 3: 1 of 2.
    assert s.longer_share[0] == pytest.approx(1 / 3)
    assert s.consensus_longer_share[0] == pytest.approx(1 / 2)
    assert s.length_bias[0] == pytest.approx(1 / 3 - 1 / 2)
    # 1 of 3 against a share of 1/2: P(X <= 1) = 4/8, P(X >= 1) = 7/8, so p = min(1, 2 x 4/8) = 1.
    assert s.longer_p_value[0] == pytest.approx(1.0)
    assert s.gold_n.tolist() == [2, 2, 2]
    assert s.gold_accuracy.tolist() == [1.0, 1.0, 0.5]
    assert s.repeat_n.tolist() == [1, 1, 2]
    assert s.repeat_consistency.tolist() == [1.0, 0.0, 0.5]
    assert s.median_ms.tolist() == [2000.0, 5500.0, 9000.0]
    assert s.timed_n.tolist() == [3, 4, 4]


def test_fast_share_uses_a_fraction_of_the_project_median():
    """The 11 timed judgements, sorted: 1000 2000 3000 4000 5000 6000 8000 9000 9000 9000 9000; the
    median is 6000 ms and a quarter of it 1500: only ann0's 1000 ms is faster, 1 of its 3 timed."""
    s = annotator_stats(_hand_table())
    assert s.fast_threshold_ms == 1500.0
    assert s.fast_share.tolist() == [pytest.approx(1 / 3), 0.0, 0.0]


def test_binomial_test_matches_scipy():
    """The vectorised two-sided test equals scipy.stats.binomtest against 0.5."""
    k = np.array([0, 3, 7, 10, 12, 50])
    n = np.array([5, 10, 10, 20, 30, 80])
    expected = [stats.binomtest(int(a), int(b), 0.5).pvalue for a, b in zip(k, n, strict=True)]
    assert _binomial_two_sided(k, n) == pytest.approx(expected, rel=1e-9)
    assert np.isnan(_binomial_two_sided(np.array([0]), np.array([0]))[0])


def test_binomial_test_against_any_share_matches_scipy():
    """Against p != 0.5 the test is the "central" one: twice the smaller tail (scipy's binomtest
    two-sided p-value sums the unlikely outcomes instead, so compare the tails directly)."""
    k, n, p = np.array([5, 27, 10]), np.array([29, 34, 40]), np.array([0.375, 0.208, 0.25])
    expected = [
        min(1.0, 2 * min(stats.binom.cdf(a, b, c), stats.binom.sf(a - 1, b, c)))
        for a, b, c in zip(k, n, p, strict=True)
    ]
    assert _binomial_two_sided(k, n, p) == pytest.approx(expected)
    assert np.isnan(_binomial_two_sided(np.array([3]), np.array([5]), np.array([0.0]))[0])


def test_holm_adjustment_by_hand():
    """p = .01, .04, .03: sorted .01 x3 = .03, .03 x2 = .06, .04 x1 -> max(.06, .04) = .06."""
    assert holm_adjust(np.array([0.01, 0.04, 0.03, NAN])) == pytest.approx(
        [0.03, 0.06, 0.06, NAN], nan_ok=True
    )


@pytest.fixture(scope="module")
def habits_report():
    """Ten careful annotators and five with one habit each."""
    habits = [Habits() for _ in range(10)] + [
        Habits(left=0.5),
        Habits(longer=0.6),
        Habits(fast=True),
        Habits(accuracy=0.0),  # answers at random
        Habits(swap=0.8),
    ]
    table, truth = simulate(habits, n_items=4000)
    return agreement_report(table, overlap=3, n_categories=3, n_boot=200), table, truth


def test_each_habit_raises_its_flag(habits_report):
    """The left-lover, the length-lover, the fast clicker and the random clicker are flagged for
    what they do; the swapper fails the gold items; careful annotators are not flagged."""
    report, _, _ = habits_report
    flags = report.annotators.flags
    assert "position_bias" in flags[10]
    assert "length_bias" in flags[11]
    assert "fast" in flags[12]
    assert "low_agreement" in flags[13]
    assert "low_gold_accuracy" in flags[14]
    assert all(not f for f in flags[:10]), flags[:10]


def test_careful_annotators_agree_with_the_consensus(habits_report):
    """Careful annotators agree with the others' majority far more often than the random one."""
    report, _, _ = habits_report
    loo = report.annotators.loo_agreement
    assert loo[:10].min() > 0.8 > 0.5 > loo[13]


def test_report_coefficients_equal_the_public_functions(habits_report):
    """The report's estimates are what the public functions give on the same judgements."""
    report, table, _ = habits_report
    assert set(report.coefficients) == set(COEFFICIENTS)
    counts = item_counts(table.item, table.choice, n_items=table.n_items)[:, :3]
    data = np.full((table.n_annotators, table.n_items), np.nan)
    data[table.annotator, table.item] = table.choice
    assert report.coefficients["fleiss_kappa"].estimate == pytest.approx(fleiss_kappa(counts))
    assert report.coefficients["krippendorff_alpha"].estimate == pytest.approx(
        krippendorff_alpha(data)
    )
    assert report.coefficients["gwet_ac1"].estimate == pytest.approx(gwet_ac1(data))
    assert (report.n_items, report.n_judgements, report.n_annotators) == (4000, 12000, 15)
    assert report.n_items_full_overlap == 4000
    assert report.pairs.kappa.size == 15 * 14 // 2


def test_fleiss_uses_only_items_with_the_full_overlap():
    """An item with fewer judgements than the overlap is left out of Fleiss but kept by alpha."""
    table, _ = simulate([Habits() for _ in range(6)], n_items=500, seed=2)
    keep = np.ones(table.item.size, bool)
    keep[:30:3] = False  # items 0-9 lose one judgement each
    partial = JudgementTable(
        item=table.item[keep],
        annotator=table.annotator[keep],
        choice=table.choice[keep],
        n_items=500,
        n_annotators=6,
    )
    report = agreement_report(partial, overlap=3, n_boot=0)
    counts = item_counts(partial.item, partial.choice, n_items=500)
    full = counts[counts.sum(axis=1) == 3]
    assert report.n_items_full_overlap == 490
    assert report.coefficients["fleiss_kappa"].estimate == pytest.approx(
        fleiss_kappa(full[:, full.sum(axis=0) > 0])
    )


def test_majority_vote_by_hand():
    """(a, a, b) -> a with shares 2/3, 1/3 and margin 1/3; (a, b) split -> undecided; unjudged -> none."""
    result = majority_vote(np.array([[2, 1, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]]))
    assert result.label.tolist() == [0, MISSING, MISSING]
    assert result.margin[:2] == pytest.approx([1 / 3, 0.0])
    assert np.isnan(result.margin[2])


def test_top_choice_split_rules_by_hand():
    """Rows (a, b, tie, both_bad): (2, 1, 0, 0) a alone; (1, 1, 0, 0) a/b split; (1, 1, 1, 0) split
    with tie; (1, 0, 0, 1) a level with both bad. "undecided" leaves every split MISSING; "tie"
    makes the first two splits a tie and keeps a over both bad (the order still prefers a)."""
    counts = np.array([[2, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 1]])
    assert top_choice(counts).tolist() == [0, MISSING, MISSING, MISSING]
    assert top_choice(counts, split="tie").tolist() == [0, TIE, TIE, 0]
    assert majority_vote(counts, split="tie").label.tolist() == [0, TIE, TIE, 0]
    # Projects without tie or both bad have two columns: an a/b split is still a tie for the export.
    assert top_choice(np.array([[3, 3]]), split="tie").tolist() == [TIE]
    with pytest.raises(ValueError, match="split rule"):
        top_choice(counts, split="coin")


def test_side_margin_is_chosen_minus_rejected():
    """Posterior (.8, .15, .05, 0): label a -> .8 - .15 = .65; label b on (.1, .6, .3, 0) -> .5;
    label tie -> 0 (no order to weigh); MISSING -> 0."""
    posterior = np.array([[0.8, 0.15, 0.05, 0.0], [0.1, 0.6, 0.3, 0.0], [0.2, 0.2, 0.6, 0.0]] * 2)
    label = np.array([0, 1, TIE, MISSING, MISSING, MISSING])
    assert side_margin(posterior, label) == pytest.approx([0.65, 0.5, 0.0, 0.0, 0.0, 0.0])


def test_dawid_skene_margin_is_the_side_margin_of_its_posterior():
    """The report's Dawid-Skene margin and the export's are one formula: P(chosen) - P(rejected)."""
    table, _ = simulate([Habits() for _ in range(4)], n_items=100, seed=8)
    result = dawid_skene(table.item, table.annotator, table.choice, n_items=100, n_annotators=4)
    consensus = result.consensus
    judged = ~np.isnan(consensus.margin)
    expected = side_margin(consensus.posterior, consensus.label)
    assert consensus.margin[judged] == pytest.approx(expected[judged])


def test_dawid_skene_beats_majority_when_some_annotators_are_biased():
    """Two annotators swap a and b 90% of the time; three are right 70% of the time. Majority vote
    inherits the swappers' errors; Dawid-Skene learns their confusion and turns their votes round."""
    habits = [Habits(accuracy=0.7) for _ in range(3)] + [Habits(accuracy=1.0, swap=0.9)] * 2
    table, truth = simulate(habits, n_items=3000, per_item=5, seed=5)
    counts = item_counts(table.item, table.choice, n_items=3000, n_categories=3)
    majority = majority_vote(counts).label
    result = dawid_skene(
        table.item, table.annotator, table.choice, n_items=3000, n_annotators=5, n_categories=3
    )
    ds_accuracy = (result.consensus.label == truth).mean()
    assert ds_accuracy > (majority == truth).mean() + 0.1
    assert ds_accuracy > 0.9
    # The swappers' learned confusion: true a is mostly said as b.
    assert result.confusion[3, 0, 1] > 0.8


def test_dawid_skene_posteriors_are_distributions():
    """Rows of the posterior sum to 1, unjudged items get the priors, margins lie in [0, 1], and the
    same input gives the same output."""
    table, _ = simulate([Habits() for _ in range(5)], n_items=200, seed=6)
    run = dict(n_items=201, n_annotators=5, n_categories=3)
    first = dawid_skene(table.item, table.annotator, table.choice, **run)
    second = dawid_skene(table.item, table.annotator, table.choice, **run)
    posterior = first.consensus.posterior
    assert posterior.sum(axis=1) == pytest.approx(np.ones(201))
    assert posterior[200] == pytest.approx(first.priors)
    assert first.consensus.label[200] == MISSING
    margin = first.consensus.margin[:200]
    assert ((margin >= 0) & (margin <= 1)).all()
    assert np.array_equal(first.consensus.label, second.consensus.label)
    assert first.iterations < 100


def test_thresholds_are_configurable():
    """Raising min_judgements above everyone's count silences every flag."""
    table, _ = simulate([Habits(left=0.9)] + [Habits() for _ in range(4)], n_items=600, seed=7)
    assert "position_bias" in agreement_report(table, n_boot=0).annotators.flags[0]
    quiet = agreement_report(table, n_boot=0, thresholds=BiasThresholds(min_judgements=10**6))
    assert not any(quiet.annotators.flags)


def test_judgement_table_rejects_inconsistent_columns():
    """Shapes and index ranges are checked where the table is built, naming the column."""
    with pytest.raises(ValueError, match="annotator"):
        JudgementTable(item=np.array([0, 1]), annotator=np.array([0]), choice=np.array([0, 1]),
                       n_items=2, n_annotators=1)  # fmt: skip
    with pytest.raises(ValueError, match="choice codes"):
        JudgementTable(item=np.array([0]), annotator=np.array([0]), choice=np.array([TIE + 5]),
                       n_items=1, n_annotators=1)  # fmt: skip
