"""Statistics that decide when training stops: pure NumPy/SciPy, no Django (PIPELINE.md "When to stop").

Human-eval rounds compare a checkpoint with a baseline. Every pairwise judgement is an *outcome* from
the checkpoint's side: 1 win, 0.5 tie, 0 loss. Every usefulness rating is 1-5 on the checkpoint's
response.

- ``wilson_interval``: a proportion's Wilson score interval.
- ``win_rate`` / ``win_rate_batch``: win rate with ties as half, the item as the unit (the mean of each
  item's ratings; an item with identical answers is one tie), Wilson's interval at the items'
  effective sample size.
- ``win_rate_eprocess``: an anytime-valid betting test of "win rate = 0.5" on item means, so reviewers
  may look after every item without inflating the error rate (Ville's inequality).
- ``usefulness_summary``: mean usefulness with a bootstrap interval clustered by prompt, and the share
  of ratings at or below 2.
- ``bradley_terry``: strengths of several checkpoints from pairwise outcomes, bootstrap intervals.
- ``length_controlled_win_rate``: the win rate at equal length (logistic regression on the length ratio).
- ``sample_size_for_width``: items needed for a confidence interval of a given width.
- ``reward_human_correlation``, ``reward_plateau``, ``kl_stability``, ``hacking_trend``: the training
  side of the panel; ``stopping_panel`` puts every criterion together with its value and pass/fail.

Long module: every statistic the stopping panel combines, beside the panel that combines them (the
PPI estimate that may replace the human-only interval lives in monitoring/stats/ppi.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit, ndtri
from scipy.stats import spearmanr
from scipy.stats import t as student_t

from common.ngrams import repeated_ngram_share
from monitoring.stats.correlation_fall import correlation_fall
from monitoring.stats.intervals import EstimateChoice, Interval

ArrayLike = Sequence[float] | np.ndarray


def _z(confidence: float) -> float:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return float(ndtri(0.5 + confidence / 2))


def _outcomes(outcomes: ArrayLike) -> np.ndarray:
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
    z = _z(confidence)
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
    z = _z(confidence)
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
    x = _outcomes(outcomes)
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
    x = _outcomes(outcomes)
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
    x = _outcomes(outcomes)
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
    x = _outcomes(outcomes)
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
    z = _z(confidence)
    return math.ceil(z * z * p * (1 - p) / (width / 2) ** 2 - 1e-9)


# --- Usefulness ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UsefulnessSummary:
    """Mean 1-5 usefulness with a prompt-clustered bootstrap interval; share of ratings <= 2."""

    mean: Interval
    share_low: float
    n_prompts: int


def usefulness_summary(
    ratings: ArrayLike,
    prompt_ids: Sequence[int] | np.ndarray,
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> UsefulnessSummary:
    """Mean usefulness and its percentile bootstrap interval, resampling prompts (with all their
    ratings) rather than ratings: the 3 ratings of one prompt are not independent.

    ratings: [N] in 1..5; prompt_ids: [N] the prompt each rating belongs to.
    """
    y = np.asarray(ratings, dtype=float).reshape(-1)
    groups = np.asarray(prompt_ids).reshape(-1)
    if y.shape != groups.shape:
        raise ValueError(f"ratings {y.shape} and prompt_ids {groups.shape} differ in length")
    if y.size == 0:
        return UsefulnessSummary(Interval(math.nan, math.nan, math.nan, 0), math.nan, 0)
    if y.min() < 1 or y.max() > 5:
        raise ValueError("usefulness ratings must be between 1 and 5")
    _, codes = np.unique(groups, return_inverse=True)
    sums = np.bincount(codes, weights=y)
    counts = np.bincount(codes).astype(float)
    g = sums.size
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, g, size=(n_boot, g))
    boot = sums[pick].sum(axis=1) / counts[pick].sum(axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(boot, [tail, 100 - tail])
    mean = Interval(float(y.mean()), float(low), float(high), int(y.size))
    return UsefulnessSummary(mean, float((y <= 2).mean()), g)


# --- Bradley-Terry ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class BradleyTerryResult:
    """Log-strengths of M models anchored at ``anchor`` (its score is 0): P(i beats j) =
    sigmoid(score_i - score_j). low/high: [M] percentile bootstrap interval over comparisons."""

    scores: np.ndarray
    low: np.ndarray
    high: np.ndarray
    anchor: int


def _bt_fit(wins: np.ndarray, *, prior: float, max_iter: int = 10_000, tol: float = 1e-10):
    """Minorise-maximise fit of Bradley-Terry (Hunter 2004): p_i <- W_i / sum_j n_ij / (p_i + p_j).

    wins: [M, M], wins[i, j] = times i beat j (a tie adds 0.5 to both). prior: virtual wins added to
    every ordered pair, which keeps the estimate finite when one model won every comparison.
    Returns log-strengths [M] with mean 0.
    """
    m = wins.shape[0]
    w = wins + prior * (1 - np.eye(m))
    n = w + w.T
    total = w.sum(axis=1)
    p = np.ones(m)
    for _ in range(max_iter):
        denom = (n / (p[:, None] + p[None, :])).sum(axis=1)
        new = np.where(denom > 0, total / np.where(denom > 0, denom, 1), p)
        new = np.maximum(new, 1e-12)  # a model that never won tends to 0: keep the logs finite
        new = new / np.exp(np.log(new).mean())
        if np.max(np.abs(new - p)) < tol:
            p = new
            break
        p = new
    return np.log(p) - np.log(p).mean()


def bradley_terry(
    pairs: Sequence[tuple[int, int, float]] | np.ndarray,
    n_models: int,
    *,
    anchor: int = 0,
    prior: float = 0.1,
    confidence: float = 0.95,
    n_boot: int = 500,
    seed: int = 0,
) -> BradleyTerryResult:
    """Bradley-Terry scores of ``n_models`` from pairwise outcomes.

    pairs: [K, 3] rows (i, j, outcome of i against j: 1 win, 0.5 tie, 0 loss). The interval
    resamples the K comparisons with replacement (percentile bootstrap); the anchor's interval is
    [0, 0] by construction.
    """
    rows = np.asarray(pairs, dtype=float).reshape(-1, 3)
    if not 0 <= anchor < n_models:
        raise ValueError(f"anchor must index one of the {n_models} models, got {anchor}")
    if rows.size and (rows[:, :2].min() < 0 or rows[:, :2].max() >= n_models):
        raise ValueError(f"model indices must be in [0, {n_models})")
    i = rows[:, 0].astype(int)
    j = rows[:, 1].astype(int)
    out = _outcomes(rows[:, 2])

    def fit(weights: np.ndarray) -> np.ndarray:
        wins = np.zeros((n_models, n_models))
        np.add.at(wins, (i, j), weights * out)
        np.add.at(wins, (j, i), weights * (1 - out))
        scores = _bt_fit(wins, prior=prior)
        return scores - scores[anchor]

    scores = fit(np.ones(len(rows)))
    rng = np.random.default_rng(seed)
    boots = np.array(
        [fit(np.bincount(rng.integers(0, len(rows), len(rows)), minlength=len(rows)).astype(float))
         for _ in range(n_boot if len(rows) else 0)]
    )  # fmt: skip
    if not boots.size:
        return BradleyTerryResult(scores, scores.copy(), scores.copy(), anchor)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(boots, [tail, 100 - tail], axis=0)
    return BradleyTerryResult(scores, low, high, anchor)


# --- Length control --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LengthControlled:
    """intercept: log-odds of a win at equal length; slope: per doubling of the length ratio.
    win_rate = sigmoid(intercept), the win rate the checkpoint would have at the baseline's length."""

    win_rate: float
    intercept: float
    slope: float
    raw_win_rate: float
    mean_length_ratio: float


def length_controlled_win_rate(
    outcomes: ArrayLike,
    checkpoint_lengths: ArrayLike,
    baseline_lengths: ArrayLike,
    *,
    ridge: float = 1e-3,
) -> LengthControlled:
    """Fractional logistic regression outcome ~ sigmoid(a + b * log2(len_ckpt / len_base)) fitted by
    Newton's method (ties as 0.5 outcomes; a tiny ridge keeps separated data finite). Judges prefer
    longer answers; the intercept removes that: the win rate at equal length (as AlpacaEval 2's
    length-controlled win rate). outcomes, lengths: [N]; lengths in tokens (or characters), >= 1.
    """
    y = _outcomes(outcomes)
    lc = np.maximum(np.asarray(checkpoint_lengths, dtype=float).reshape(-1), 1)
    lb = np.maximum(np.asarray(baseline_lengths, dtype=float).reshape(-1), 1)
    if not (y.shape == lc.shape == lb.shape):
        raise ValueError("outcomes and both length arrays must have the same length")
    if y.size == 0:
        return LengthControlled(math.nan, math.nan, math.nan, math.nan, math.nan)
    x = np.log2(lc / lb)
    # Equal length ratios everywhere leave nothing to control for: fit the intercept alone.
    design = np.column_stack([np.ones_like(x), x]) if np.ptp(x) > 0 else np.ones((x.size, 1))
    beta = np.zeros(design.shape[1])
    for _ in range(100):
        mu = expit(design @ beta)
        grad = design.T @ (y - mu) - ridge * beta
        hess = (design * (mu * (1 - mu))[:, None]).T @ design + ridge * np.eye(beta.size)
        step = np.linalg.solve(hess, grad)
        beta = beta + step
        if np.max(np.abs(step)) < 1e-10:
            break
    return LengthControlled(
        float(expit(beta[0])), float(beta[0]), float(beta[1]) if beta.size > 1 else 0.0,
        float(y.mean()),
        float(np.mean(lc / lb)),
    )  # fmt: skip


def text_repetition_rate(text: str, *, n: int = 3) -> float:
    """Share of a text's word n-grams that repeat an earlier n-gram (0: none, -> 1: a loop); 0 for a
    text shorter than n words."""
    return repeated_ngram_share(text.split(), n=n) or 0.0


# --- Training-side criteria ------------------------------------------------------------------------


@dataclass(frozen=True)
class Correlation:
    """Spearman's rho between reward-model scores and human usefulness; alarm when rho < minimum."""

    rho: float
    n: int
    alarm: bool | None  # None: too few or constant values to tell


def reward_human_correlation(
    reward_scores: ArrayLike, usefulness: ArrayLike, *, minimum: float = 0.3
) -> Correlation:
    """PIPELINE.md: a correlation between human rating and reward under 0.3 means hacking has
    started. reward_scores, usefulness: [N], one pair per item (usefulness averaged over reviewers).
    ``alarm`` is that level read alone; the panel's hacking alarm reads a fall across rounds
    instead (``monitoring.stats.correlation_fall``: low from the start is calibration)."""
    r = np.asarray(reward_scores, dtype=float).reshape(-1)
    u = np.asarray(usefulness, dtype=float).reshape(-1)
    if r.shape != u.shape:
        raise ValueError("reward_scores and usefulness must have the same length")
    keep = ~(np.isnan(r) | np.isnan(u))
    r, u = r[keep], u[keep]
    if r.size < 3 or np.ptp(r) == 0 or np.ptp(u) == 0:
        return Correlation(math.nan, int(r.size), None)
    rho = float(spearmanr(r, u).statistic)
    return Correlation(rho, int(r.size), rho < minimum)


def reward_plateau(rewards: ArrayLike, *, window: int = 5, min_gain: float = 0.005):
    """Mean gain per evaluation over the last ``window`` evaluations: (r[-1] - r[-window]) /
    (window - 1). Returns (gain, plateaued); gain None (and plateaued False) with fewer values."""
    r = np.asarray(rewards, dtype=float).reshape(-1)
    if window < 2:
        raise ValueError(f"window must be >= 2, got {window}")
    if r.size < window:
        return None, False
    gain = float((r[-1] - r[-window]) / (window - 1))
    return gain, gain < min_gain


def kl_stability(
    kl_values: ArrayLike,
    *,
    window: int = 10,
    max_std: float = 0.015,
    band: tuple[float, float] = (0.12, 0.22),
) -> tuple[float | None, float | None, bool]:
    """(mean, std, stable) of the last ``window`` KL values (population std); stable when the std is
    under ``max_std`` and the mean inside ``band``. Fewer than ``window`` values: (None, None, False)."""
    k = np.asarray(kl_values, dtype=float).reshape(-1)
    if k.size < window:
        return None, None, False
    last = k[-window:]
    mean, std = float(last.mean()), float(last.std())
    return mean, std, std < max_std and band[0] <= mean <= band[1]


@dataclass(frozen=True)
class HackingTrend:
    """Across the last rounds: the proxy reward's and the human win rate's least-squares slopes per
    round. red: reward rising while the win rate falls; best_round: index of the highest win rate
    (the roll-back advice)."""

    reward_slope: float | None
    win_rate_slope: float | None
    red: bool
    best_round: int | None


def hacking_trend(
    proxy_rewards: ArrayLike, win_rates: ArrayLike, *, window: int = 3
) -> HackingTrend:
    """The red alarm: proxy reward rising while the human win rate falls across rounds.

    proxy_rewards, win_rates: [R] one value per round in round order (R >= 2 to judge; only the
    last ``window`` rounds count).
    """
    r = np.asarray(proxy_rewards, dtype=float).reshape(-1)
    w = np.asarray(win_rates, dtype=float).reshape(-1)
    if r.shape != w.shape:
        raise ValueError("proxy_rewards and win_rates must have one value per round each")
    best = int(np.nanargmax(w)) if w.size and not np.isnan(w).all() else None
    r, w = r[-window:], w[-window:]
    keep = ~(np.isnan(r) | np.isnan(w))
    r, w = r[keep], w[keep]
    if r.size < 2:
        return HackingTrend(None, None, False, best)
    t = np.arange(r.size, dtype=float)
    reward_slope = float(np.polyfit(t, r, 1)[0])
    win_slope = float(np.polyfit(t, w, 1)[0])
    return HackingTrend(reward_slope, win_slope, reward_slope > 0 and win_slope < 0, best)


# --- The panel -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoppingConfig:
    """Thresholds of PIPELINE.md's stopping rule."""

    plateau_window: int = 5  # evaluations the reward gain is averaged over
    plateau_min_gain: float = 0.005  # mean reward gain per evaluation below which it has plateaued
    kl_window: int = 10  # last KL values whose spread is checked
    kl_max_std: float = 0.015  # KL std under which the policy's divergence is stable
    kl_band: tuple[float, float] = (0.12, 0.22)  # healthy range of the mean KL
    usefulness_min: float = 4.2  # mean 1-5 usefulness the checkpoint must reach
    reviewers_min: int = 3  # independent reviewers every item needs
    # Hacking alarm on Spearman's rho (reward vs usefulness): under correlation_min after a first
    # rated round above it, or a fall of correlation_drop from the first round's (correlation_fall)
    correlation_min: float = 0.3
    correlation_drop: float = 0.3
    confidence: float = 0.95  # level of every interval

    def __post_init__(self) -> None:
        if self.plateau_window < 2:
            raise ValueError(f"plateau_window must be >= 2, got {self.plateau_window}")
        if self.kl_window < 2:
            raise ValueError(f"kl_window must be >= 2, got {self.kl_window}")
        if not self.kl_band[0] < self.kl_band[1]:
            raise ValueError(f"kl_band must be (low, high) with low < high, got {self.kl_band}")
        if not 1 <= self.usefulness_min <= 5:
            raise ValueError(f"usefulness_min must be in [1, 5], got {self.usefulness_min}")
        if self.reviewers_min < 1:
            raise ValueError(f"reviewers_min must be >= 1, got {self.reviewers_min}")
        _z(self.confidence)


@dataclass(frozen=True)
class Criterion:
    """One line of the panel. passed None: not enough data yet."""

    key: str
    label: str
    value: float | None
    passed: bool | None
    detail: str = ""


@dataclass(frozen=True)
class StoppingPanel:
    criteria: list[Criterion]
    red_alarm: bool
    advice: str
    extras: dict[str, object] = field(default_factory=dict)

    @property
    def ready_to_stop(self) -> bool:
        return all(c.passed for c in self.criteria)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _advice(criteria: list[Criterion], trend: HackingTrend, *, finished: bool) -> str:
    """The panel's one-sentence recommendation. A finished run cannot be trained on: its advice is
    which checkpoint to keep (the final one, or a roll back)."""
    best = (
        f"the checkpoint of round {trend.best_round + 1} (the best human win rate)"
        if trend.best_round is not None
        else "an earlier checkpoint"
    )
    if trend.red:
        return (
            "Red alarm: the proxy reward rises while the human win rate falls. Roll back to "
            f"{best} and fix the reward model before "
            + ("training again." if finished else "training on.")
        )
    if all(c.passed for c in criteria):
        if finished:
            return "Every criterion passes: keep the final checkpoint as the run's result."
        return "Every criterion passes: stop training and keep this checkpoint."
    plateau_unsatisfied = criteria[0].passed and criteria[1].passed is False
    if finished:
        if plateau_unsatisfied:
            return (
                "The run has ended; its reward plateaued but humans are not satisfied (the reward "
                f"signal is biased): roll back to {best}, or keep the final checkpoint only if "
                "a new round with human eval says it is good enough."
            )
        return (
            "The run has ended before every criterion passed: keep the final checkpoint, or roll "
            f"back to {best}; a human-eval round on the final checkpoint tells which."
        )
    if plateau_unsatisfied:
        return (
            "The reward has plateaued but humans are not satisfied: the reward signal is biased. "
            "Continue only with human eval in the loop."
        )
    return "Continue training; evaluate again at the next checkpoint."


def stopping_panel(
    *,
    eval_rewards: ArrayLike = (),
    kl_values: ArrayLike = (),
    usefulness: ArrayLike = (),
    usefulness_prompt_ids: Sequence[int] | np.ndarray = (),
    item_reward_scores: ArrayLike = (),
    item_usefulness: ArrayLike = (),
    round_rewards: ArrayLike = (),
    round_win_rates: ArrayLike = (),
    round_correlations: Sequence[float | None] = (),
    config: StoppingConfig | None = None,
    n_boot: int = 2000,
    seed: int = 0,
    usefulness_choice: EstimateChoice | None = None,
    finished: bool = False,
    summary: UsefulnessSummary | None = None,
) -> StoppingPanel:
    """Every stopping criterion with its value and pass/fail (all must pass to stop).

    eval_rewards: [E] mean reward of each evaluation, in order; kl_values: [T] logged KL values.
    usefulness, usefulness_prompt_ids: [N] ratings of the latest round and the prompt of each.
    item_reward_scores, item_usefulness: [I] per item of the latest round (mean usefulness per item).
    round_rewards, round_win_rates: [R] proxy reward and human win rate of each round, in order.
    round_correlations: [R] Spearman rho of reward vs usefulness of each rated round, in order
    (None when undefined); the latest is replaced by the one from ``item_reward_scores``. The
    hacking alarm fires on a fall from the first (``correlation_fall``); empty: the latest round is
    its own reference, so the correlation alone raises no alarm.
    usefulness_choice: the latest round's usefulness estimate chosen by ``ppi.choose_estimate``
    (human-only or prediction-powered); its interval decides the usefulness criterion, whose
    detail names it. None: the bootstrap mean of ``usefulness``.
    finished: the run has ended, so the advice is which checkpoint to keep, never to train on.
    summary: ``usefulness_summary(usefulness, usefulness_prompt_ids, confidence=config.confidence,
    n_boot=n_boot, seed=seed)`` computed already (the stored panel figures): the panel then runs no
    bootstrap. None: computed here.
    """
    cfg = config or StoppingConfig()
    criteria = []

    gain, plateaued = reward_plateau(
        eval_rewards, window=cfg.plateau_window, min_gain=cfg.plateau_min_gain
    )
    criteria.append(
        Criterion(
            "reward_plateau", "Reward plateau", gain, None if gain is None else plateaued,
            f"mean gain {_fmt(gain, 4)} per evaluation over the last {cfg.plateau_window} "
            f"(needs < {cfg.plateau_min_gain})",
        )
    )  # fmt: skip

    ratings = np.asarray(usefulness, dtype=float).reshape(-1)
    prompts = np.asarray(usefulness_prompt_ids).reshape(-1)
    if summary is None:
        summary = usefulness_summary(
            ratings, prompts, confidence=cfg.confidence, n_boot=n_boot, seed=seed
        )
    per_item = np.unique(prompts, return_counts=True)[1] if prompts.size else np.array([0])
    min_reviewers = int(per_item.min())
    used = summary.mean if usefulness_choice is None else usefulness_choice.interval
    mean = used.estimate
    source = {"ppi": "prediction-powered ", "human": "human-only "}.get(
        getattr(usefulness_choice, "source", ""), ""
    )
    if ratings.size == 0:
        useful_detail = (
            f"no human rating yet, so no human interval (needs a mean of at least "
            f"{cfg.usefulness_min} with {cfg.reviewers_min} reviewers per item)"
        )
    else:
        useful_detail = (
            f"{source}{_fmt(mean, 2)} [{_fmt(used.low, 2)}, {_fmt(used.high, 2)}] "
            f"(needs >= {cfg.usefulness_min}); at least {min_reviewers} "
            f"{'reviewer' if min_reviewers == 1 else 'reviewers'} per item "
            f"(needs {cfg.reviewers_min}); {_fmt(summary.share_low * 100, 0)}% rated 2 or lower"
        )
    criteria.append(
        Criterion(
            "human_usefulness", "Human usefulness", None if ratings.size == 0 else mean,
            None if ratings.size == 0
            else bool(mean >= cfg.usefulness_min and min_reviewers >= cfg.reviewers_min),
            useful_detail,
        )
    )  # fmt: skip

    kl_mean, kl_std, stable = kl_stability(
        kl_values, window=cfg.kl_window, max_std=cfg.kl_max_std, band=cfg.kl_band
    )
    criteria.append(
        Criterion(
            "kl_stable", "KL stable", kl_std, None if kl_std is None else stable,
            f"std {_fmt(kl_std, 4)} (needs < {cfg.kl_max_std}), mean {_fmt(kl_mean)} "
            f"(needs {cfg.kl_band[0]}-{cfg.kl_band[1]}) over the last {cfg.kl_window} values",
        )
    )  # fmt: skip

    corr = reward_human_correlation(
        item_reward_scores, item_usefulness, minimum=cfg.correlation_min
    )
    # The alarm is a fall of rho from the first rated round's, not its level: a reward model
    # that disagrees with people from the start is a calibration problem (correlation_fall).
    rhos = [*list(round_correlations)[:-1], corr.rho] if len(round_correlations) else [corr.rho]
    fall = correlation_fall(rhos, minimum=cfg.correlation_min, drop=cfg.correlation_drop)
    trend = hacking_trend(round_rewards, round_win_rates)
    undecided = fall.alarm is None and not trend.red
    hacking_ok = None if undecided else not (bool(fall.alarm) or trend.red)
    start = "" if fall.reference is None else f" (first rated round {fall.reference:.2f})"
    calibration = (
        "; the reward model disagrees with people from the first rated round: a calibration "
        "problem, not counted as hacking"
        if fall.calibration
        else ""
    )
    criteria.append(
        Criterion(
            "no_hacking", "No reward-hacking alarm", None if math.isnan(corr.rho) else corr.rho,
            hacking_ok,
            f"Spearman reward vs usefulness {_fmt(corr.rho, 2)} on {corr.n} items{start} "
            f"(alarm on a fall of {cfg.correlation_drop} from the first round, or under "
            f"{cfg.correlation_min} after a start above it){calibration}; reward slope "
            f"{_fmt(trend.reward_slope, 4)}, win-rate slope {_fmt(trend.win_rate_slope, 4)} per "
            "round",
        )
    )  # fmt: skip

    advice = _advice(criteria, trend, finished=finished)
    extras = {
        "usefulness": summary,
        "usefulness_choice": usefulness_choice,
        "correlation": corr,
        "correlation_fall": fall,
        "trend": trend,
        "kl_mean": kl_mean,
    }
    return StoppingPanel(criteria, trend.red, advice, extras)
