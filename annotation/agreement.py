"""Agreement between annotators, their biases, and consensus labels: pure NumPy/SciPy, no Django.

Public coefficients (names and data layouts are fixed by ARCHITECTURE.md):

- ``cohen_kappa(rater1, rater2, *, weights=None)``: two raters, labels of any sortable type.
- ``fleiss_kappa(counts)`` and ``fleiss_category_kappas(counts)``: ``counts[i, k]`` = raters who put
  item i in category k.
- ``krippendorff_alpha(data, *, level="nominal")`` and ``gwet_ac1(data)``: ``data[r, i]`` = rater r's
  value for item i, NaN when missing.

The project report (``agreement_report``) works on columnar judgements (``JudgementTable``) and never
builds the raters x items matrix: every coefficient it needs is a function of the per-item category
counts, so 1,000,000 judgements cost a few bincounts. Bootstrap intervals resample comparisons; because
the nominal coefficients depend on an item only through its count vector, a resample is a multinomial
draw over the distinct count patterns (a few dozen for 3 raters), which makes 1,000 replicates cheap.

Category codes used by the report: ``CHOICES = ("a", "b", "tie", "both_bad")`` -> 0, 1, 2, 3.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.special import bdtr, bdtrc  # binomial tails; far lighter to import than scipy.stats

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


# --- Bootstrap ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Interval:
    """A point estimate and its bootstrap percentile interval (NaN bounds when undefined)."""

    estimate: float
    low: float
    high: float

    def as_list(self) -> list[float | None]:
        return [_finite_or_none(self.low), _finite_or_none(self.high)]


def _finite_or_none(value: float) -> float | None:
    return float(value) if value is not None and np.isfinite(value) else None


def _percentile_interval(estimate: float, replicates: np.ndarray, confidence: float) -> Interval:
    finite = replicates[np.isfinite(replicates)]
    if not np.isfinite(estimate) or finite.size == 0:
        return Interval(float(estimate), float("nan"), float("nan"))
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(finite, [tail, 100.0 - tail])
    return Interval(float(estimate), float(low), float(high))


def count_patterns(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct rows of counts [N, K]: (patterns [P, K], freq [P], inverse [N] row -> pattern).

    Items judged by a handful of annotators share a few dozen count vectors, so every statistic that
    depends on an item only through its counts is computed once per pattern.
    """
    counts = np.asarray(counts, dtype=np.int64)
    if counts.shape[0] == 0:
        empty = np.zeros(0, np.int64)
        return counts.reshape(0, counts.shape[1]), empty, empty
    base = int(counts.max()) + 1
    if base ** counts.shape[1] <= 1 << 22:  # small key space: an O(N) bincount instead of a sort
        keys = counts @ (base ** np.arange(counts.shape[1], dtype=np.int64))
        freq_by_key = np.bincount(keys)
        present = np.flatnonzero(freq_by_key)
        lookup = np.zeros(freq_by_key.size, np.int64)
        lookup[present] = np.arange(present.size)
        inverse = lookup[keys]
        digits = (present[:, None] // base ** np.arange(counts.shape[1])) % base
        return digits.astype(np.int64), freq_by_key[present], inverse
    if base ** counts.shape[1] < 2**62:
        keys = counts @ (base ** np.arange(counts.shape[1], dtype=np.int64))
        _, first, inverse, freq = np.unique(
            keys, return_index=True, return_inverse=True, return_counts=True
        )
        return counts[first], freq, inverse
    patterns, inverse, freq = np.unique(counts, axis=0, return_inverse=True, return_counts=True)
    return patterns, freq, inverse.ravel()


def _pattern_features(
    patterns: np.ndarray, *, tie: int | None, full_overlap: int | None
) -> dict[str, np.ndarray]:
    """Per pattern [P], the additive pieces every nominal coefficient is built from (see module doc)."""
    table = patterns.astype(float)
    m = table.sum(axis=1)
    pair_agree = (table * (table - 1)).sum(axis=1)
    pairs = m * (m - 1)
    rated = (m >= 1).astype(float)
    pairable = m >= 2
    with np.errstate(divide="ignore", invalid="ignore"):
        shares = np.where(rated[:, None] > 0, table / m[:, None], 0.0)
        pa = np.where(pairable, pair_agree / pairs, 0.0)
        o_diag = np.where(pairable[:, None], table * (table - 1) / (m[:, None] - 1), 0.0)
    features = {
        "pairable": pairable.astype(float),
        "pa": pa,
        "rated": rated,
        "shares": shares,
        "pair_agree": pair_agree,
        "pairs": pairs,
        "o_diag": o_diag,
        "margins": np.where(pairable[:, None], table, 0.0),
    }
    if tie is not None and tie < table.shape[1]:
        kept = np.delete(table, tie, axis=1)
        m_nt = kept.sum(axis=1)
        features["pair_agree_nt"] = (kept * (kept - 1)).sum(axis=1)
        features["pairs_nt"] = m_nt * (m_nt - 1)
    else:
        features["pair_agree_nt"] = pair_agree
        features["pairs_nt"] = pairs
    full = m >= full_overlap if full_overlap else np.ones_like(pairable)
    features["full_pairable"] = (pairable & full).astype(float)
    features["full_rated"] = full.astype(float) * rated
    return features


def _coefficients_from_weights(
    weights: np.ndarray, features: dict[str, np.ndarray], n_categories: int
) -> dict[str, np.ndarray]:
    """Every nominal coefficient for each row of pattern weights [B, P] -> {name: [B]}."""
    w = np.atleast_2d(weights).astype(float)

    def total(name: str) -> np.ndarray:
        return w @ features[name]

    with np.errstate(divide="ignore", invalid="ignore"):
        pa = total("pa") / total("pairable")
        shares = total("shares") / total("rated")[:, None]
        pe_ac1 = (shares * (1 - shares)).sum(axis=1) / (n_categories - 1)
        # Fleiss over the items with the full overlap: pa and pi_k restricted to them.
        full_pa = (w * features["full_pairable"]) @ features["pa"] / total("full_pairable")
        full_shares = (
            (w * features["full_rated"]) @ features["shares"] / total("full_rated")[:, None]
        )
        pe_fleiss = (full_shares**2).sum(axis=1)
        margins = total("margins")
        n = margins.sum(axis=1)
        alpha = 1.0 - (n - 1) * (n - total("o_diag").sum(axis=1)) / (
            n**2 - (margins**2).sum(axis=1)
        )
        result = {
            "percent_agreement": total("pair_agree") / total("pairs"),
            "percent_agreement_no_ties": total("pair_agree_nt") / total("pairs_nt"),
            "fleiss_kappa": np.where(
                pe_fleiss < 1, (full_pa - pe_fleiss) / (1 - pe_fleiss), np.nan
            ),
            "krippendorff_alpha": np.where(n > 1, alpha, np.nan),
            "gwet_ac1": np.where(pe_ac1 < 1, (pa - pe_ac1) / (1 - pe_ac1), np.nan),
        }
    return {name: np.where(np.isfinite(v), v, np.nan) for name, v in result.items()}


def coefficient_intervals(
    counts: np.ndarray,
    *,
    n_categories: int | None = None,
    full_overlap: int | None = None,
    tie: int | None = TIE,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Interval]:
    """The nominal coefficients of COEFFICIENTS with bootstrap percentile intervals.

    counts: [N items, K categories]. Fleiss' kappa uses the items with at least ``full_overlap``
    ratings (all items when None); alpha, AC1 and percent agreement use every item. n_categories: q
    for AC1 (default K). tie: the column left out of ``percent_agreement_no_ties`` (None: none).
    Resamples items with replacement ``n_boot`` times (a multinomial draw over the distinct count
    patterns, which is the same distribution as drawing N items) with a seeded generator.
    """
    table = np.asarray(counts)
    q = table.shape[1] if n_categories is None else n_categories
    patterns, freq, _ = count_patterns(table)
    features = _pattern_features(patterns, tie=tie, full_overlap=full_overlap)
    estimates = _coefficients_from_weights(freq, features, q)
    if n_boot > 0 and freq.sum() > 0:
        rng = np.random.default_rng(seed)
        draws = rng.multinomial(int(freq.sum()), freq / freq.sum(), size=n_boot)
        replicates = _coefficients_from_weights(draws, features, q)
    else:
        replicates = {name: np.array([]) for name in estimates}
    return {
        name: _percentile_interval(float(estimates[name][0]), replicates[name], confidence)
        for name in COEFFICIENTS
    }


def bootstrap_interval(
    statistic: Callable[[np.ndarray], float],
    data: Sequence | np.ndarray,
    *,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Percentile interval of any statistic of reliability data [R, N], resampling the N items.

    The general (slow, one call per replicate) form, e.g. for ordinal or interval alpha:
    ``bootstrap_interval(lambda d: krippendorff_alpha(d, level="interval"), data)``.
    """
    matrix = np.asarray(data, dtype=float)
    rng = np.random.default_rng(seed)
    n = matrix.shape[1]
    replicates = np.array(
        [statistic(matrix[:, rng.integers(0, n, size=n)]) for _ in range(n_boot)], dtype=float
    )
    return _percentile_interval(float(statistic(matrix)), replicates, confidence)


# --- Every annotator pair ------------------------------------------------------------------------------
@dataclass(frozen=True)
class PairwiseKappa:
    """Cohen's kappa for every pair of annotators who judged a common comparison. Arrays of [P] pairs.

    ``first`` < ``second`` are annotator indices; ``n`` the comparisons both judged; ``low``/``high``
    bootstrap bounds (NaN when not computed).
    """

    first: np.ndarray
    second: np.ndarray
    kappa: np.ndarray
    n: np.ndarray
    confusion: np.ndarray  # [P, K, K], rows: the first annotator's choice
    low: np.ndarray
    high: np.ndarray

    def matrix(self, n_annotators: int) -> np.ndarray:
        """[R, R] symmetric kappa matrix, NaN where two annotators share no comparison."""
        out = np.full((n_annotators, n_annotators), np.nan)
        out[self.first, self.second] = self.kappa
        out[self.second, self.first] = self.kappa
        return out


def _rater_pairs(
    item: np.ndarray, annotator: np.ndarray, label: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """All (annotator lo, annotator hi, label lo, label hi) pairs of judgements on the same item.

    Judgements are grouped by item; items of each size s contribute s (s - 1) / 2 pairs, built for all
    items of that size at once.
    """
    order = np.argsort(item, kind="stable")
    sorted_item = item[order]
    starts = np.flatnonzero(np.r_[True, sorted_item[1:] != sorted_item[:-1]])
    sizes = np.diff(np.r_[starts, sorted_item.size])
    firsts, seconds, first_labels, second_labels = [], [], [], []
    for size in np.unique(sizes[sizes >= 2]):
        rows = order[starts[sizes == size, None] + np.arange(size)[None, :]]  # [items, size]
        left, right = np.triu_indices(size, k=1)
        a, b = annotator[rows[:, left]].ravel(), annotator[rows[:, right]].ravel()
        la, lb = label[rows[:, left]].ravel(), label[rows[:, right]].ravel()
        swap = a > b
        firsts.append(np.where(swap, b, a))
        seconds.append(np.where(swap, a, b))
        first_labels.append(np.where(swap, lb, la))
        second_labels.append(np.where(swap, la, lb))
    if not firsts:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, empty
    return tuple(np.concatenate(parts) for parts in (firsts, seconds, first_labels, second_labels))


def pairwise_cohen(
    item: np.ndarray,
    annotator: np.ndarray,
    label: np.ndarray,
    *,
    n_annotators: int,
    n_categories: int = N_CHOICES,
    n_items: int | None = None,
    n_boot: int = 0,
    confidence: float = 0.95,
    seed: int = 0,
) -> PairwiseKappa:
    """Cohen's kappa of every annotator pair from columnar judgements (item, annotator, label: [J]).

    One bincount builds all P confusion matrices; kappas are computed for all pairs at once. With
    n_boot > 0, each pair gets a bootstrap interval that resamples the n_items comparisons: the pair's
    cells in a resample are Multinomial(n_items, cell / n_items, rest), the exact law of the pair's
    counts when comparisons are drawn with replacement (costs ~6 ms per replicate at 5,000 pairs).
    """
    a, b, la, lb = _rater_pairs(np.asarray(item), np.asarray(annotator), np.asarray(label))
    k = n_categories
    key = (a * n_annotators + b) * (k * k) + la * k + lb
    flat = np.bincount(key, minlength=n_annotators * n_annotators * k * k).reshape(
        n_annotators * n_annotators, k, k
    )
    n_pair = flat.sum(axis=(1, 2))
    present = np.flatnonzero(n_pair)
    confusion = flat[present]
    kappa = _weighted_kappa(confusion, None)
    low = np.full(present.size, np.nan)
    high = np.full(present.size, np.nan)
    if n_boot > 0 and present.size:
        total = int(n_items if n_items is not None else np.unique(item).size)
        cells = confusion.reshape(present.size, k * k) / total
        pvals = np.concatenate([cells, 1.0 - cells.sum(axis=1, keepdims=True)], axis=1)
        pvals = np.clip(pvals, 0.0, 1.0)
        rng = np.random.default_rng(seed)
        replicates = np.empty((n_boot, present.size))
        chunk = max(1, 2_000_000 // max(1, present.size * (k * k + 1)))
        for start in range(0, n_boot, chunk):
            size = min(chunk, n_boot - start)
            draws = rng.multinomial(total, pvals, size=(size, present.size))[..., : k * k]
            replicates[start : start + size] = _weighted_kappa(
                draws.reshape(size, present.size, k, k), None
            )
        tail = (1.0 - confidence) / 2.0 * 100.0
        with np.errstate(all="ignore"):
            low, high = np.nanpercentile(replicates, [tail, 100.0 - tail], axis=0)
    return PairwiseKappa(
        first=present // n_annotators,
        second=present % n_annotators,
        kappa=kappa,
        n=n_pair[present],
        confusion=confusion,
        low=low,
        high=high,
    )


# --- Consensus ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Consensus:
    """A consensus label per item. label [I] (MISSING where undecided or unjudged), posterior [I, K]
    (soft label: a probability per category), margin [I] (top posterior minus the runner-up)."""

    label: np.ndarray
    posterior: np.ndarray
    margin: np.ndarray


def _consensus_from_posterior(posterior: np.ndarray, judged: np.ndarray) -> Consensus:
    top2 = np.sort(posterior, axis=1)[:, -2:] if posterior.shape[1] >= 2 else None
    margin = top2[:, 1] - top2[:, 0] if top2 is not None else np.ones(posterior.shape[0])
    label = np.where(judged & (margin > 0), posterior.argmax(axis=1), MISSING)
    return Consensus(label=label, posterior=posterior, margin=np.where(judged, margin, np.nan))


def majority_vote(counts: np.ndarray) -> Consensus:
    """The most chosen category per item; the posterior is the share of votes; a tie at the top is
    undecided (label MISSING, margin 0). counts: [I, K]."""
    table = np.asarray(counts, dtype=float)
    n = table.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        shares = np.where(n[:, None] > 0, table / n[:, None], np.nan)
    return _consensus_from_posterior(np.nan_to_num(shares), n > 0)


def _row_reduce(ufunc: np.ufunc, matrix: np.ndarray) -> np.ndarray:
    """ufunc over the columns of a narrow [N, K] matrix, column by column (much faster than axis=1)."""
    out = matrix[:, 0].copy()
    for column in range(1, matrix.shape[1]):
        ufunc(out, matrix[:, column], out=out)
    return out


@dataclass(frozen=True)
class DawidSkene:
    """Result of Dawid-Skene EM. consensus: soft labels; confusion [R, K, K]: P(annotator says l |
    true class k); priors [K]; iterations run; log_likelihood of the data at the end."""

    consensus: Consensus
    confusion: np.ndarray
    priors: np.ndarray
    iterations: int
    log_likelihood: float


def dawid_skene(
    item: np.ndarray,
    annotator: np.ndarray,
    label: np.ndarray,
    *,
    n_items: int,
    n_annotators: int,
    n_categories: int = N_CHOICES,
    max_iter: int = 100,
    tol: float = 1e-7,
    smoothing: float = 0.01,
) -> DawidSkene:
    """Dawid & Skene (1979) EM: each annotator has a confusion matrix, each item a latent true class.

    item, annotator, label: [J] judgements. Starts from the majority-vote shares; the M-step adds
    ``smoothing`` pseudo-counts to every confusion cell (and prior) so an annotator who never used a
    category keeps a finite likelihood. Stops when the log-likelihood gains less than tol x |LL|.
    The posterior over true classes is the soft label a bias-aware export uses; annotators who, e.g.,
    favour the left side or the longer answer get confusion matrices that discount those votes.
    """
    from scipy import sparse  # only consensus needs it; the report and the command do not

    item = np.asarray(item, np.int64)
    annotator = np.asarray(annotator, np.int64)
    label = np.asarray(label, np.int64)
    k = n_categories
    counts = item_counts(item, label, n_items=n_items, n_categories=k)
    judged = counts.sum(axis=1) > 0
    posterior = np.where(
        judged[:, None], counts / np.maximum(counts.sum(axis=1, keepdims=True), 1), 1.0 / k
    )
    # votes[i, r * K + l] = 1 when annotator r said l on item i: both EM steps are products with it.
    votes = sparse.csr_matrix(
        (np.ones(item.size), (item, annotator * k + label)), shape=(n_items, n_annotators * k)
    )
    votes_t = votes.T.tocsr()
    judged_weight = judged.astype(float)
    previous = -np.inf
    log_likelihood = -np.inf
    iterations = 0
    confusion = np.full((n_annotators, k, k), 1.0 / k)
    priors = np.full(k, 1.0 / k)
    while iterations < max_iter:
        iterations += 1
        # M-step: priors and confusion[r, true, said] from the current soft labels.
        priors = judged_weight @ posterior + smoothing
        priors /= priors.sum()
        said_true = votes_t @ posterior  # [R * K (annotator, said), K true]
        confusion = said_true.reshape(n_annotators, k, k).transpose(0, 2, 1) + smoothing
        confusion /= confusion.sum(axis=2, keepdims=True)
        # E-step: log P(true = t | item) = log prior_t + sum over its votes of log confusion. An item
        # without votes gets the priors. Row reductions run column by column: K is tiny.
        log_conf = np.log(confusion).transpose(0, 2, 1).reshape(n_annotators * k, k)
        posterior = votes @ log_conf
        posterior += np.log(priors)
        top = _row_reduce(np.maximum, posterior)
        posterior -= top[:, None]
        np.exp(posterior, out=posterior)
        normaliser = _row_reduce(np.add, posterior)
        posterior /= normaliser[:, None]
        log_likelihood = float(top.sum() + np.log(normaliser).sum())
        if log_likelihood - previous < tol * abs(log_likelihood):
            break
        previous = log_likelihood
    return DawidSkene(
        consensus=_consensus_from_posterior(posterior, judged),
        confusion=confusion,
        priors=priors,
        iterations=iterations,
        log_likelihood=log_likelihood,
    )


# --- Agreement per group (prompt cluster, batch, week) ------------------------------------------------
@dataclass(frozen=True)
class GroupAgreement:
    """Agreement inside each of G groups of items. Arrays [G]; NaN where a group has no rater pair."""

    n_items: np.ndarray
    n_judgements: np.ndarray
    percent_agreement: np.ndarray
    fleiss_kappa: np.ndarray


def agreement_by_group(counts: np.ndarray, group: np.ndarray, *, n_groups: int) -> GroupAgreement:
    """Pooled percent agreement and (generalised) Fleiss' kappa per group of items.

    counts: [I, K] per-item category counts; group: [I] group index in 0..n_groups-1, or MISSING to
    leave an item out. All groups at once with bincounts.
    """
    table = np.asarray(counts, dtype=float)
    group = np.asarray(group, np.int64)
    keep = (group >= 0) & (table.sum(axis=1) > 0)
    table, group = table[keep], group[keep]
    m = table.sum(axis=1)
    pairable = m >= 2
    pair_agree = (table * (table - 1)).sum(axis=1)
    pairs = m * (m - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        pa_item = np.where(pairable, pair_agree / pairs, 0.0)
        shares = table / m[:, None]

        def per_group(weights: np.ndarray) -> np.ndarray:
            return np.bincount(group, weights=weights, minlength=n_groups)

        n_items = per_group(np.ones_like(m))
        pa = per_group(pa_item) / per_group(pairable.astype(float))
        pi = np.stack([per_group(shares[:, k]) for k in range(table.shape[1])], axis=1)
        pi = pi.astype(float) / n_items[:, None]
        pe = (pi**2).sum(axis=1)
        kappa = np.where(pe < 1, (pa - pe) / (1 - pe), np.nan)
        percent = per_group(pair_agree) / per_group(pairs)
    return GroupAgreement(
        n_items=n_items.astype(np.int64),
        n_judgements=per_group(m).astype(np.int64),
        percent_agreement=np.where(np.isfinite(percent), percent, np.nan),
        fleiss_kappa=np.where(np.isfinite(kappa), kappa, np.nan),
    )


# --- Per-annotator bias and quality -------------------------------------------------------------------
@dataclass(frozen=True)
class JudgementTable:
    """One project's judgements as columns. J judgements, I items (comparisons), R annotators.

    Choice codes are those of CHOICES (a=0, b=1, tie=2, both_bad=3), in terms of the stored responses.
    Optional columns may be None: the statistics that need them are then NaN.
    """

    item: np.ndarray  # [J] item index 0..I-1
    annotator: np.ndarray  # [J] annotator index 0..R-1
    choice: np.ndarray  # [J] choice code
    n_items: int
    n_annotators: int
    shown_left: np.ndarray | None = (
        None  # [J] A or B: the response shown on the left; MISSING unknown
    )
    elapsed_ms: np.ndarray | None = None  # [J] float milliseconds, NaN unknown
    gold: np.ndarray | None = None  # [I] the known answer's code, MISSING where none
    length_a: np.ndarray | None = None  # [I] length of response A (characters)
    length_b: np.ndarray | None = None  # [I] length of response B
    repeat_item: np.ndarray | None = None  # [S] swap repeats: item, annotator and choice of the
    repeat_annotator: np.ndarray | None = None  # second verdict (sides flipped), in stored terms
    repeat_choice: np.ndarray | None = None

    def __post_init__(self) -> None:
        j = np.shape(self.item)[0]
        for name in ("annotator", "choice", "shown_left", "elapsed_ms"):
            value = getattr(self, name)
            if value is not None and np.shape(value) != (j,):
                raise ValueError(f"{name} must have shape ({j},), got {np.shape(value)}")
        for name in ("gold", "length_a", "length_b"):
            value = getattr(self, name)
            if value is not None and np.shape(value) != (self.n_items,):
                raise ValueError(f"{name} must have shape ({self.n_items},), got {np.shape(value)}")
        if j and (np.min(self.item) < 0 or np.max(self.item) >= self.n_items):
            raise ValueError(f"item indices must lie in 0..{self.n_items - 1}")
        if j and (np.min(self.annotator) < 0 or np.max(self.annotator) >= self.n_annotators):
            raise ValueError(f"annotator indices must lie in 0..{self.n_annotators - 1}")
        if j and (np.min(self.choice) < 0 or np.max(self.choice) >= N_CHOICES):
            raise ValueError(f"choice codes must lie in 0..{N_CHOICES - 1}")


@dataclass(frozen=True)
class BiasThresholds:
    """When an annotator is flagged. Every flag also needs ``min_judgements`` judgements."""

    min_judgements: int = 20
    significance: float = 0.05  # position bias: Holm-adjusted two-sided binomial p below this
    length_bias: float = 0.15  # |longer picks - the consensus's share| above this, and significant
    # (binomial test of the picks against the consensus's share, Holm-adjusted, at `significance`)
    fast_fraction: float = (
        0.25  # suspiciously fast: under this fraction of the project's median time
    )
    fast_share: float = 0.2  # flag when more than this share of the judgements are fast
    # Mean Cohen's kappa against the others below this ("fair" or worse) and below the annotators'
    # median: in a noisy team everyone's kappa is low, and the careful annotator is not the problem.
    min_kappa: float = 0.4
    min_gold_accuracy: float = 0.7
    min_gold: int = 5
    min_consistency: float = 0.7  # swap repeats answered the same way
    min_repeats: int = 5


@dataclass(frozen=True)
class AnnotatorStats:
    """Per-annotator bias and quality, arrays [R] (NaN where not measurable); flags: a list per annotator."""

    n_judgements: np.ndarray
    tie_rate: np.ndarray
    left_n: np.ndarray  # decisive judgements (a or b) with a known screen side
    left_share: np.ndarray  # share of those that picked the left side
    left_p_value: np.ndarray  # exact two-sided binomial test against 0.5
    left_p_adjusted: np.ndarray  # Holm-adjusted over annotators
    longer_n: np.ndarray
    longer_share: np.ndarray  # share of decisive picks that chose the longer response
    consensus_longer_share: np.ndarray  # the leave-one-out consensus's share on the same items
    length_bias: np.ndarray  # longer_share - consensus_longer_share
    longer_p_value: np.ndarray  # binomial test of the longer picks against the consensus's share
    longer_p_adjusted: np.ndarray  # Holm-adjusted over annotators
    loo_n: np.ndarray
    loo_agreement: np.ndarray  # agreement with the others' majority (ties at the top left out)
    gold_n: np.ndarray
    gold_accuracy: np.ndarray
    repeat_n: np.ndarray
    repeat_consistency: np.ndarray
    timed_n: np.ndarray
    median_ms: np.ndarray
    fast_share: np.ndarray
    fast_threshold_ms: float
    mean_kappa: np.ndarray  # n-weighted mean of Cohen's kappa against every other annotator
    flags: list[list[str]] = field(default_factory=list)


def _binomial_two_sided(
    successes: np.ndarray, trials: np.ndarray, p: float | np.ndarray = 0.5
) -> np.ndarray:
    """Exact two-sided binomial test, twice the smaller tail (the "central" test; for p = 0.5 it is
    the usual test, the distribution being symmetric). NaN where trials = 0 or p is not in (0, 1)."""
    successes = np.rint(successes).astype(np.int64)  # counts, possibly from weighted bincounts
    trials = np.rint(trials).astype(np.int64)
    p = np.broadcast_to(np.asarray(p, dtype=float), np.shape(trials))
    ok = (trials > 0) & (p > 0) & (p < 1)
    safe_p = np.where(ok, p, 0.5)
    with np.errstate(invalid="ignore"):
        tail = np.minimum(
            bdtr(successes, trials, safe_p),  # P(X <= k)
            bdtrc(successes - 1, trials, safe_p),  # P(X >= k)
        )
    return np.where(ok, np.minimum(1.0, 2.0 * tail), np.nan)


def holm_adjust(p_values: np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment of p-values (NaN entries are left out and stay NaN)."""
    p = np.asarray(p_values, dtype=float)
    adjusted = np.full_like(p, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    order = finite[np.argsort(p[finite], kind="stable")]
    m = order.size
    steps = (m - np.arange(m)) * p[order]
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate(steps))
    return adjusted


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denominator > 0, numerator / denominator, np.nan)


def _group_medians(group: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """Median of values [N] within each group [N] -> [n_groups] (NaN for an empty group)."""
    small = np.int16 if n_groups < 2**15 else np.int32  # stable sort of small ints is a radix sort
    order = np.argsort(group.astype(small), kind="stable")
    sorted_values = values[order]
    sizes = np.bincount(group, minlength=n_groups)
    ends = np.cumsum(sizes)
    medians = np.full(n_groups, np.nan)
    for g in np.flatnonzero(sizes):
        medians[g] = np.median(sorted_values[ends[g] - sizes[g] : ends[g]])
    return medians


def leave_one_out_consensus(table: JudgementTable, counts: np.ndarray) -> np.ndarray:
    """[J] for each judgement, the majority choice of the other annotators on the same item.

    MISSING where no other annotator judged the item or the others are split at the top. Worked out
    once per (count pattern, own choice) and looked up, not once per judgement.
    """
    patterns, _, inverse = count_patterns(counts)
    k = patterns.shape[1]
    others = patterns[:, None, :] - np.eye(k, dtype=np.int64)[None, :, :]  # [P, own choice, K]
    top = others.max(axis=2)
    unique_top = (others == top[..., None]).sum(axis=2) == 1
    table_ = np.where((top > 0) & unique_top, others.argmax(axis=2), MISSING)  # [P, own choice]
    return table_[inverse[table.item], table.choice]


def annotator_stats(
    table: JudgementTable,
    *,
    counts: np.ndarray | None = None,
    pairs: PairwiseKappa | None = None,
    thresholds: BiasThresholds = BiasThresholds(),
) -> AnnotatorStats:
    """Bias and quality of every annotator at once (bincounts over the J judgements)."""
    r = table.n_annotators
    ann, choice = np.asarray(table.annotator), np.asarray(table.choice)
    if counts is None:
        counts = item_counts(table.item, choice, n_items=table.n_items)

    def per_annotator(mask: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        w = mask.astype(float) if weights is None else np.where(mask, weights, 0.0)
        return np.bincount(ann, weights=w, minlength=r)

    everyone = np.ones(ann.size, bool)
    n = per_annotator(everyone)
    decisive = choice <= B
    nan_r = np.full(r, np.nan)

    # Position: did the annotator pick the response shown on the left?
    if table.shown_left is not None:
        known = decisive & (table.shown_left >= 0)
        left_n = per_annotator(known)
        left_picks = per_annotator(known & (choice == table.shown_left))
        left_share = _ratio(left_picks, left_n)
        left_p = _binomial_two_sided(left_picks, left_n)
    else:
        left_n, left_share, left_p = np.zeros(r), nan_r, nan_r
    left_adjusted = holm_adjust(left_p)

    loo = leave_one_out_consensus(table, counts)
    has_loo = loo != MISSING
    loo_n = per_annotator(has_loo)
    loo_agreement = _ratio(per_annotator(has_loo & (loo == choice)), loo_n)

    # Length: picks of the longer response against the others' consensus on the same items.
    if table.length_a is not None and table.length_b is not None:
        la, lb = np.asarray(table.length_a), np.asarray(table.length_b)
        longer = np.where(la > lb, A, np.where(lb > la, B, MISSING))[table.item]
        own = decisive & (longer != MISSING)
        longer_n = per_annotator(own)
        longer_picks = per_annotator(own & (choice == longer))
        longer_share = _ratio(longer_picks, longer_n)
        theirs = (loo <= B) & (loo != MISSING) & (longer != MISSING)
        consensus_longer = _ratio(per_annotator(theirs & (loo == longer)), per_annotator(theirs))
        longer_p = _binomial_two_sided(longer_picks, longer_n, np.nan_to_num(consensus_longer))
    else:
        longer_n, longer_share, consensus_longer, longer_p = np.zeros(r), nan_r, nan_r, nan_r

    if table.gold is not None:
        gold = np.asarray(table.gold)[table.item]
        has_gold = gold != MISSING
        gold_n = per_annotator(has_gold)
        gold_accuracy = _ratio(per_annotator(has_gold & (gold == choice)), gold_n)
    else:
        gold_n, gold_accuracy = np.zeros(r), nan_r

    repeat_n, consistency = _repeat_consistency(table)

    if table.elapsed_ms is not None:
        elapsed = np.asarray(table.elapsed_ms, dtype=float)
        timed = np.isfinite(elapsed)
        timed_n = per_annotator(timed)
        median_ms = _group_medians(ann[timed], elapsed[timed], r)
        threshold = (
            thresholds.fast_fraction * float(np.median(elapsed[timed])) if timed.any() else np.nan
        )
        fast_share = _ratio(per_annotator(timed & (elapsed < threshold)), timed_n)
    else:
        timed_n, median_ms, fast_share, threshold = np.zeros(r), nan_r, nan_r, float("nan")

    if pairs is not None and pairs.kappa.size:
        ok = np.isfinite(pairs.kappa)
        weight = np.where(ok, pairs.n, 0.0)
        weighted = np.where(ok, pairs.kappa * pairs.n, 0.0)
        total = np.bincount(pairs.first, weight, r) + np.bincount(pairs.second, weight, r)
        mean_kappa = _ratio(
            np.bincount(pairs.first, weighted, r) + np.bincount(pairs.second, weighted, r), total
        )
    else:
        mean_kappa = nan_r

    stats_ = AnnotatorStats(
        n_judgements=n.astype(np.int64),
        tie_rate=_ratio(per_annotator(choice == TIE), n),
        left_n=left_n.astype(np.int64),
        left_share=left_share,
        left_p_value=left_p,
        left_p_adjusted=left_adjusted,
        longer_n=longer_n.astype(np.int64),
        longer_share=longer_share,
        consensus_longer_share=consensus_longer,
        length_bias=longer_share - consensus_longer,
        longer_p_value=longer_p,
        longer_p_adjusted=holm_adjust(longer_p),
        loo_n=loo_n.astype(np.int64),
        loo_agreement=loo_agreement,
        gold_n=gold_n.astype(np.int64),
        gold_accuracy=gold_accuracy,
        repeat_n=repeat_n.astype(np.int64),
        repeat_consistency=consistency,
        timed_n=timed_n.astype(np.int64),
        median_ms=median_ms,
        fast_share=fast_share,
        fast_threshold_ms=threshold,
        mean_kappa=mean_kappa,
    )
    stats_.flags.extend(_flags(stats_, thresholds))
    return stats_


def _repeat_consistency(table: JudgementTable) -> tuple[np.ndarray, np.ndarray]:
    """Per annotator: swap repeats matched to their first verdict, and the share answered the same."""
    r = table.n_annotators
    if table.repeat_item is None or np.size(table.repeat_item) == 0:
        return np.zeros(r), np.full(r, np.nan)
    keys = np.asarray(table.item, np.int64) * r + table.annotator
    order = np.argsort(keys)
    wanted = np.asarray(table.repeat_item, np.int64) * r + table.repeat_annotator
    position = np.clip(np.searchsorted(keys[order], wanted), 0, keys.size - 1)
    found = keys[order][position] == wanted
    first_choice = np.asarray(table.choice)[order][position]
    same = found & (first_choice == table.repeat_choice)
    repeat_ann = np.asarray(table.repeat_annotator)
    matched = np.bincount(repeat_ann[found], minlength=r).astype(float)
    return matched, _ratio(np.bincount(repeat_ann[same], minlength=r).astype(float), matched)


def _flags(s: AnnotatorStats, t: BiasThresholds) -> list[list[str]]:
    flags: list[list[str]] = []
    finite_kappa = s.mean_kappa[np.isfinite(s.mean_kappa)]
    typical_kappa = float(np.median(finite_kappa)) if finite_kappa.size else np.nan
    for i in range(s.n_judgements.size):
        mine: list[str] = []
        if s.n_judgements[i] >= t.min_judgements:
            if s.left_p_adjusted[i] < t.significance:
                mine.append("position_bias")
            if (
                s.longer_n[i] >= t.min_judgements
                and abs(s.length_bias[i]) > t.length_bias
                and s.longer_p_adjusted[i] < t.significance
            ):
                mine.append("length_bias")
            if s.timed_n[i] >= t.min_judgements and s.fast_share[i] > t.fast_share:
                mine.append("fast")
            if s.mean_kappa[i] < t.min_kappa and s.mean_kappa[i] < typical_kappa:
                mine.append("low_agreement")
            if s.gold_n[i] >= t.min_gold and s.gold_accuracy[i] < t.min_gold_accuracy:
                mine.append("low_gold_accuracy")
            if s.repeat_n[i] >= t.min_repeats and s.repeat_consistency[i] < t.min_consistency:
                mine.append("inconsistent")
        flags.append(mine)
    return flags


# --- The project report -------------------------------------------------------------------------------
@dataclass(frozen=True)
class AgreementReport:
    """Everything the agreement page and command show for one project (indices, not names).

    n_items: comparisons with at least one judgement; n_items_full_overlap: those with >= overlap.
    coefficients: {name in COEFFICIENTS: Interval}.
    """

    n_items: int
    n_judgements: int
    n_annotators: int
    n_items_full_overlap: int
    coefficients: dict[str, Interval]
    pairs: PairwiseKappa
    annotators: AnnotatorStats
    counts: np.ndarray  # [I, K] per-item choice counts


def agreement_report(
    table: JudgementTable,
    *,
    overlap: int | None = None,
    n_categories: int | None = None,
    n_boot: int = 1000,
    pair_boot: int = 0,
    confidence: float = 0.95,
    seed: int = 0,
    thresholds: BiasThresholds = BiasThresholds(),
) -> AgreementReport:
    """The whole report: coefficients with bootstrap intervals, every pair's Cohen, annotator stats.

    overlap: Fleiss' kappa uses the comparisons with at least this many judgements (the project's full
    overlap; None: all). n_categories: q for AC1 (the choices the project offers; default: the
    categories used). n_boot: replicates for the coefficients; pair_boot: for every pair's kappa
    (off by default: ~6 ms per replicate at 5,000 pairs).
    """
    counts = item_counts(table.item, table.choice, n_items=table.n_items)
    used = counts.sum(axis=0) > 0
    q = n_categories if n_categories is not None else max(2, int(used.sum()))
    judged = counts.sum(axis=1) > 0
    coefficients = coefficient_intervals(
        counts[judged][:, used] if used.any() else counts[judged],
        n_categories=q,
        full_overlap=overlap,
        tie=int(used[:TIE].sum()) if used[TIE] else None,
        n_boot=n_boot,
        confidence=confidence,
        seed=seed,
    )
    pairs = pairwise_cohen(
        table.item,
        table.annotator,
        table.choice,
        n_annotators=table.n_annotators,
        n_items=int(judged.sum()),
        n_boot=pair_boot,
        confidence=confidence,
        seed=seed,
    )
    per_annotator = annotator_stats(table, counts=counts, pairs=pairs, thresholds=thresholds)
    m = counts.sum(axis=1)
    return AgreementReport(
        n_items=int(judged.sum()),
        n_judgements=int(np.size(table.item)),
        n_annotators=int(np.unique(table.annotator).size),
        n_items_full_overlap=int((m >= (overlap or 1)).sum()),
        coefficients=coefficients,
        pairs=pairs,
        annotators=per_annotator,
        counts=counts,
    )
