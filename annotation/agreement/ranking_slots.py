"""Position bias of rankings by screen slot: the mean rank of the response shown in each slot and
Friedman's test of "the slot does not matter" (pure NumPy, SciPy's chi-square tail).

Layout: ``slot_ranks[r][s]`` is the rank that ranking r gave the response shown in screen slot s
(0 = shown first / on top), 1 = best, ties sharing a rank. The labelling screen rotates the display
order, so without position bias every slot's mean rank is (K + 1) / 2.

The test treats each ranking as a block and each slot as a treatment (Friedman 1937; Siegel &
Castellan 1988, section 7.2, with their tie correction, eq. 7.9): for n rankings of K responses,
with R_s the sum of slot s's mid-ranks,

    Q = (K - 1) * sum_s (R_s - n (K + 1) / 2)^2 / (sum_{r,s} r_{rs}^2 - n K (K + 1)^2 / 4),

which without ties is 12 / (n K (K + 1)) * sum_s R_s^2 - 3 n (K + 1), and is chi-square with
K - 1 degrees of freedom when the slot does not matter. Rankings of different sizes K are tested
apart and combined as independent chi-squares (statistics and degrees of freedom add). The pairwise
dashboard tests sides the same way in spirit (a binomial test of left picks against one half).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import chdtrc  # chi-square upper tail; far lighter to import than scipy.stats

from annotation.agreement.ranking import _mid_ranks


@dataclass(frozen=True)
class SlotMeans:
    """Rankings of ``k`` responses: ``n_rankings`` of them; ``mean_rank`` [k] the mean mid-rank of
    the response shown in each slot (1 = best); ``expected`` = (k + 1) / 2, each slot's mean
    without position bias; ``statistic`` Friedman's Q on ``df`` = k - 1 degrees of freedom (NaN
    when every ranking ties all its responses)."""

    k: int
    n_rankings: int
    mean_rank: np.ndarray
    expected: float
    statistic: float
    df: int


@dataclass(frozen=True)
class SlotRankBias:
    """``by_size``: one SlotMeans per ranking size, smallest first; ``statistic``, ``df`` and
    ``p_value``: Friedman's test over every size together (NaN with no usable ranking)."""

    n_rankings: int
    by_size: list[SlotMeans]
    statistic: float
    df: int
    p_value: float


def _friedman(mid: np.ndarray) -> float:
    """Friedman's Q with the tie correction for mid-ranks [n, K]; NaN when every row is all ties."""
    n, k = mid.shape
    deviations = mid.sum(axis=0) - n * (k + 1) / 2.0
    denominator = (mid**2).sum() - n * k * (k + 1) ** 2 / 4.0
    if denominator <= 1e-12:
        return float("nan")
    return float((k - 1) * (deviations**2).sum() / denominator)


def slot_rank_bias(slot_ranks: Sequence[Sequence[float] | np.ndarray]) -> SlotRankBias:
    """Mean rank per screen slot and Friedman's test, per ranking size and over all.

    slot_ranks: per ranking, [K] the rank given to the response shown in slot s (1 = best, ties
    allowed; only the order counts: [1, 1, 3] and [1, 1, 2] are the same ranking). K >= 2 and may
    differ between rankings. ValueError for a ranking of fewer than 2 responses or a rank that is
    not a finite number.
    """
    by_k: dict[int, list[np.ndarray]] = {}
    for number, given in enumerate(slot_ranks):
        row = np.asarray(given, dtype=float)
        if row.ndim != 1 or row.size < 2:
            raise ValueError(f"ranking {number} ranks {row.size} response(s): need 2 or more")
        by_k.setdefault(row.size, []).append(row)
    sizes, total, total_df = [], 0.0, 0
    for k in sorted(by_k):
        mid = _mid_ranks(np.asarray(by_k[k]))
        statistic = _friedman(mid)
        sizes.append(
            SlotMeans(
                k=k,
                n_rankings=len(mid),
                mean_rank=mid.mean(axis=0),
                expected=(k + 1) / 2.0,
                statistic=statistic,
                df=k - 1,
            )
        )
        if not np.isnan(statistic):
            total += statistic
            total_df += k - 1
    return SlotRankBias(
        n_rankings=sum(size.n_rankings for size in sizes),
        by_size=sizes,
        statistic=total if total_df else float("nan"),
        df=total_df,
        p_value=float(chdtrc(total_df, total)) if total_df else float("nan"),
    )


def slot_ranks_from_stored(order: Sequence[int], ranks: Sequence[float]) -> list[float]:
    """One answer's ranks by screen slot from its stored terms: ``order[s]`` the stored position
    shown in slot s, ``ranks[p]`` the rank of the response at stored position p. [K]."""
    if sorted(order) != list(range(len(ranks))):
        raise ValueError(f"display order {list(order)} is not a permutation of 0..{len(ranks) - 1}")
    return [float(ranks[position]) for position in order]
