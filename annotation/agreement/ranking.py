"""Agreement for ranking tasks (K responses to one prompt ordered by each rater): pure NumPy/SciPy.

Layout: one prompt's rankings are ``ranks[r, i]``, the rank rater r gave response i, 1 = best; ties
share a rank. Only the order matters: ``[1, 1, 3]`` and ``[1, 1, 2]`` are the same ranking (responses
0 and 1 tied first), and the functions work on mid-ranks (tied responses get the mean of the
positions they span, here ``[1.5, 1.5, 3]``).

- ``kendall_w``: Kendall's coefficient of concordance W with the tie correction (Kendall & Babington
  Smith 1939; Siegel & Castellan 1988, section 9.4).
- ``mean_pairwise_kendall_tau``: the mean over rater pairs of Kendall's tau-b (ties allowed).
- ``ranking_to_pairs``: one ranking as its implied pairwise preferences with rank-distance margins.
- ``pairwise_agreement_from_rankings``: the rankings of many prompts decomposed into pairwise labels
  (better / worse / tie), scored with the pairwise projects' percent agreement and Fleiss' kappa.
- ``ranking_position_bias``: whether the response shown first (or higher) is ranked better.
- ``consensus_ranking``: the ranking by mean rank, ties kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
from scipy.stats import kendalltau, rankdata

from annotation.agreement.coefficients import (
    TIE,
    A,
    B,
    fleiss_kappa,
    percent_agreement,
    percent_agreement_no_ties,
)


def _mid_ranks(ranks: Sequence | np.ndarray, *, min_raters: int = 1) -> np.ndarray:
    """ranks [m, n] (any order-preserving ranks, 1 = best) -> mid-ranks [m, n] within each row."""
    matrix = np.asarray(ranks, dtype=float)
    if matrix.ndim != 2:
        raise ValueError(f"ranks must be 2-d [raters, responses], got shape {matrix.shape}")
    if not np.isfinite(matrix).all():
        raise ValueError("ranks must be finite numbers (every rater ranks every response)")
    if matrix.shape[0] < min_raters or matrix.shape[1] < 2:
        raise ValueError(
            f"need at least {min_raters} rater(s) and 2 responses, got shape {matrix.shape}"
        )
    return rankdata(matrix, method="average", axis=1)


def _tie_sum(row: np.ndarray) -> float:
    """sum over tie groups of (t^3 - t), t the group's size (0 without ties)."""
    _, sizes = np.unique(row, return_counts=True)
    return float((sizes**3 - sizes).sum())


def kendall_w(ranks: Sequence | np.ndarray, *, correct_ties: bool = True) -> float:
    """Kendall's W for m raters ranking the same n responses; ranks [m, n] with m >= 2, 1 = best.

    W = 12 S / (m^2 (n^3 - n) - m sum_j T_j), S = sum_i (R_i - m (n + 1) / 2)^2 with R_i the sum of
    response i's mid-ranks and T_j = sum (t^3 - t) over rater j's tie groups (Siegel & Castellan 1988,
    eq. 9.16; without ties, or with ``correct_ties=False``, the T term is 0: eq. 9.15). W is 1 when all
    raters give one ranking and 0 when the rank sums are all equal. NaN when every rater tied every
    response (no order to agree on).
    """
    mid = _mid_ranks(ranks, min_raters=2)
    m, n = mid.shape
    sums = mid.sum(axis=0)
    s = float(((sums - m * (n + 1) / 2.0) ** 2).sum())
    ties = sum(_tie_sum(row) for row in mid) if correct_ties else 0.0
    denominator = m**2 * (n**3 - n) - m * ties
    return 12.0 * s / denominator if denominator > 0 else float("nan")


def mean_pairwise_kendall_tau(ranks: Sequence | np.ndarray) -> float:
    """Mean over the m (m - 1) / 2 rater pairs of Kendall's tau-b between their rankings; ranks [m, n].

    tau-b = (concordant - discordant) / sqrt((P - T_1)(P - T_2)) with P = n (n - 1) / 2 and T the tied
    pairs of each ranking (Kendall 1945). A pair where one rater tied every response has no tau-b and
    is left out; NaN when no pair has one.
    """
    mid = _mid_ranks(ranks, min_raters=2)
    taus = []
    for first, second in combinations(range(mid.shape[0]), 2):
        if np.ptp(mid[first]) == 0 or np.ptp(mid[second]) == 0:
            continue
        taus.append(kendalltau(mid[first], mid[second], variant="b").statistic)
    return float(np.mean(taus)) if taus else float("nan")


def ranking_to_pairs(
    ranks: Sequence | np.ndarray, *, ties: bool = False
) -> list[tuple[int, int, float]]:
    """One ranking [n] (1 = best, NaN = not ranked) -> its implied pairwise preferences
    ``(better_idx, worse_idx, margin)`` with margin = worse's rank - better's rank as given (so with
    ``[1, 1, 3]`` the margin from a first to the third is 2), ordered by better_idx then worse_idx.
    Tied responses give no pair unless ``ties=True``, which adds ``(i, j, 0.0)`` with i < j.
    """
    row = np.asarray(ranks, dtype=float)
    if row.ndim != 1:
        raise ValueError(f"ranks must be 1-d [responses], got shape {row.shape}")
    if np.isinf(row).any():
        raise ValueError("ranks must be finite numbers or NaN for a response not ranked")
    pairs = []
    for i, j in combinations(range(row.size), 2):
        if np.isnan(row[i]) or np.isnan(row[j]):
            continue
        if row[i] < row[j]:
            pairs.append((i, j, float(row[j] - row[i])))
        elif row[j] < row[i]:
            pairs.append((j, i, float(row[i] - row[j])))
        elif ties:
            pairs.append((i, j, 0.0))
    return sorted(pairs)


@dataclass(frozen=True)
class PairwiseFromRankings:
    """Rankings decomposed into pairwise labels, scored as a pairwise project is. ``n_pairs``: response
    pairs with at least two raters; ``counts`` [2 * n_pairs, 4]: raters per pair and category in
    ``coefficients.CHOICES`` order (a, b, tie, both_bad; both_bad never occurs), each pair once as
    (i, j) and once mirrored as (j, i)."""

    n_pairs: int
    counts: np.ndarray
    percent_agreement: float
    percent_agreement_no_ties: float
    fleiss_kappa: float


def pairwise_agreement_from_rankings(
    rankings: Sequence[Sequence | np.ndarray],
) -> PairwiseFromRankings:
    """Pairwise agreement of ranking projects, comparable with the pairwise projects' figures.

    rankings: one ranks array [m_p raters, K_p responses] per prompt (1 = best, NaN where a rater did
    not rank a response). Each rater's ranking becomes, for every response pair i < j of the prompt,
    the label "a" (i ranked better), "b" (j better) or "tie" (same rank), and each response pair is an
    item rated by the raters who ranked both responses. Percent agreement counts agreeing rater pairs
    over all rater pairs (``coefficients.percent_agreement``). Because "response i" plays the side "a"
    only by its index, every pair also enters mirrored (a and b swapped), as if sides were shown in a
    random order as they are in pairwise labelling: this leaves the percent agreements unchanged and
    makes Fleiss' kappa's chance agreement independent of the response order.
    """
    rows = []
    for ranks in rankings:
        matrix = np.asarray(ranks, dtype=float)
        if matrix.ndim != 2:
            raise ValueError(f"each ranking must be 2-d [raters, responses], got shape {matrix.shape}")
        if np.isinf(matrix).any():
            raise ValueError("ranks must be finite numbers or NaN for a response not ranked")
        for i, j in combinations(range(matrix.shape[1]), 2):
            first, second = matrix[:, i], matrix[:, j]
            both = ~np.isnan(first) & ~np.isnan(second)
            if both.sum() < 2:
                continue
            counts = np.zeros(4)
            counts[A] = (first[both] < second[both]).sum()
            counts[B] = (first[both] > second[both]).sum()
            counts[TIE] = (first[both] == second[both]).sum()
            rows.append(counts)
    if not rows:
        empty = np.zeros((0, 4))
        return PairwiseFromRankings(0, empty, float("nan"), float("nan"), float("nan"))
    table = np.asarray(rows)
    mirrored = table.copy()
    mirrored[:, [A, B]] = table[:, [B, A]]
    both_ways = np.concatenate([table, mirrored])
    return PairwiseFromRankings(
        n_pairs=len(rows),
        counts=both_ways,
        percent_agreement=percent_agreement(both_ways),
        percent_agreement_no_ties=percent_agreement_no_ties(both_ways),
        fleiss_kappa=fleiss_kappa(both_ways),
    )


@dataclass(frozen=True)
class PositionBias:
    """Whether display order drives rank, over ``n_rankings`` rankings.

    - ``tau``: mean over rankings of Kendall's tau-b between display position (0 = shown first) and
      rank (1 = best); positive when responses shown earlier are ranked better, 0 without bias.
      Rankings where every response is tied are left out.
    - ``first_best_rate``: share of rankings where the response shown first holds the best rank
      (alone or tied), and ``first_best_expected`` its expectation without position bias: the mean
      over rankings of (responses holding the best rank) / K.
    - ``mean_rank_by_position`` [K_max]: per display position, the mean normalised rank
      (mid-rank - 1) / (K - 1) in [0, 1] (0 = best) over rankings that showed that position; 0.5
      everywhere without bias. ``n_by_position`` [K_max]: how many rankings each mean is over.
    """

    n_rankings: int
    tau: float
    first_best_rate: float
    first_best_expected: float
    mean_rank_by_position: np.ndarray
    n_by_position: np.ndarray


def ranking_position_bias(
    display_positions: Sequence[Sequence[int] | np.ndarray],
    ranks: Sequence[Sequence[float] | np.ndarray],
) -> PositionBias:
    """Position bias of rankings from the stored display order.

    display_positions: per ranking, [K] the position (0 = first / top) at which response i was shown, a
    permutation of 0..K-1; ranks: per ranking, [K] the rank given to response i (1 = best, ties
    allowed). K may differ between rankings (2 or more).
    """
    if len(display_positions) != len(ranks):
        raise ValueError(
            f"{len(display_positions)} display orders for {len(ranks)} rankings: one each"
        )
    taus, first_best, expected, norm_ranks, shown = [], [], [], [], []
    for positions, given in zip(display_positions, ranks, strict=True):
        position = np.asarray(positions)
        mid = _mid_ranks(np.asarray(given, dtype=float)[None, :])[0]
        k = mid.size
        if position.shape != (k,) or sorted(position.tolist()) != list(range(k)):
            raise ValueError(f"display positions {position.tolist()} are not a permutation of 0..{k - 1}")
        best = mid == mid.min()
        first_best.append(bool(best[position == 0][0]))
        expected.append(best.sum() / k)
        if np.ptp(mid) > 0:
            taus.append(kendalltau(position, mid, variant="b").statistic)
        norm_ranks.append(np.bincount(position, weights=(mid - 1) / (k - 1)))
        shown.append(k)
    width = max(shown, default=0)
    totals, n_by = np.zeros(width), np.zeros(width, dtype=np.int64)
    for values, k in zip(norm_ranks, shown, strict=True):
        totals[:k] += values
        n_by[:k] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        by_position = totals / n_by
    return PositionBias(
        n_rankings=len(shown),
        tau=float(np.mean(taus)) if taus else float("nan"),
        first_best_rate=float(np.mean(first_best)) if shown else float("nan"),
        first_best_expected=float(np.mean(expected)) if shown else float("nan"),
        mean_rank_by_position=by_position,
        n_by_position=n_by,
    )


def consensus_ranking(ranks: Sequence | np.ndarray) -> np.ndarray:
    """The consensus of m rankings [m, n] (1 = best): responses ordered by their mean mid-rank and
    re-ranked 1..n, responses with equal means sharing the lower rank (competition ranking: means
    1.5, 1.5, 3 -> ranks 1, 1, 3). Returns [n] integer ranks. Ordering by mean rank is the ranking
    whose Spearman correlations with the raters' rankings sum highest among untied rankings
    (Kendall 1962, Rank Correlation Methods, ch. 6).
    """
    mid = _mid_ranks(ranks)
    # Sums of mid-ranks are multiples of 0.5, exact in floating point, so equal means compare equal.
    return rankdata(mid.sum(axis=0), method="min").astype(np.int64)
