"""Invariants of the coefficients and cross-checks: brute force, the peer libraries, identities."""

import itertools

import numpy as np
import pytest

from annotation import agreement
from annotation.agreement import (
    agreement_by_group,
    alpha_from_counts,
    bootstrap_interval,
    coefficient_intervals,
    cohen_kappa,
    count_patterns,
    fleiss_kappa,
    gwet_ac1,
    item_counts,
    krippendorff_alpha,
    pairwise_cohen,
    percent_agreement,
    percent_agreement_no_ties,
)


def _random_judgements(seed: int, n_items: int = 300, n_annotators: int = 8, per_item: int = 3):
    """Columnar judgements: each item gets `per_item` distinct annotators; labels correlate with a
    latent truth so the coefficients are neither 0 nor 1."""
    rng = np.random.default_rng(seed)
    chosen = np.argsort(rng.random((n_items, n_annotators)), axis=1)[:, :per_item]
    item = np.repeat(np.arange(n_items), per_item)
    annotator = chosen.ravel()
    truth = rng.choice(3, size=n_items, p=[0.45, 0.4, 0.15])
    label = np.where(rng.random(item.size) < 0.7, truth[item], rng.integers(0, 3, item.size))
    return item, annotator, label


def _reliability_matrix(item, annotator, label, n_items, n_annotators):
    data = np.full((n_annotators, n_items), np.nan)
    data[annotator, item] = label
    return data


def test_cohen_kappa_is_symmetric_and_label_free():
    """Swapping the raters, or renaming the categories, changes nothing (unweighted kappa)."""
    *_, label = _random_judgements(1, per_item=2, n_annotators=2)
    first, second = label[::2], label[1::2]
    names = np.array(["tie", "a", "b"])
    assert cohen_kappa(first, second) == pytest.approx(cohen_kappa(second, first))
    assert cohen_kappa(names[first], names[second]) == pytest.approx(cohen_kappa(first, second))


def test_cohen_kappa_perfect_and_undefined():
    """Identical varied labels give 1; one shared category everywhere is undefined (NaN)."""
    assert cohen_kappa([0, 1, 2, 1], [0, 1, 2, 1]) == 1.0
    assert np.isnan(cohen_kappa([1, 1, 1], [1, 1, 1]))


def test_cohen_kappa_rejects_bad_input():
    """Different lengths and unknown weights are errors that name the problem."""
    with pytest.raises(ValueError, match="same length"):
        cohen_kappa([0, 1], [0])
    with pytest.raises(ValueError, match="weights"):
        cohen_kappa([0, 1], [0, 1], weights="cubic")


@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
def test_cohen_kappa_matches_scikit_learn(weights):
    """scikit-learn's cohen_kappa_score is the reference implementation people use."""
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(7)
    first = rng.integers(0, 4, 500)
    second = np.where(rng.random(500) < 0.6, first, rng.integers(0, 4, 500))
    expected = sklearn_metrics.cohen_kappa_score(first, second, weights=weights)
    assert cohen_kappa(first, second, weights=weights) == pytest.approx(expected, abs=1e-12)


def test_fleiss_kappa_matches_statsmodels():
    """statsmodels' fleiss_kappa on the same count table (equal raters per item)."""
    inter_rater = pytest.importorskip("statsmodels.stats.inter_rater")
    item, _, label = _random_judgements(2)
    counts = item_counts(item, label, n_items=300, n_categories=3)
    assert fleiss_kappa(counts) == pytest.approx(inter_rater.fleiss_kappa(counts), abs=1e-12)


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval", "ratio"])
def test_alpha_matches_krippendorff_package(level):
    """The `krippendorff` package on a raters x items matrix with missing values."""
    krippendorff = pytest.importorskip("krippendorff")
    item, annotator, label = _random_judgements(3)
    data = _reliability_matrix(item, annotator, label + 1.0, 300, 8)
    expected = krippendorff.alpha(reliability_data=data, level_of_measurement=level)
    assert krippendorff_alpha(data, level=level) == pytest.approx(expected, abs=1e-10)


def test_alpha_equals_fleiss_up_to_the_small_sample_term():
    """With every item rated by m raters (n = N m values), nominal alpha = 1 - (1 - kappa_F)(n-1)/n:
    both use the same observed disagreement; alpha's expected disagreement is unbiased."""
    item, _, label = _random_judgements(4)
    counts = item_counts(item, label, n_items=300, n_categories=3)
    n = counts.sum()
    expected = 1 - (1 - fleiss_kappa(counts)) * (n - 1) / n
    assert alpha_from_counts(counts) == pytest.approx(expected, abs=1e-12)


def test_alpha_ignores_units_with_a_single_value():
    """A unit only one rater coded holds no pair and cannot change alpha (Krippendorff 2011)."""
    item, annotator, label = _random_judgements(5)
    data = _reliability_matrix(item, annotator, label, 300, 8)
    extra = np.full((8, 1), np.nan)
    extra[0, 0] = 2
    assert krippendorff_alpha(np.hstack([data, extra])) == pytest.approx(krippendorff_alpha(data))


def test_gwet_ac1_perfect_agreement_and_categories():
    """Perfect agreement gives 1 whatever q; declaring unused categories lowers pe, so AC1 rises."""
    data = [[0, 1, 1, 0, 2], [0, 1, 1, 0, 2]]
    assert gwet_ac1(data) == pytest.approx(1.0)
    noisy = [[0, 1, 1, 0, 2, 1], [0, 1, 0, 0, 2, 2]]
    assert gwet_ac1(noisy, n_categories=5) > gwet_ac1(noisy)
    with pytest.raises(ValueError, match="n_categories"):
        gwet_ac1(noisy, n_categories=2)


def test_percent_agreement_counts_rater_pairs_by_hand():
    """Pooled over items: agreeing pairs / all pairs. Items: (a, a, b) -> 1 of 3 pairs agree;
    (tie, tie) -> 1 of 1; (b) -> no pair. Total 2/4. Without ties: (a, a, b) 1 of 3, (tie, tie) none:
    1/3."""
    counts = np.array([[2, 1, 0, 0], [0, 0, 2, 0], [0, 1, 0, 0]])
    assert percent_agreement(counts) == pytest.approx(2 / 4)
    assert percent_agreement_no_ties(counts) == pytest.approx(1 / 3)


def test_percent_agreement_no_ties_drops_pairs_with_a_tie():
    """(a, tie, tie): the tie-tie pair and both a-tie pairs go; no pair is left, so NaN."""
    assert np.isnan(percent_agreement_no_ties(np.array([[1, 0, 2, 0]])))


def test_count_patterns_round_trip():
    """patterns[inverse] rebuilds the table and freq counts each pattern's rows, on both code paths
    (small key space bincount, and the general np.unique)."""
    item, _, label = _random_judgements(6)
    for counts in (
        item_counts(item, label, n_items=300, n_categories=3),
        np.eye(30, dtype=int) * 5,
    ):
        patterns, freq, inverse = count_patterns(counts)
        assert (patterns[inverse] == counts).all()
        assert (np.bincount(inverse, minlength=freq.size) == freq).all()


def test_interval_estimates_equal_the_public_functions():
    """The pattern-weighted estimates are the same numbers the public functions give."""
    item, annotator, label = _random_judgements(8, n_items=400)
    keep = ~((item % 7 == 0) & (np.arange(item.size) % 3 == 2))  # some items with 2 ratings only
    item, annotator, label = item[keep], annotator[keep], label[keep]
    counts = item_counts(item, label, n_items=400, n_categories=3)
    result = coefficient_intervals(counts, full_overlap=3, n_boot=0)
    full = counts[counts.sum(axis=1) >= 3]
    data = _reliability_matrix(item, annotator, label, 400, 8)
    assert result["fleiss_kappa"].estimate == pytest.approx(fleiss_kappa(full))
    assert result["krippendorff_alpha"].estimate == pytest.approx(krippendorff_alpha(data))
    assert result["gwet_ac1"].estimate == pytest.approx(gwet_ac1(data))
    assert result["percent_agreement"].estimate == pytest.approx(percent_agreement(counts))
    assert result["percent_agreement_no_ties"].estimate == pytest.approx(
        percent_agreement_no_ties(counts)
    )


def test_bootstrap_intervals_bracket_the_estimate_and_repeat_with_the_seed():
    """Percentile intervals hold the estimate, are reproducible, and shrink with 4x the items."""
    item, _, label = _random_judgements(9, n_items=200)
    small = coefficient_intervals(item_counts(item, label, n_items=200, n_categories=3), seed=1)
    again = coefficient_intervals(item_counts(item, label, n_items=200, n_categories=3), seed=1)
    item, _, label = _random_judgements(9, n_items=800)
    large = coefficient_intervals(item_counts(item, label, n_items=800, n_categories=3), seed=1)
    for name, interval in small.items():
        assert interval.low <= interval.estimate <= interval.high, name
        assert interval == again[name]
        assert large[name].high - large[name].low < interval.high - interval.low, name


def test_pattern_bootstrap_matches_the_generic_resampler():
    """Drawing items with replacement (generic, slow) and drawing count patterns (fast) are the same
    distribution: the two 95% intervals of Fleiss' kappa agree to sampling error."""
    item, annotator, label = _random_judgements(10, n_items=300)
    counts = item_counts(item, label, n_items=300, n_categories=3)
    fast = coefficient_intervals(counts, n_boot=2000, seed=3)["krippendorff_alpha"]
    data = _reliability_matrix(item, annotator, label, 300, 8)
    slow = bootstrap_interval(krippendorff_alpha, data, n_boot=2000, seed=4)
    assert fast.estimate == pytest.approx(slow.estimate)
    assert fast.low == pytest.approx(slow.low, abs=0.015)
    assert fast.high == pytest.approx(slow.high, abs=0.015)


def test_pairwise_cohen_equals_cohen_kappa_for_every_pair():
    """The one-bincount pairwise computation agrees with cohen_kappa on each pair's shared items."""
    item, annotator, label = _random_judgements(11, n_items=400, n_annotators=6)
    pairs = pairwise_cohen(item, annotator, label, n_annotators=6, n_categories=3)
    data = _reliability_matrix(item, annotator, label, 400, 6)
    assert pairs.kappa.size == 15
    for first, second, kappa, n in zip(
        pairs.first, pairs.second, pairs.kappa, pairs.n, strict=True
    ):
        both = ~np.isnan(data[first]) & ~np.isnan(data[second])
        assert n == both.sum()
        assert kappa == pytest.approx(cohen_kappa(data[first, both], data[second, both]))
    matrix = pairs.matrix(6)
    assert np.allclose(matrix, matrix.T, equal_nan=True) and np.isnan(np.diag(matrix)).all()


def test_pairwise_cohen_handles_items_of_any_size():
    """Items with 2, 3 and 4 judgements all contribute their s(s-1)/2 pairs; singletons none."""
    item = np.array([0, 0, 1, 1, 1, 2, 2, 2, 2, 3])
    annotator = np.array([0, 1, 0, 1, 2, 0, 1, 2, 3, 0])
    label = np.zeros(10, int)
    pairs = pairwise_cohen(item, annotator, label, n_annotators=4, n_categories=2)
    assert dict(zip(zip(pairs.first, pairs.second, strict=True), pairs.n, strict=True)) == {
        (0, 1): 3, (0, 2): 2, (1, 2): 2, (0, 3): 1, (1, 3): 1, (2, 3): 1,
    }  # fmt: skip


def test_pairwise_bootstrap_interval_brackets_the_kappa():
    """Each pair's interval (resampling comparisons) holds its kappa and is not degenerate."""
    item, annotator, label = _random_judgements(12, n_items=600, n_annotators=4)
    pairs = pairwise_cohen(
        item, annotator, label, n_annotators=4, n_categories=3, n_items=600, n_boot=300
    )
    assert ((pairs.low <= pairs.kappa) & (pairs.kappa <= pairs.high)).all()
    assert (pairs.high - pairs.low > 0.02).all()


def test_agreement_by_group_equals_each_group_alone():
    """Grouped percent agreement and Fleiss' kappa equal the plain functions on each group's items;
    items in group MISSING are left out."""
    item, _, label = _random_judgements(13, n_items=300)
    counts = item_counts(item, label, n_items=300, n_categories=3)
    group = np.arange(300) % 4 - 1  # groups -1 (left out), 0, 1, 2
    result = agreement_by_group(counts, group, n_groups=3)
    for g in range(3):
        mine = counts[group == g]
        assert result.n_items[g] == mine.shape[0]
        assert result.percent_agreement[g] == pytest.approx(percent_agreement(mine))
        assert result.fleiss_kappa[g] == pytest.approx(fleiss_kappa(mine))


def test_agreement_by_group_with_no_groups():
    """Every item left out (e.g. no prompt clustered yet): empty arrays, no error."""
    counts = np.array([[2, 1, 0, 0], [0, 3, 0, 0]])
    result = agreement_by_group(counts, np.array([-1, -1]), n_groups=0)
    assert result.n_items.size == result.fleiss_kappa.size == 0


def test_brute_force_pairs_on_tiny_data():
    """Percent agreement by enumerating every rater pair of every item, for a tiny table."""
    rows = [["a", "a", "b"], ["tie", "b"], ["b", "b", "b", "a"]]
    agree = sum(x == y for row in rows for x, y in itertools.combinations(row, 2))
    total = sum(1 for row in rows for _ in itertools.combinations(row, 2))
    codes = {name: code for code, name in enumerate(agreement.CHOICES)}
    item = np.concatenate([[i] * len(row) for i, row in enumerate(rows)])
    label = np.array([codes[x] for row in rows for x in row])
    assert percent_agreement(item_counts(item, label, n_items=3)) == pytest.approx(agree / total)


def test_pairwise_kappa_built_in_small_chunks_equals_one_pass(monkeypatch):
    """The rater pairs are counted a chunk of items at a time (memory bounded); chunks of 2 items
    give the same confusion matrices and kappas as one chunk, on items of 1 to 4 judgements."""
    from annotation.agreement import bootstrap

    rng = np.random.default_rng(7)
    item = np.repeat(np.arange(40), rng.integers(1, 5, size=40))
    annotator = np.concatenate([rng.choice(6, size=n, replace=False) for n in np.bincount(item)])
    label = rng.integers(0, 4, size=item.size)
    whole = bootstrap.pairwise_cohen(item, annotator, label, n_annotators=6)
    monkeypatch.setattr(bootstrap, "PAIR_CHUNK_ITEMS", 2)
    chunked = bootstrap.pairwise_cohen(item, annotator, label, n_annotators=6)
    assert np.array_equal(whole.confusion, chunked.confusion)
    assert np.array_equal(whole.first, chunked.first)
    assert np.allclose(whole.kappa, chunked.kappa, equal_nan=True)
    assert whole.n.sum() == sum(n * (n - 1) // 2 for n in np.bincount(item))
