"""Win rates of a checkpoint against a baseline: pure NumPy/SciPy, no Django (PIPELINE.md "When to stop").

Every pairwise judgement is an *outcome* from the checkpoint's side: 1 win, 0.5 tie, 0 loss.

- ``wilson_interval``: a proportion's Wilson score interval.
- ``win_rate`` / ``win_rate_batch``: win rate with ties as half, the item as the unit (the mean of each
  item's ratings; an item with identical answers is one tie), Wilson's interval at the items'
  effective sample size; ``win_rate_over_time``: the same after each rating.
- ``win_rate_eprocess``: an anytime-valid betting test of "win rate = 0.5" on item means, so reviewers
  may look after every item without inflating the error rate (Ville's inequality).
- ``sample_size_for_width``: items needed for a confidence interval of a given width.

The stopping panel (``monitoring.stats.stopping``) reads them beside the other criteria.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri
from scipy.stats import t as student_t

from monitoring.stats.intervals import Interval

ArrayLike = Sequence[float] | np.ndarray


def z_value(confidence: float) -> float:
    """The normal quantile of a two-sided ``confidence`` interval: Phi^-1((1 + c) / 2)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return float(ndtri(0.5 + confidence / 2))


def outcomes_array(outcomes: ArrayLike) -> np.ndarray:
    """Outcomes as a flat float array [N], each checked to lie in [0, 1] (1 win, 0.5 tie, 0 loss)."""
    x = np.asarray(outcomes, dtype=float).reshape(-1)
    if x.size and (np.nanmin(x) < 0 or np.nanmax(x) > 1 or np.isnan(x).any()):
        raise ValueError("outcomes must be numbers in [0, 1] (1 win, 0.5 tie, 0 loss)")
    return x


# --- Win rate -------------------------------------------------------------------------------------


def wilson_interval(successes: float, n: int, *, confidence: float = 0.95) -> Interval:
    """Wilson score interval for a proportion (Wilson 1927; Newcombe 1998, method 3).

    successes may be fractional (a tie counts as half a win). p = s/n, z = Phi^-1((1+c)/2):
    centre = (p + z^2/2n) / (1 + z^2/n), half = z/(1 + z^2/n) * sqrt(p(1-p)/n + z^2/4n^2).
    With n = 0 the interval is the whole [0, 1] and the estimate NaN.
    """
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return Interval(math.nan, 0.0, 1.0, 0)
    z = z_value(confidence)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half), n)


# Prefixes ``win_rate_over_time`` computes at once (memory PREFIX_BLOCK x items).
PREFIX_BLOCK = 256

# Fewer human-rated items than this and a win rate rests on too few items to read as precise: the
# pages say so beside it (the interval is valid, but a handful of items say little about the rest).
MIN_RATED_ITEMS = 30


def _wilson(p: np.ndarray, n: np.ndarray, z: float) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised Wilson score bounds (as ``wilson_interval``) for proportions p at sizes n > 0."""
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)


@dataclass(frozen=True)
class WinRateBatch:
    """Win rates of S rounds (or S prefixes of one round); every field is an array [S].

    estimate: the mean of the item means; low/high: the interval; n_items: the items counted;
    effective_n: the sample size the Wilson bounds used (see ``win_rate_batch``)."""

    estimate: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n_items: np.ndarray
    effective_n: np.ndarray


def win_rate_batch(
    item_means: ArrayLike,
    *,
    n_outcomes: ArrayLike | None = None,
    confidence: float = 0.95,
) -> WinRateBatch:
    """Win rates with the item as the unit, for S rounds at once.

    item_means: [S, G] (or [G]) each item's mean outcome (1 win, 0.5 tie, 0 loss, averaged over its
    reviewers; an item with identical answers is one 0.5), NaN where a round has no outcome for
    the item. n_outcomes: [S] (or one number) the outcomes behind each row (ratings plus identical
    items), the most the effective sample size may reach; None: no cap.

    The ratings of one item are not independent (its reviewers read the same two answers), the
    items are: the estimate is the mean of the g item means, p, its variance v = s^2 / g with s^2
    the items' sample variance (ddof 1). The interval is Wilson's at the effective sample size
    n_eff = p (1 - p) / v (Kish's design effect; Korn & Graubard 1998), times (z / t_{g-1})^2 for
    the g - 1 degrees of freedom of v, capped at n_outcomes; when v = 0 or p is 0 or 1, n_eff = g
    (times the same factor). One item: n_eff = 1. No item: estimate NaN, interval [0, 1].
    Coverage at 95% with correlated reviewers is checked by simulation in the tests.
    """
    z = z_value(confidence)
    means = np.atleast_2d(np.asarray(item_means, dtype=float))
    known = means[~np.isnan(means)]
    if known.size and (known.min() < 0 or known.max() > 1):
        raise ValueError("item_means must be in [0, 1] (1 win, 0.5 tie, 0 loss), or NaN")
    rated = ~np.isnan(means)
    g = rated.sum(axis=1)
    some = g > 0
    p = np.where(some, np.where(rated, means, 0.0).sum(axis=1) / np.maximum(g, 1), np.nan)
    dev = np.where(rated, means - np.where(some, p, 0.0)[:, None], 0.0)
    v = (dev * dev).sum(axis=1) / np.maximum(g - 1, 1) / np.maximum(g, 1)
    p0 = np.where(some, p, 0.5)
    spread = (g > 1) & (v > 0) & (p0 > 0) & (p0 < 1)
    n_eff = np.where(spread, p0 * (1 - p0) / np.where(spread, v, 1.0), np.maximum(g, 1))
    df = np.maximum(g - 1, 1)
    n_eff = np.where(g > 1, n_eff * (z / student_t.ppf(0.5 + confidence / 2, df)) ** 2, n_eff)
    if n_outcomes is not None:
        cap = np.broadcast_to(np.asarray(n_outcomes, dtype=float), n_eff.shape)
        n_eff = np.minimum(n_eff, np.maximum(cap, 1.0))
    low, high = _wilson(p0, n_eff, z)
    return WinRateBatch(
        estimate=p,
        low=np.where(some, low, 0.0),
        high=np.where(some, high, 1.0),
        n_items=g,
        effective_n=np.where(some, n_eff, 0.0),
    )


def item_means(
    outcomes: ArrayLike, item_ids: Sequence[int] | np.ndarray | None = None
) -> np.ndarray:
    """The mean outcome of each item, [G] in the order items first appear; outcomes, item_ids: [N]
    (item_ids None: every outcome is its own item)."""
    x = outcomes_array(outcomes)
    if item_ids is None:
        return x.copy()
    ids = np.asarray(item_ids).reshape(-1)
    if ids.shape != x.shape:
        raise ValueError(f"outcomes {x.shape} and item_ids {ids.shape} differ in length")
    if not x.size:
        return x.copy()
    _, first, codes = np.unique(ids, return_index=True, return_inverse=True)
    order = np.argsort(first)
    means = np.bincount(codes, weights=x) / np.bincount(codes)
    return means[order]


def win_rate(
    outcomes: ArrayLike,
    item_ids: Sequence[int] | np.ndarray | None = None,
    *,
    confidence: float = 0.95,
) -> Interval:
    """Win rate of the checkpoint with ties as half, the item as the unit (``win_rate_batch``).

    outcomes: [N] in {1, 0.5, 0}; item_ids: [N] the item of each outcome (an item with identical
    answers appears once, as one 0.5); None: every outcome is its own item. The Interval's n is
    the number of items; no outcome: estimate NaN, interval [0, 1], n = 0."""
    x = outcomes_array(outcomes)
    batch = win_rate_batch(item_means(x, item_ids), n_outcomes=x.size, confidence=confidence)
    return Interval(
        float(batch.estimate[0]), float(batch.low[0]), float(batch.high[0]), int(batch.n_items[0])
    )


def win_rate_over_time(
    outcomes: ArrayLike,
    item_ids: Sequence[int] | np.ndarray | None = None,
    *,
    known: int = 0,
    confidence: float = 0.95,
) -> list[dict[str, float]]:
    """The win rate and its interval (``win_rate``) after each outcome past the first ``known``
    (outcomes known before any rating: identical-answer items' ties), in order:
    [{n (outcomes after the known ones), items, estimate, low, high}]. Vectorised over blocks of
    ``PREFIX_BLOCK`` prefixes: memory PREFIX_BLOCK x G for G items."""
    x = outcomes_array(outcomes)
    if item_ids is None:
        item_ids = np.arange(x.size)
    ids = np.asarray(item_ids).reshape(-1)
    if ids.shape != x.shape:
        raise ValueError(f"outcomes {x.shape} and item_ids {ids.shape} differ in length")
    if not 0 <= known <= x.size:
        raise ValueError(f"known must be in [0, {x.size}], got {known}")
    if x.size == known:
        return []
    _, codes = np.unique(ids, return_inverse=True)
    n_items = int(codes.max()) + 1
    # Running per-item sums and counts before the first reported prefix.
    sums = np.bincount(codes[:known], weights=x[:known], minlength=n_items)
    counts = np.bincount(codes[:known], minlength=n_items).astype(float)
    parts = []
    for start in range(known, x.size, PREFIX_BLOCK):
        stop = min(start + PREFIX_BLOCK, x.size)
        rows = np.arange(stop - start)
        step_sums = np.zeros((stop - start, n_items))
        step_sums[rows, codes[start:stop]] = x[start:stop]
        step_counts = np.zeros((stop - start, n_items))
        step_counts[rows, codes[start:stop]] = 1.0
        block_sums = sums + np.cumsum(step_sums, axis=0)
        block_counts = counts + np.cumsum(step_counts, axis=0)
        sums, counts = block_sums[-1], block_counts[-1]
        means = np.where(block_counts > 0, block_sums / np.maximum(block_counts, 1), np.nan)
        parts.append(
            win_rate_batch(means, n_outcomes=np.arange(start + 1, stop + 1), confidence=confidence)
        )
    batch = WinRateBatch(
        *(np.concatenate([getattr(p, f) for p in parts]) for f in WinRateBatch.__dataclass_fields__)
    )
    return [
        {"n": k + 1, "items": int(batch.n_items[k]), "estimate": float(batch.estimate[k]),
         "low": float(batch.low[k]), "high": float(batch.high[k])}
        for k in range(x.size - known)
    ]  # fmt: skip


@dataclass(frozen=True)
class EProcessResult:
    """The betting test of "win rate = 0.5" after every rating.

    wealth: [N] e-value after each rating (the gambler's wealth, starting at 1).
    decision: "better" or "worse" once wealth reached 1/alpha (the side is where the wealth came from),
    "undecided" otherwise. stopped_at: 1-based rating count at which the decision was reached.
    """

    wealth: np.ndarray
    alpha: float
    decision: str
    stopped_at: int | None

    @property
    def e_value(self) -> float:
        return float(self.wealth[-1]) if self.wealth.size else 1.0

    @property
    def decision_label(self) -> str:
        """The decision in words, for a page."""
        return {
            "better": "the checkpoint is better",
            "worse": "the checkpoint is worse",
        }.get(self.decision, "not decided yet")


# The bets of the mixture: fractions of wealth staked on "checkpoint better" (positive) or "worse".
BETS = np.array([0.1, 0.25, 0.5, 1.0, 1.5])


def win_rate_eprocess(
    outcomes: ArrayLike, *, alpha: float = 0.05, null: float = 0.5
) -> EProcessResult:
    """Anytime-valid test of H0: E[outcome] = null for outcomes in [0, 1] (testing by betting;
    Waudby-Smith & Ramdas 2023, Shafer 2021).

    For a fixed bet lam with |lam| * max(null, 1 - null) <= 1, K_t(lam) = prod_s (1 + lam (x_s - null))
    is a non-negative martingale under H0 with K_0 = 1. The average of such martingales over a grid
    of bets on both sides (``BETS`` and their negatives, equal weights) is one too, so by Ville's
    inequality P(sup_t K_t >= 1/alpha) <= alpha: the reviewers may look after every rating and stop
    at the first crossing without inflating the type-I error. The guarantee needs that under H0
    each new outcome has mean ``null`` given the ones before. Two ratings of one item break that
    (the second reviewer read the same answers: given the first verdict, the second leans the same
    way), two items drawn at random from the held-out prompts do not: so the outcomes are item
    means, one per item, in the order the items were completed (``eval_selectors``).
    outcomes: [N] in [0, 1], one per item (its mean: 1 win, 0.5 tie, 0 loss averaged).
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not 0 < null < 1:
        raise ValueError(f"null must be in (0, 1), got {null}")
    x = outcomes_array(outcomes)
    bets = np.concatenate([BETS, -BETS]) / (2 * max(null, 1 - null))
    # log wealth of each bet after each rating: [N, n_bets]
    log_w = np.cumsum(np.log1p(np.outer(x - null, bets)), axis=0)
    per_bet = np.exp(log_w)
    wealth = per_bet.mean(axis=1)
    crossed = np.flatnonzero(wealth >= 1 / alpha)
    if not crossed.size:
        return EProcessResult(wealth, alpha, "undecided", None)
    t = int(crossed[0])
    up = per_bet[t, bets > 0].sum() >= per_bet[t, bets < 0].sum()
    return EProcessResult(wealth, alpha, "better" if up else "worse", t + 1)


def sample_size_for_width(width: float, *, p: float = 0.5, confidence: float = 0.95) -> int:
    """Independent ratings needed so a proportion's interval is ``width`` wide in all (normal
    approximation): n = ceil(z^2 p (1-p) / (width/2)^2). p = 0.5 is the worst case; width 0.1 at 95%
    needs 385."""
    if not 0 < width < 1:
        raise ValueError(f"width must be in (0, 1), got {width}")
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p}")
    z = z_value(confidence)
    return math.ceil(z * z * p * (1 - p) / (width / 2) ** 2 - 1e-9)
