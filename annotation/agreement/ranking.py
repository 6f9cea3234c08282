"""Agreement for ranking tasks (K responses to one prompt ordered by each rater): pure NumPy.

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
    less, equal = _order_counts(matrix)
    return less + (equal + 1) / 2.0


def _order_counts(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per cell of [m, n]: how many of its row rank better, and how many share its rank (itself
    included). A mid-rank is less + (equal + 1) / 2; O(m n^2), small for K responses."""
    below = matrix[:, None, :] < matrix[:, :, None]
    same = matrix[:, None, :] == matrix[:, :, None]
    return below.sum(axis=2), same.sum(axis=2)


def _tau_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's tau-b of x and y [..., n] along the last axis, batched: [...], NaN where either
    side ties every pair. sum_{i<j} sign(x_i - x_j) sign(y_i - y_j) / sqrt(n_x n_y), n_x the pairs x
    does not tie: (concordant - discordant) / sqrt((P - T_x)(P - T_y)) (Kendall 1945)."""
    first, second = np.triu_indices(x.shape[-1], 1)
    sx = np.sign(x[..., first] - x[..., second])
    sy = np.sign(y[..., first] - y[..., second])
    untied = np.count_nonzero(sx, axis=-1) * np.count_nonzero(sy, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(untied > 0, (sx * sy).sum(axis=-1) / np.sqrt(untied), np.nan)


def _tie_sums(mid: np.ndarray) -> np.ndarray:
    """Per row of [m, n]: sum over tie groups of (t^3 - t), t the group's size (0 without ties).
    Each of a group's t members counts t^2 - 1, so the row's sum is sum_i (t_i^2 - 1)."""
    _, equal = _order_counts(mid)
    return (equal**2 - 1).sum(axis=1)


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
    ties = float(_tie_sums(mid).sum()) if correct_ties else 0.0
    denominator = m**2 * (n**3 - n) - m * ties
    return 12.0 * s / denominator if denominator > 0 else float("nan")


def mean_pairwise_kendall_tau(ranks: Sequence | np.ndarray) -> float:
    """Mean over the m (m - 1) / 2 rater pairs of Kendall's tau-b between their rankings; ranks [m, n].

    tau-b = (concordant - discordant) / sqrt((P - T_1)(P - T_2)) with P = n (n - 1) / 2 and T the tied
    pairs of each ranking (Kendall 1945). A pair where one rater tied every response has no tau-b and
    is left out; NaN when no pair has one.
    """
    mid = _mid_ranks(ranks, min_raters=2)
    first, second = np.triu_indices(mid.shape[0], 1)
    taus = _tau_b(mid[first], mid[second])
    taus = taus[~np.isnan(taus)]
    return float(taus.mean()) if taus.size else float("nan")


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
            raise ValueError(
                f"each ranking must be 2-d [raters, responses], got shape {matrix.shape}"
            )
        if np.isinf(matrix).any():
            raise ValueError("ranks must be finite numbers or NaN for a response not ranked")
        i, j = np.triu_indices(matrix.shape[1], 1)
        first, second = matrix[:, i], matrix[:, j]  # [raters, response pairs]
        counts = np.zeros((i.size, 4))
        with np.errstate(invalid="ignore"):  # NaN compares False: a missing rank counts nowhere
            counts[:, A] = (first < second).sum(axis=0)
            counts[:, B] = (first > second).sum(axis=0)
            counts[:, TIE] = (first == second).sum(axis=0)
        rows.append(counts[counts.sum(axis=1) >= 2])
    table = np.concatenate(rows) if rows else np.zeros((0, 4))
    if not table.size:
        return PairwiseFromRankings(0, table, float("nan"), float("nan"), float("nan"))
    mirrored = table.copy()
    mirrored[:, [A, B]] = table[:, [B, A]]
    both_ways = np.concatenate([table, mirrored])
    return PairwiseFromRankings(
        n_pairs=table.shape[0],
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
    by_k: dict[int, tuple[list, list]] = {}
    for positions, given in zip(display_positions, ranks, strict=True):
        row = np.asarray(given, dtype=float)
        shown = np.asarray(positions)
        if shown.shape != row.shape:
            raise ValueError(f"display positions {shown.tolist()} and ranks {row.tolist()} differ")
        by_k.setdefault(row.size, ([], []))[0].append(shown)
        by_k[row.size][1].append(row)
    taus, first_best, expected = [], [], []
    width = max(by_k, default=0)
    totals, n_by = np.zeros(width), np.zeros(width, dtype=np.int64)
    for k, (shown_rows, rank_rows) in by_k.items():
        position = np.asarray(shown_rows)
        mid = _mid_ranks(np.asarray(rank_rows))
        bad = (np.sort(position, axis=1) != np.arange(k)).any(axis=1)
        if bad.any():
            raise ValueError(
                f"display positions {position[bad][0].tolist()} are not a permutation of 0..{k - 1}"
            )
        best = mid == mid.min(axis=1, keepdims=True)
        first_best.append(best[np.arange(len(best)), np.argmin(position, axis=1)])
        expected.append(best.sum(axis=1) / k)
        taus.append(_tau_b(position.astype(float), mid))
        # Normalised ranks in display order: column p holds the rank of the response shown at p.
        totals[:k] += np.take_along_axis((mid - 1) / (k - 1), np.argsort(position, axis=1), 1).sum(
            0
        )
        n_by[:k] += len(position)
    tau = np.concatenate(taus) if taus else np.zeros(0)
    tau = tau[~np.isnan(tau)]
    with np.errstate(invalid="ignore", divide="ignore"):
        by_position = totals / n_by
    n = int(sum(len(rows) for rows in first_best))
    return PositionBias(
        n_rankings=n,
        tau=float(tau.mean()) if tau.size else float("nan"),
        first_best_rate=float(np.concatenate(first_best).mean()) if n else float("nan"),
        first_best_expected=float(np.concatenate(expected).mean()) if n else float("nan"),
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
    better, _ = _order_counts(mid.sum(axis=0)[None, :])
    return (better[0] + 1).astype(np.int64)
