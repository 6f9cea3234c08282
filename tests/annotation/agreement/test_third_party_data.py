"""Real multi-annotator preference data (optional: skipped when /work/shared/data is absent).

PandaLM's test set (Wang et al., ICLR 2024): 999 response pairs, each labelled by the same 3
annotators. MT-Bench human judgments (Zheng et al., NeurIPS 2023), turn 1: 65 expert judges, a
varying number of judges per (question, model pair). Neither source prints a coefficient defined as
ours, so the expected values come from the peer libraries (statsmodels, krippendorff, scikit-learn)
and from brute-force pair counting on the same data.
"""

import itertools

import numpy as np
import pytest

from annotation import agreement
from tests.helpers.shared_data import mt_bench_table, pandalm_table


def test_pandalm_coefficients_match_the_peer_libraries():
    """Fleiss (statsmodels), nominal alpha (krippendorff) and each pair's Cohen (scikit-learn) equal
    the report's values on PandaLM's 999 x 3 labels."""
    inter_rater = pytest.importorskip("statsmodels.stats.inter_rater")
    krippendorff = pytest.importorskip("krippendorff")
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    table = pandalm_table()
    report = agreement.agreement_report(table, overlap=3, n_categories=3, n_boot=200)
    labels = table.choice.reshape(-1, 3)
    counts, _ = inter_rater.aggregate_raters(labels)
    assert report.n_items == 999 and report.n_judgements == 2997
    assert report.coefficients["fleiss_kappa"].estimate == pytest.approx(
        inter_rater.fleiss_kappa(counts), abs=1e-12
    )
    assert report.coefficients["krippendorff_alpha"].estimate == pytest.approx(
        krippendorff.alpha(reliability_data=labels.T.astype(float), level_of_measurement="nominal"),
        abs=1e-12,
    )
    for first, second, kappa in zip(
        report.pairs.first, report.pairs.second, report.pairs.kappa, strict=True
    ):
        expected = sklearn_metrics.cohen_kappa_score(labels[:, first], labels[:, second])
        assert kappa == pytest.approx(expected, abs=1e-12)
    # PandaLM's annotators agree strongly: every interval lies above the PIPELINE.md target of 0.7.
    assert report.coefficients["fleiss_kappa"].low > 0.7


def test_pandalm_percent_agreement_by_brute_force():
    """Pooled pairwise agreement, with and without ties, by enumerating the 3 pairs of each row."""
    table = pandalm_table()
    labels = table.choice.reshape(-1, 3)
    pairs = [(row[i], row[j]) for row in labels for i, j in itertools.combinations(range(3), 2)]
    no_ties = [(x, y) for x, y in pairs if agreement.TIE not in (x, y)]
    report = agreement.agreement_report(table, n_boot=0)
    assert report.coefficients["percent_agreement"].estimate == pytest.approx(
        np.mean([x == y for x, y in pairs])
    )
    assert report.coefficients["percent_agreement_no_ties"].estimate == pytest.approx(
        np.mean([x == y for x, y in no_ties])
    )


def test_mt_bench_alpha_and_pairs_match_the_peer_libraries():
    """Alpha over a sparse, uneven design (1 to 7 judges per item) equals the krippendorff package,
    and every judge pair's kappa equals scikit-learn on their shared items."""
    krippendorff = pytest.importorskip("krippendorff")
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    table, _ = mt_bench_table()
    report = agreement.agreement_report(table, n_boot=0)
    data = np.full((table.n_annotators, table.n_items), np.nan)
    data[table.annotator, table.item] = table.choice
    assert report.coefficients["krippendorff_alpha"].estimate == pytest.approx(
        krippendorff.alpha(reliability_data=data, level_of_measurement="nominal"), abs=1e-12
    )
    checked = 0
    for first, second, kappa in zip(
        report.pairs.first, report.pairs.second, report.pairs.kappa, strict=True
    ):
        both = ~np.isnan(data[first]) & ~np.isnan(data[second])
        if np.isfinite(kappa):
            expected = sklearn_metrics.cohen_kappa_score(data[first, both], data[second, both])
            assert kappa == pytest.approx(expected, abs=1e-12)
            checked += 1
    assert checked > 20


def test_mt_bench_judges_are_measured_without_error():
    """Every judge gets statistics (no side or time information here: those stay NaN), and the
    Dawid-Skene posterior is a distribution for every item."""
    table, names = mt_bench_table()
    report = agreement.agreement_report(table, n_boot=100)
    assert report.annotators.n_judgements.sum() == table.item.size == 1688
    assert len(report.annotators.flags) == len(names) == 65
    assert np.isnan(report.annotators.left_share).all()
    result = agreement.dawid_skene(
        table.item, table.annotator, table.choice, n_items=table.n_items, n_annotators=65
    )
    assert result.consensus.posterior.sum(axis=1) == pytest.approx(np.ones(table.n_items))
