"""Agreement and rater behaviour for rating tasks (scores on a scale, per aspect): pure NumPy, no Django.

Layout: one aspect's ratings are ``data[r, i]``, rater r's score for item i, NaN where r did not rate
i (the reliability-data layout of ``krippendorff_alpha``). ``rating_matrix`` builds it from columnar
answers. Scales are integer points ``low..high`` (e.g. ``(1, 5)``), given as ``scale=(low, high)``.

- ``weighted_kappa_pairs``: Cohen's weighted kappa (linear and quadratic, Cohen 1968) for every rater
  pair on the items both rated, with the weights on the scale's points (a point nobody used still
  counts as a step), through ``coefficients._weighted_kappa``.
- ``aspect_alpha``: Krippendorff's alpha (ordinal and interval, Krippendorff 2011) for each aspect.
- ``rater_leniency``: each rater's mean offset from the item means.
- ``scale_use``: each rater's distribution over the scale points, share of extremes, mean and spread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from annotation.agreement.coefficients import _weighted_kappa, krippendorff_alpha

Scale = tuple[int, int]
ALPHA_LEVELS = ("ordinal", "interval")


def _check_data(data: Sequence | np.ndarray) -> np.ndarray:
    """data [R, N] floats with NaN for missing; infinite values are an error."""
    matrix = np.asarray(data, dtype=float)
    if matrix.ndim != 2:
        raise ValueError(f"ratings must be 2-d [raters, items], got shape {matrix.shape}")
    if np.isinf(matrix).any():
        raise ValueError("ratings must be finite numbers or NaN for missing")
    return matrix


def scale_points(scale: Scale) -> np.ndarray:
    """The integer points ``low..high`` of a scale ``(low, high)``, as floats [P]."""
    low, high = scale
    if int(low) != low or int(high) != high or high <= low:
        raise ValueError(f"scale must be integers (low, high) with low < high, not {scale!r}")
    return np.arange(int(low), int(high) + 1, dtype=float)


def _scale_codes(matrix: np.ndarray, scale: Scale) -> tuple[np.ndarray, np.ndarray]:
    """(points [P], codes [R, N]: index of each rating's point, -1 where missing). Off-scale -> error."""
    points = scale_points(scale)
    present = ~np.isnan(matrix)
    values = matrix[present]
    off_scale = (values != np.round(values)) | (values < points[0]) | (values > points[-1])
    if off_scale.any():
        bad = values[off_scale]
        raise ValueError(
            f"ratings {sorted(set(bad.tolist()))[:5]} are not points of the scale {scale}"
        )
    codes = np.full(matrix.shape, -1, dtype=np.int64)
    codes[present] = (values - points[0]).astype(np.int64)
    return points, codes


def rating_matrix(
    rater: Sequence[int] | np.ndarray,
    item: Sequence[int] | np.ndarray,
    score: Sequence[float] | np.ndarray,
    *,
    n_raters: int,
    n_items: int,
) -> np.ndarray:
    """data [n_raters, n_items] (NaN where missing) from columnar answers: rater and item indices [J]
    and scores [J]. A rater scoring the same item twice (a repeat) is an error: keep one answer per
    rater and item (e.g. the first) before calling."""
    rows, cols = np.asarray(rater, np.int64), np.asarray(item, np.int64)
    values = np.asarray(score, dtype=float)
    if not (rows.shape == cols.shape == values.shape) or rows.ndim != 1:
        raise ValueError("rater, item and score must be 1-d arrays of the same length")
    if rows.size and (
        rows.min() < 0 or rows.max() >= n_raters or cols.min() < 0 or cols.max() >= n_items
    ):
        raise ValueError("rater or item index out of range")
    flat = rows * n_items + cols
    if np.unique(flat).size != flat.size:
        raise ValueError(
            "a rater scored the same item more than once; keep one answer per rater and item"
        )
    matrix = np.full((n_raters, n_items), np.nan)
    matrix[rows, cols] = values
    return matrix


# --- Weighted kappa per rater pair ----------------------------------------------------------------------
@dataclass(frozen=True)
class PairKappa:
    """Weighted kappa of one rater pair (rater indices ``first`` < ``second``) on ``n_items`` both rated.
    NaN when they share no item or chance disagreement is 0 (both used one and the same point)."""

    first: int
    second: int
    n_items: int
    linear: float
    quadratic: float


def weighted_kappa_pairs(
    data: Sequence | np.ndarray, *, scale: Scale, min_items: int = 1
) -> list[PairKappa]:
    """Cohen's weighted kappa (Cohen 1968), linear and quadratic, for every pair of raters in data
    [R, N] that rated at least ``min_items`` items in common; pairs ordered (0, 1), (0, 2), ...

    The confusion matrix spans all the scale's points, so the weights |i - j| and (i - j)^2 count scale
    steps even across a point neither rater used (``cohen_kappa`` would rank only the labels seen).
    """
    matrix = _check_data(data)
    _, codes = _scale_codes(matrix, scale)
    k = int(scale[1] - scale[0] + 1)
    pairs = []
    for first, second in combinations(range(matrix.shape[0]), 2):
        both = (codes[first] >= 0) & (codes[second] >= 0)
        n = int(both.sum())
        if n < max(min_items, 1):
            continue
        confusion = np.bincount(
            codes[first, both] * k + codes[second, both], minlength=k * k
        ).reshape(k, k)
        pairs.append(
            PairKappa(
                first=first,
                second=second,
                n_items=n,
                linear=float(_weighted_kappa(confusion, "linear")),
                quadratic=float(_weighted_kappa(confusion, "quadratic")),
            )
        )
    return pairs


# --- Krippendorff's alpha per aspect --------------------------------------------------------------------
@dataclass(frozen=True)
class AspectAlpha:
    """Krippendorff's alpha of one aspect. ``n_items``: items with at least two ratings (the pairable
    ones alpha uses); ``n_ratings``: the ratings on them. Alphas are NaN with fewer than 2 pairable
    values or no variation."""

    aspect: str
    n_items: int
    n_ratings: int
    ordinal: float
    interval: float


def aspect_alpha(ratings: Mapping[str, Sequence | np.ndarray]) -> dict[str, AspectAlpha]:
    """Krippendorff's alpha at the ordinal and interval levels for each aspect.

    ratings: aspect name -> data [R, N] (NaN for missing). Returns aspect -> AspectAlpha, in the
    mapping's order. Ordinal alpha uses the ranks of the values (Krippendorff 2011, section D);
    interval alpha the squared differences of the values (section E).
    """
    result = {}
    for aspect, data in ratings.items():
        matrix = _check_data(data)
        counts = (~np.isnan(matrix)).sum(axis=0)
        pairable = counts >= 2
        alphas = {level: float("nan") for level in ALPHA_LEVELS}
        if pairable.any():
            alphas = {
                level: krippendorff_alpha(matrix[:, pairable], level=level)
                for level in ALPHA_LEVELS
            }
        result[aspect] = AspectAlpha(
            aspect=aspect,
            n_items=int(pairable.sum()),
            n_ratings=int(counts[pairable].sum()),
            **alphas,
        )
    return result


# --- Rater behaviour ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Leniency:
    """Per rater [R]: ``offset``, the mean of (rating - the item's mean rating) over the items the rater
    rated that at least one other rater rated too, in scale points (positive = more lenient than the
    others); ``n_items``, how many such items; NaN offset where 0."""

    offset: np.ndarray
    n_items: np.ndarray


def rater_leniency(data: Sequence | np.ndarray) -> Leniency:
    """Mean offset of each rater from the item means. data [R, N], NaN for missing.

    The item mean includes the rater's own rating (all raters of the item), so on an item with two
    raters scoring 5 and 3 the offsets are +1 and -1. Items rated by one rater carry no information
    and are left out.
    """
    matrix = _check_data(data)
    present = ~np.isnan(matrix)
    shared = present & (present.sum(axis=0) >= 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        item_mean = np.where(shared, matrix, 0.0).sum(axis=0) / shared.sum(axis=0)
    deviation = np.where(shared, matrix - item_mean[None, :], 0.0)
    n_items = shared.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        offset = np.where(n_items > 0, deviation.sum(axis=1) / n_items, np.nan)
    return Leniency(offset=offset, n_items=n_items)


@dataclass(frozen=True)
class ScaleUse:
    """How each rater uses the scale. ``points`` [P]; per rater [R]: ``counts`` [R, P] and ``shares``
    [R, P] (row sums 1; NaN rows for a rater with no rating), ``extreme_share`` (share of ratings at the
    lowest or highest point), ``mean`` and ``std`` (population standard deviation) of the ratings,
    ``n_ratings``."""

    points: np.ndarray
    counts: np.ndarray
    shares: np.ndarray
    extreme_share: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    n_ratings: np.ndarray


def scale_use(data: Sequence | np.ndarray, *, scale: Scale) -> ScaleUse:
    """Per-rater distribution over the scale's points. data [R, N], NaN for missing; every rating must
    be a point of ``scale`` (integers low..high)."""
    matrix = _check_data(data)
    points, codes = _scale_codes(matrix, scale)
    n_points = points.size
    raters = np.broadcast_to(np.arange(matrix.shape[0])[:, None], matrix.shape)
    present = codes >= 0
    counts = np.bincount(
        raters[present] * n_points + codes[present], minlength=matrix.shape[0] * n_points
    ).reshape(matrix.shape[0], n_points)
    n = counts.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        shares = counts / n[:, None]
        mean = (shares * points).sum(axis=1)
        std = np.sqrt((shares * (points[None, :] - mean[:, None]) ** 2).sum(axis=1))
    rated = n > 0
    return ScaleUse(
        points=points,
        counts=counts,
        shares=np.where(rated[:, None], shares, np.nan),
        extreme_share=np.where(rated, shares[:, 0] + shares[:, -1], np.nan),
        mean=np.where(rated, mean, np.nan),
        std=np.where(rated, std, np.nan),
        n_ratings=n,
    )
