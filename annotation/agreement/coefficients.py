"""Chance-corrected agreement coefficients: two raters (Cohen), many raters in the count layout
(Fleiss, percent agreement) and in the reliability-data layout (Krippendorff, Gwet), and the per-item
category counts they are computed from. Category codes: ``CHOICES`` -> 0, 1, 2, 3."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

CHOICES = ("a", "b", "tie", "both_bad")
A, B, TIE, BOTH_BAD = range(4)
N_CHOICES = len(CHOICES)
MISSING = -1

Level = Literal["nominal", "ordinal", "interval", "ratio"]
LEVELS = ("nominal", "ordinal", "interval", "ratio")
COEFFICIENTS = (
    "percent_agreement",
    "percent_agreement_no_ties",
    "fleiss_kappa",
    "krippendorff_alpha",
    "gwet_ac1",
)


# --- Two raters ---------------------------------------------------------------------------------------
def _weighted_kappa(confusion: np.ndarray, weights: str | None) -> np.ndarray:
    """Cohen's kappa of one or many confusion matrices ``[..., K, K]`` (rows rater 1, columns rater 2).

    kappa = 1 - sum(w * observed) / sum(w * expected), with disagreement weights w: 1 off the diagonal
    (unweighted), |i - j| (linear) or (i - j)^2 (quadratic) on the category ranks (Cohen 1968). NaN where
    the expected disagreement is 0 (both raters used one and the same category) or there is no data.
    """
    confusion = np.asarray(confusion, dtype=float)
    k = confusion.shape[-1]
    ranks = np.arange(k)
    if weights is None:
        w = 1.0 - np.eye(k)
    elif weights == "linear":
        w = np.abs(ranks[:, None] - ranks[None, :]).astype(float)
    elif weights == "quadratic":
        w = ((ranks[:, None] - ranks[None, :]) ** 2).astype(float)
    else:
        raise ValueError(f"weights must be None, 'linear' or 'quadratic', not {weights!r}")
    n = confusion.sum(axis=(-2, -1))
    rows = confusion.sum(axis=-1)
    cols = confusion.sum(axis=-2)
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = rows[..., :, None] * cols[..., None, :] / n[..., None, None]
        observed_dis = (w * confusion).sum(axis=(-2, -1))
        expected_dis = (w * expected).sum(axis=(-2, -1))
        kappa = 1.0 - observed_dis / expected_dis
    return np.where(expected_dis > 0, kappa, np.nan)


def cohen_kappa(
    rater1: Sequence | np.ndarray,
    rater2: Sequence | np.ndarray,
    *,
    weights: Literal["linear", "quadratic"] | None = None,
) -> float:
    """Cohen's kappa between two raters' labels of the same N items (Cohen 1960; weighted: Cohen 1968).

    rater1, rater2: [N] labels of any sortable type (strings, integers). Weighted kappa orders the
    categories by sorting the labels seen in either rater. Returns NaN when chance agreement is total.
    """
    first, second = np.asarray(rater1), np.asarray(rater2)
    if first.ndim != 1 or first.shape != second.shape:
        raise ValueError(
            f"rater1 and rater2 must be 1-d and the same length, got {first.shape} and {second.shape}"
        )
    if first.size == 0:
        raise ValueError("cohen_kappa needs at least one item")
    labels, codes = np.unique(np.concatenate([first, second]), return_inverse=True)
    k, n = labels.size, first.size
    confusion = np.bincount(codes[:n] * k + codes[n:], minlength=k * k).reshape(k, k)
    return float(_weighted_kappa(confusion, weights))


# --- Many raters: count layout ------------------------------------------------------------------------
def _check_counts(counts: Sequence | np.ndarray) -> np.ndarray:
    table = np.asarray(counts, dtype=float)
    if table.ndim != 2:
        raise ValueError(f"counts must be 2-d [items, categories], got shape {table.shape}")
    if (table < 0).any() or not np.isfinite(table).all():
        raise ValueError("counts must be finite and non-negative")
    return table


def _pair_agreement(table: np.ndarray) -> np.ndarray:
    """Per item: share of agreeing rater pairs, sum_k n_ik (n_ik - 1) / (n_i (n_i - 1)); NaN if n_i < 2."""
    n = table.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(n >= 2, (table * (table - 1)).sum(axis=1) / (n * (n - 1)), np.nan)


def _category_shares(table: np.ndarray) -> np.ndarray:
    """pi_k: the mean over items with at least one rating of the item's share of ratings in k."""
    n = table.sum(axis=1)
    rated = n >= 1
    if not rated.any():
        return np.full(table.shape[1], np.nan)
    return (table[rated] / n[rated, None]).mean(axis=0)


def fleiss_kappa(counts: Sequence | np.ndarray) -> float:
    """Fleiss' kappa (Fleiss 1971). counts: [N items, K categories], raters per item and category.

    With the same number of raters on every item this is exactly Fleiss' statistic. Items with fewer
    raters are handled as in Gwet's handbook (2014, ch. 2): observed agreement averages the items with
    at least 2 ratings, category shares pi_k average every rated item; kappa = (pa - pe) / (1 - pe),
    pe = sum_k pi_k^2. NaN when pe = 1 or no item has two ratings.
    """
    table = _check_counts(counts)
    pa = np.nanmean(_pair_agreement(table)) if (table.sum(axis=1) >= 2).any() else np.nan
    pe = float((_category_shares(table) ** 2).sum())
    return _chance_corrected(pa, pe)


def fleiss_category_kappas(counts: Sequence | np.ndarray) -> np.ndarray:
    """Fleiss' kappa for each category (Fleiss 1971, eq. 9): one category against all the others.

    counts: [N, K] with the same number n >= 2 of raters on every item. Returns [K]:
    kappa_k = 1 - sum_i x_ik (n - x_ik) / (N n (n - 1) p_k (1 - p_k)); NaN for a category that is never
    or always used.
    """
    table = _check_counts(counts)
    n = table.sum(axis=1)
    if table.shape[0] == 0 or not np.all(n == n[0]) or n[0] < 2:
        raise ValueError(
            "fleiss_category_kappas needs the same number (>= 2) of raters on every item"
        )
    raters, items = n[0], table.shape[0]
    p = table.sum(axis=0) / (items * raters)
    disagreement = (table * (raters - table)).sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        kappas = 1.0 - disagreement / (items * raters * (raters - 1) * p * (1 - p))
    return np.where((p > 0) & (p < 1), kappas, np.nan)


def _chance_corrected(observed: float, chance: float) -> float:
    if not np.isfinite(observed) or not np.isfinite(chance) or chance >= 1.0:
        return float("nan")
    return float((observed - chance) / (1.0 - chance))


def percent_agreement(counts: Sequence | np.ndarray) -> float:
    """Pooled pairwise agreement: agreeing rater pairs / all rater pairs on the same item.

    counts: [N, K]. Items with one rating have no pair and do not count. NaN when there is no pair.
    """
    table = _check_counts(counts)
    pairs = (table.sum(axis=1) * (table.sum(axis=1) - 1)).sum()
    return float((table * (table - 1)).sum() / pairs) if pairs > 0 else float("nan")


def percent_agreement_no_ties(counts: Sequence | np.ndarray, *, tie: int = TIE) -> float:
    """Pooled pairwise agreement over rater pairs where neither rater chose ``tie`` (a column of counts)."""
    table = _check_counts(counts)
    return percent_agreement(np.delete(table, tie, axis=1))


# --- Many raters: reliability-data layout -------------------------------------------------------------
def _value_counts(data: Sequence | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """data [R raters, N items] with NaN for missing -> (values [V] sorted, counts [N, V])."""
    matrix = np.asarray(data, dtype=float)
    if matrix.ndim != 2:
        raise ValueError(f"data must be 2-d [raters, items], got shape {matrix.shape}")
    present = ~np.isnan(matrix)
    values, codes = np.unique(matrix[present], return_inverse=True)
    items = np.broadcast_to(np.arange(matrix.shape[1]), matrix.shape)[present]
    counts = np.bincount(
        items * values.size + codes, minlength=matrix.shape[1] * values.size
    ).reshape(matrix.shape[1], values.size)
    return values, counts


def _alpha_distance(values: np.ndarray, margins: np.ndarray, level: str) -> np.ndarray:
    """Squared difference function delta^2 [V, V] of Krippendorff (2011) for the level of measurement."""
    if level == "nominal":
        return 1.0 - np.eye(values.size)
    if level == "ordinal":
        # delta_ck = (sum_{g=c..k} n_g - (n_c + n_k) / 2)^2, on the ranks of the values.
        cumulative = np.concatenate([[0.0], np.cumsum(margins)])
        lo = np.minimum.outer(np.arange(values.size), np.arange(values.size))
        hi = np.maximum.outer(np.arange(values.size), np.arange(values.size))
        between = cumulative[hi + 1] - cumulative[lo]
        return (between - (margins[:, None] + margins[None, :]) / 2.0) ** 2
    if level == "interval":
        return (values[:, None] - values[None, :]) ** 2
    if level == "ratio":
        total = values[:, None] + values[None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = ((values[:, None] - values[None, :]) / total) ** 2
        return np.where(total == 0, 0.0, ratio)
    raise ValueError(f"level must be one of {LEVELS}, not {level!r}")


def alpha_from_counts(
    counts: np.ndarray, values: np.ndarray | None = None, *, level: Level = "nominal"
) -> float:
    """Krippendorff's alpha from per-item value counts [N, V] (values [V], sorted; default 0..V-1).

    Coincidences o_ck = sum_u (n_uc n_uk - [c = k] n_uc) / (m_u - 1) over items with m_u >= 2 values;
    alpha = 1 - (n - 1) sum o_ck delta_ck / sum n_c n_k delta_ck (Krippendorff 2011, eq. for D_o/D_e).
    """
    table = _check_counts(counts)
    values = np.arange(table.shape[1], dtype=float) if values is None else np.asarray(values, float)
    m = table.sum(axis=1)
    pairable = m >= 2
    weighted = table[pairable] / (m[pairable, None] - 1.0)
    coincidence = weighted.T @ table[pairable] - np.diag(weighted.sum(axis=0))
    margins = coincidence.sum(axis=1)
    n = margins.sum()
    if n <= 1:
        return float("nan")
    delta = _alpha_distance(values, margins, level)
    observed = (coincidence * delta).sum()
    expected = (np.outer(margins, margins) * delta).sum() / (n - 1.0)
    return float(1.0 - observed / expected) if expected > 0 else float("nan")


def krippendorff_alpha(data: Sequence | np.ndarray, *, level: Level = "nominal") -> float:
    """Krippendorff's alpha for any number of raters with missing values (Krippendorff 2011).

    data: [R raters, N items] of numbers, NaN (or None) where a rater did not rate the item.
    level: "nominal", "ordinal" (ranks of the values seen), "interval" or "ratio".
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, not {level!r}")
    values, counts = _value_counts(data)
    return alpha_from_counts(counts, values, level=level)


def ac1_from_counts(counts: np.ndarray, *, n_categories: int | None = None) -> float:
    """Gwet's AC1 from per-item category counts [N, K] (Gwet 2008; handbook 2014, ch. 4).

    pa as for Fleiss (items with >= 2 ratings); pe = sum_k pi_k (1 - pi_k) / (q - 1), with q the number
    of categories (default: the columns of counts) and pi_k averaged over every rated item.
    """
    table = _check_counts(counts)
    q = table.shape[1] if n_categories is None else n_categories
    if q < 2:
        return float("nan")
    pa = np.nanmean(_pair_agreement(table)) if (table.sum(axis=1) >= 2).any() else np.nan
    shares = _category_shares(table)
    pe = float((shares * (1 - shares)).sum() / (q - 1))
    return _chance_corrected(pa, pe)


def gwet_ac1(data: Sequence | np.ndarray, *, n_categories: int | None = None) -> float:
    """Gwet's AC1 for any number of raters with missing values; data as for ``krippendorff_alpha``.

    n_categories: the number of categories q the raters could choose from (default: those seen).
    """
    values, counts = _value_counts(data)
    q = values.size if n_categories is None else n_categories
    if q < values.size:
        raise ValueError(f"n_categories={q} but the data holds {values.size} distinct values")
    return ac1_from_counts(counts, n_categories=q)


# --- Building counts from judgements ------------------------------------------------------------------
def item_counts(
    item: np.ndarray, label: np.ndarray, *, n_items: int, n_categories: int = N_CHOICES
) -> np.ndarray:
    """counts [n_items, n_categories] from per-judgement item indices and category codes [J]."""
    flat = np.bincount(
        np.asarray(item, np.int64) * n_categories + np.asarray(label, np.int64),
        minlength=n_items * n_categories,
    )
    return flat.reshape(n_items, n_categories)
