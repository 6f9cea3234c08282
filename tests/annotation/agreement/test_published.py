"""Every coefficient against the worked examples printed in the literature, to the printed precision.

Each test's docstring names the source of the data and of the expected value.
"""

import numpy as np
import pytest

from annotation.agreement import (
    cohen_kappa,
    fleiss_category_kappas,
    fleiss_kappa,
    gwet_ac1,
    item_counts,
    krippendorff_alpha,
    percent_agreement,
)
from tests.helpers.published_agreement import KRIPPENDORFF_C

NA = np.nan

# Fleiss (1971), "Measuring nominal scale agreement among many raters", Psychological Bulletin 76,
# 378-382, Table 1: 30 patients, 6 psychiatrists each, 5 diagnoses (1 depression, 2 personality
# disorder, 3 schizophrenia, 4 neurosis, 5 other). Raw ratings as distributed in R's irr::diagnoses.
FLEISS_1971 = np.array(
    [
        [4, 4, 4, 4, 4, 4], [2, 2, 2, 5, 5, 5], [2, 3, 3, 3, 3, 5], [5, 5, 5, 5, 5, 5],
        [2, 2, 2, 4, 4, 4], [1, 1, 3, 3, 3, 3], [3, 3, 3, 3, 5, 5], [1, 1, 3, 3, 3, 4],
        [1, 1, 4, 4, 4, 4], [5, 5, 5, 5, 5, 5], [1, 4, 4, 4, 4, 4], [1, 2, 4, 4, 4, 4],
        [2, 2, 2, 3, 3, 3], [1, 4, 4, 4, 4, 4], [2, 2, 4, 4, 4, 5], [3, 3, 3, 3, 3, 5],
        [1, 1, 1, 4, 5, 5], [1, 1, 1, 1, 1, 2], [2, 2, 4, 4, 4, 4], [1, 3, 3, 5, 5, 5],
        [5, 5, 5, 5, 5, 5], [2, 4, 4, 4, 4, 4], [2, 2, 4, 5, 5, 5], [1, 1, 4, 4, 4, 4],
        [1, 4, 4, 4, 4, 5], [2, 2, 2, 2, 2, 4], [1, 1, 1, 1, 5, 5], [2, 2, 4, 4, 4, 4],
        [1, 3, 3, 3, 3, 3], [5, 5, 5, 5, 5, 5],
    ]
)  # fmt: skip


def _counts_from_raw(ratings: np.ndarray, categories: list[int]) -> np.ndarray:
    return np.stack([(ratings == c).sum(axis=1) for c in categories], axis=1)


def _raters_from_table(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two raters' label vectors reproducing a contingency table (rows rater 1, columns rater 2)."""
    k = table.shape[0]
    cells = [(i, j) for i in range(k) for j in range(k)]
    first = np.repeat([i for i, _ in cells], table.ravel())
    second = np.repeat([j for _, j in cells], table.ravel())
    return first, second


def test_fleiss_1971_overall_kappa():
    """Fleiss (1971), Table 1 data: the paper prints kappa = .430 (p. 380)."""
    counts = _counts_from_raw(FLEISS_1971, [1, 2, 3, 4, 5])
    assert round(fleiss_kappa(counts), 3) == 0.430


def test_fleiss_1971_category_kappas():
    """Fleiss (1971), the per-category kappas printed for the five diagnoses: .245, .245, .520, .471,
    .566 (also the `detail` output of R's irr::kappam.fleiss on this data)."""
    counts = _counts_from_raw(FLEISS_1971, [1, 2, 3, 4, 5])
    assert np.round(fleiss_category_kappas(counts), 3).tolist() == [
        0.245,
        0.245,
        0.520,
        0.471,
        0.566,
    ]


def test_fleiss_wikipedia_fourteen_raters():
    """The worked example of Wikipedia's "Fleiss' kappa" article (10 subjects, 14 raters, 5
    categories), also statsmodels' test_inter_rater.py: kappa = 0.210."""
    counts = [
        [0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
        [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7],
    ]  # fmt: skip
    assert round(fleiss_kappa(counts), 3) == 0.210


def test_krippendorff_2011_binary_two_observers():
    """Krippendorff (2011), section A (binary data, two observers, no missing data): alpha = 0.095."""
    data = [[0, 1, 0, 0, 0, 0, 0, 0, 1, 0], [1, 1, 1, 0, 0, 1, 0, 0, 0, 0]]
    assert round(krippendorff_alpha(data), 3) == 0.095


def test_krippendorff_2011_nominal_two_observers():
    """Krippendorff (2011), section B (nominal data, two observers Ben and Gerry, values a-e, no
    missing data): alpha = 0.692."""
    ben, gerry = "aabbdcccedda", "babbbccceddd"
    data = [[ord(c) for c in ben], [ord(c) for c in gerry]]
    assert round(krippendorff_alpha(data), 3) == 0.692


@pytest.mark.parametrize(
    ("level", "printed"),
    [("nominal", 0.743), ("ordinal", 0.815), ("interval", 0.849), ("ratio", 0.797)],
)
def test_krippendorff_2011_many_observers_missing_data(level, printed):
    """Krippendorff (2011), section C data (4 observers, 12 units, missing values): alpha = .743
    nominal, .815 ordinal, .849 interval, .797 ratio (sections C-F; the ordinal and ratio values are
    also the doctests of the `krippendorff` package)."""
    assert round(krippendorff_alpha(KRIPPENDORFF_C, level=level), 3) == printed


def test_krippendorff_2011_nominal_exact_fraction():
    """Krippendorff (2011), section C works alpha out by hand: 1 - (n - 1) D_o / D_e with n = 40
    pairable values; the coincidences give exactly 1 - 312/1216 (hence .743)."""
    assert krippendorff_alpha(KRIPPENDORFF_C) == pytest.approx(1 - 312 / 1216, abs=1e-12)


def test_krippendorff_wikipedia_three_coders():
    """Wikipedia "Krippendorff's alpha", computational example (3 coders, 15 units, missing data);
    the `krippendorff` package documents it: nominal 0.691358, interval 0.810845."""
    data = [
        [NA, NA, NA, NA, NA, 3, 4, 1, 2, 1, 1, 3, 3, NA, 3],
        [1, NA, 2, 1, 3, 3, 4, 3, NA, NA, NA, NA, NA, NA, NA],
        [NA, NA, 2, 1, 3, 4, 4, NA, 2, 1, 1, 3, 3, NA, 4],
    ]
    assert round(krippendorff_alpha(data), 6) == 0.691358
    assert round(krippendorff_alpha(data, level="interval"), 6) == 0.810845


def test_gwet_handbook_ac1_four_raters_missing():
    """Gwet (2014), Handbook of Inter-Rater Reliability 4th ed., p. 120 (irrCAC's cac.raw4raters, the
    Krippendorff C data): AC1 = 0.775 with pa = 0.818, pe = 0.190 (irrCAC gwet.ac1.raw)."""
    assert round(gwet_ac1(KRIPPENDORFF_C), 3) == 0.775


def test_gwet_handbook_fleiss_four_raters_missing():
    """Gwet (2014), same data: Fleiss' generalised kappa for missing ratings = 0.761 (pa 0.818,
    pe 0.239; irrCAC fleiss.kappa.raw). Items with one rating count in pe, not in pa."""
    values = np.array([1, 2, 3, 4, 5])
    counts = np.stack([np.sum(np.equal(KRIPPENDORFF_C, v), axis=0) for v in values], axis=1)
    assert round(fleiss_kappa(counts), 3) == 0.761


def test_gwet_handbook_two_abstractors():
    """Gwet (2014), the 100 pregnancies classified by two abstractors (irrCAC cont3x3abstractors,
    Ectopic/AIU/NIU), printed by Gwet's irrCAC vignette: Cohen 0.7964094, AC1 0.8493305,
    Krippendorff 0.7972585, percent agreement 0.89."""
    first, second = _raters_from_table(np.array([[13, 0, 0], [0, 20, 7], [0, 4, 56]]))
    assert cohen_kappa(first, second) == pytest.approx(0.7964094, abs=5e-8)
    assert gwet_ac1([first, second]) == pytest.approx(0.8493305, abs=5e-8)
    assert krippendorff_alpha([first, second]) == pytest.approx(0.7972585, abs=5e-8)
    items = np.tile(np.arange(first.size), 2)
    counts = item_counts(items, np.concatenate([first, second]), n_items=100, n_categories=3)
    assert percent_agreement(counts) == pytest.approx(0.89)


def test_cohen_1960():
    """Cohen (1960), "A coefficient of agreement for nominal scales", the worked example: 200 cases,
    proportions .44 .07 .09 / .05 .20 .05 / .01 .03 .06, p_o = .70, p_c = .41, kappa = .492."""
    first, second = _raters_from_table(np.array([[88, 14, 18], [10, 40, 10], [2, 6, 12]]))
    assert round(cohen_kappa(first, second), 3) == 0.492


def test_artstein_poesio_2008_via_scikit_learn():
    """Artstein & Poesio (2008), Computational Linguistics 34(4), Tables 1 and 4, as used by
    scikit-learn's test_cohen_kappa: 0.348 (2 categories) and 0.8013 (3 categories)."""
    first = np.array([0] * 40 + [1] * 60)
    second = np.array([0] * 20 + [1] * 20 + [0] * 10 + [1] * 50)
    assert round(cohen_kappa(first, second), 3) == 0.348
    first = np.array([0] * 46 + [1] * 44 + [2] * 10)
    second = np.array([0] * 52 + [1] * 32 + [2] * 16)
    assert round(cohen_kappa(first, second), 4) == 0.8013


def test_weighted_kappa_scikit_learn_example():
    """scikit-learn's test_cohen_kappa weighting example: unweighted 0.9315, linear 0.9412,
    quadratic 0.9541."""
    first = np.array([0] * 46 + [1] * 44 + [2] * 10)
    second = np.array([0] * 50 + [1] * 40 + [2] * 10)
    assert round(cohen_kappa(first, second), 4) == 0.9315
    assert round(cohen_kappa(first, second, weights="linear"), 4) == 0.9412
    assert round(cohen_kappa(first, second, weights="quadratic"), 4) == 0.9541
