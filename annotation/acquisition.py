"""Active preference collection: acquisition scores from a reward-model ensemble, the labelling
queue re-ranked by them, and fewer humans where models agree. Pure NumPy, no Django.

Design. Active preference learning (Muldrew, Hayes, Zhang and Barber, "Active Preference Learning
for Large Language Models", ICML 2024, PMLR 235:36577-36590) labels in rounds, retrains between
rounds, and picks the next pairs by an acquisition function (theirs: the language model's predictive
entropy and the certainty of DPO's implicit preference model, against a random baseline). Here the
model is an ensemble of M reward models (different seeds or bootstrap samples) that score both
responses of N open comparisons. Under Bradley-Terry, member m predicts
P(A > B) = sigmoid(r_A,m - r_B,m). From the [M, N] rewards:

- ``preference``: the ensemble's P(A > B), the mean over members of their sigmoids (the mixture of
  the members' Bradley-Terry predictions, not the sigmoid of the mean difference).
- ``disagreement``: the standard deviation over members of r_A - r_B (population, ddof 0), in
  reward units: epistemic uncertainty (query by committee), high where the members learnt
  different things.
- ``closeness``: 1 - 2 |p - 0.5|, in [0, 1]; 1 when the ensemble predicts a coin flip. It ranks
  comparisons exactly as the binary entropy H(p) does (both fall with |p - 0.5|), without logs.
- ``judge_disagreement``: |p - p_judge| where a trusted judge gave a probability, NaN where not.

``acquisition_scores`` turns those into one score per comparison by a named strategy or a weighted
mix; ``rerank_queue`` orders the open comparisons: the exploration share at random (seeded), the
rest by score, the two interleaved evenly, rare clusters up-weighted and every batch holding at
least ``min_clusters`` clusters (the rules of ``annotation.clustering.balanced_batches``, applied to
an ordering in which every comparison appears once instead of a resampled epoch).
``reduced_overlap`` lowers the number of humans per comparison where the ensemble and a trusted
judge agree with high confidence (off by default, never below one human).

Everything is vectorised (sorts, cumulative sums, bincounts; Python loops run over clusters or over
the few batches that need a swap, never over comparisons): scoring and re-ranking 1,000,000
comparisons takes about a second (``bench/bench_acquisition.py``, figures in ``bench/README.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np

from annotation.clustering import _validate_batch_args, cluster_draw_shares

STRATEGIES: tuple[str, ...] = ("disagreement", "uncertainty", "judge_disagreement", "random")
DEFAULT_EXPLORATION = 0.2
# Candidates a short chunk examines for a swap before the re-ranking deals the batches instead.
MAX_SWAP_TRIES = 1_000


# --- Scores ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EnsembleScores:
    """Per-comparison figures from the ensemble, all float64 [N].

    ``preference``: P(A > B) in [0, 1]. ``disagreement``: std over members of r_A - r_B (>= 0,
    reward units). ``closeness``: 1 - 2 |p - 0.5| in [0, 1]. ``judge_disagreement``: |p - p_judge|
    in [0, 1], NaN where no judge probability was given.
    """

    preference: np.ndarray
    disagreement: np.ndarray
    closeness: np.ndarray
    judge_disagreement: np.ndarray


def _rewards(name: str, value: np.ndarray) -> np.ndarray:
    array = np.asarray(value, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] == 0:
        raise ValueError(f"{name} must be an [M, N] array with M >= 1 members, got {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"{name} must be finite (no NaN or infinity)")
    return array


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # sigmoid(x) = (1 + tanh(x / 2)) / 2: one pass, no overflow for large |x|.
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def preference_probability(*, rewards_a: np.ndarray, rewards_b: np.ndarray) -> np.ndarray:
    """float64 [N]: P(A > B) = (1/M) sum_m sigmoid(r_A[m, n] - r_B[m, n]) (Bradley-Terry, averaged
    over members). ``rewards_a``, ``rewards_b``: [M, N] rewards of response A and B."""
    a, b = _paired(rewards_a, rewards_b)
    return _sigmoid(a - b).mean(axis=0)


def reward_disagreement(*, rewards_a: np.ndarray, rewards_b: np.ndarray) -> np.ndarray:
    """float64 [N]: std over the M members (ddof 0) of r_A[m, n] - r_B[m, n], in reward units.
    ``rewards_a``, ``rewards_b``: [M, N]. One member gives zeros."""
    a, b = _paired(rewards_a, rewards_b)
    return _member_std(a - b)


def closeness_to_half(*, preference: np.ndarray) -> np.ndarray:
    """float64 [N]: 1 - 2 |p - 0.5|: 1 at p = 0.5, 0 at p = 0 or 1. ``preference``: P(A > B) [N]."""
    p = np.asarray(preference, dtype=np.float64)
    if p.ndim != 1 or ((p < 0) | (p > 1)).any() or np.isnan(p).any():
        raise ValueError("preference must be a [N] array of probabilities in [0, 1]")
    return 1.0 - 2.0 * np.abs(p - 0.5)


def judge_disagreement(*, preference: np.ndarray, judge_preference: np.ndarray) -> np.ndarray:
    """float64 [N]: |p - p_judge|, NaN where ``judge_preference`` is NaN (no judge verdict).
    ``preference``, ``judge_preference``: P(A > B) [N] from the ensemble and from the judge."""
    p = np.asarray(preference, dtype=np.float64)
    judge = np.asarray(judge_preference, dtype=np.float64)
    if judge.shape != p.shape:
        raise ValueError(
            f"judge_preference has shape {judge.shape}, the preferences have shape {p.shape}"
        )
    given = judge[~np.isnan(judge)]
    if ((given < 0) | (given > 1)).any():
        raise ValueError("judge_preference must be probabilities in [0, 1] (NaN where none)")
    return np.abs(p - judge)


def _member_std(diff: np.ndarray) -> np.ndarray:
    """[M, N] -> [N] std over members, shifted by member 0 first (the std is shift-invariant), so
    identical members give exactly 0 rather than rounding noise from the mean."""
    return (diff - diff[0]).std(axis=0)


def _paired(rewards_a: np.ndarray, rewards_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = _rewards("rewards_a", rewards_a)
    b = _rewards("rewards_b", rewards_b)
    if a.shape != b.shape:
        raise ValueError(f"rewards_a has shape {a.shape} but rewards_b has shape {b.shape}")
    return a, b


def ensemble_scores(
    *,
    rewards_a: np.ndarray,
    rewards_b: np.ndarray,
    judge_preference: np.ndarray | None = None,
) -> EnsembleScores:
    """All four figures at once. ``rewards_a``, ``rewards_b``: [M, N] member rewards of response A
    and B; ``judge_preference``: [N] a trusted judge's P(A > B), NaN where it gave none, or None
    (no judge: ``judge_disagreement`` all NaN)."""
    a, b = _paired(rewards_a, rewards_b)
    diff = a - b
    p = _sigmoid(diff).mean(axis=0)
    judge = np.full(p.shape, np.nan) if judge_preference is None else judge_preference
    return EnsembleScores(
        preference=p,
        disagreement=_member_std(diff),
        closeness=closeness_to_half(preference=p),
        judge_disagreement=judge_disagreement(preference=p, judge_preference=judge),
    )


def acquisition_scores(
    *,
    scores: EnsembleScores,
    strategy: str = "disagreement",
    weights: Mapping[str, float] | None = None,
    seed: int = 0,
) -> np.ndarray:
    """float64 [N]: how much labelling each comparison is worth now; higher first.

    ``strategy`` (used when ``weights`` is None):

    - "disagreement": the ensemble std of r_A - r_B (reward units).
    - "uncertainty": closeness of P(A > B) to 0.5, in [0, 1].
    - "judge_disagreement": |p - p_judge| in [0, 1]; 0 where no judge verdict (NaN), so judged
      comparisons the models dispute come first and unjudged ones after.
    - "random": uniform in [0, 1), seeded (the baseline of Muldrew et al.).

    ``weights``: a mix, e.g. {"disagreement": 1, "uncertainty": 0.5}: sum_k w_k * s_k, where
    disagreement is divided by its largest value over the N comparisons (so every s_k lies in
    [0, 1] and the weights compare like with like; all-zero stays zero) and a missing judge
    verdict counts 0. Weights must be finite and >= 0, with at least one positive.
    """
    n = len(scores.preference)
    if weights is None:
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
        if strategy == "disagreement":
            return scores.disagreement.astype(np.float64, copy=True)
        weights = {strategy: 1.0}
    unknown = sorted(set(weights) - set(STRATEGIES))
    if unknown:
        raise ValueError(f"weights names unknown strategies {unknown}; known: {STRATEGIES}")
    values = np.array([float(w) for w in weights.values()])
    if not np.isfinite(values).all() or (values < 0).any() or not (values > 0).any():
        raise ValueError(f"weights must be finite, >= 0 and not all zero, got {dict(weights)}")
    total = np.zeros(n)
    for name, weight in weights.items():
        if not weight:
            continue
        if name == "disagreement":
            top = scores.disagreement.max(initial=0.0)
            part = scores.disagreement / top if top > 0 else np.zeros(n)
        elif name == "uncertainty":
            part = scores.closeness
        elif name == "judge_disagreement":
            part = np.nan_to_num(scores.judge_disagreement, nan=0.0)
        else:
            part = np.random.default_rng(seed).random(n)
        total += float(weight) * part
    return total


# --- Queue re-ranking --------------------------------------------------------------------------------
@dataclass(frozen=True)
class RerankedQueue:
    """The outcome of ``rerank_queue``.

    ``order``: int64 [N], a permutation of 0..N-1, the first to label first; cut it into
    consecutive chunks of ``batch_size`` to get the batches. ``explored``: bool [N], indexed like
    the input, True for the comparisons placed at random (exactly round(exploration * N)).
    ``balancing``: how the batches got their clusters (see ``rerank_queue``): "kept" (the
    score order already had them), "swapped" (a few comparisons swapped places) or "dealt" (the
    batches were rebuilt around dealt representatives).
    """

    order: np.ndarray
    explored: np.ndarray
    balancing: Literal["kept", "swapped", "dealt"]


def rerank_queue(
    *,
    scores: np.ndarray,
    cluster_labels: np.ndarray,
    exploration: float = DEFAULT_EXPLORATION,
    batch_size: int = 8,
    min_clusters: int = 2,
    rare_fraction: float = 0.05,
    rare_weight: float = 3.0,
    seed: int = 0,
) -> RerankedQueue:
    """Order N open comparisons for labelling. ``scores``: float [N] acquisition scores (higher
    first); ``cluster_labels``: int [N] the cluster of each comparison's prompt.

    1. Exploration: round(exploration * N) comparisons (half up) are drawn at random (seeded) and
       kept in random order; the others are sorted by score (ties: lower index first). The two
       streams are interleaved evenly: the r-th of a stream of length L sits at time (r + 0.5) / L,
       so every stretch of the queue holds about the exploration share of random comparisons.
    2. Rare clusters (fewer than ``rare_fraction`` of the comparisons) are up-weighted as in
       ``cluster_draw_shares``: their times are divided by ``rare_weight``, so near the front of
       the queue they come ``rare_weight`` times as often per comparison as the others.
    3. Cluster balance: every chunk of ``batch_size`` holds at least ``min(min_clusters, clusters
       in the data, chunk length)`` distinct clusters, the rule of ``balanced_batches``:

       - "kept": the order of step 2 already does; it is returned as it is.
       - "swapped": few chunks fall short (at most 16, or 1 % of the chunks if more). Each,
         front to back, takes the nearest later comparison of a cluster it lacks whose chunk
         keeps its own clusters (an earlier one if no later one will do) and gives back its last
         comparison of a cluster it holds twice: a few comparisons move, the rest stay.
       - "dealt": more fall short (one cluster dominates), or no swap was found. The batches are
         rebuilt as ``balanced_batches`` builds them: each gets its representatives of distinct
         clusters dealt round-robin (clusters in order of their best comparison, at most one card
         per batch; a cluster with more comparisons than cards deals evenly spaced ones of its
         queue order, so batch b's card sits near b's place), the other places are filled in
         queue order, then the batches are sorted by their best comparison (a short last batch
         stays last) and each batch in queue order. Every batch gets its clusters whenever the
         data allow it (the sum over clusters of min(size, batches - 1) covers the
         representatives); when they do not, some batches get fewer.

    Deterministic for a seed.
    """
    _validate_batch_args(batch_size, min_clusters, rare_fraction, rare_weight)
    values = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(cluster_labels)
    if values.ndim != 1:
        raise ValueError(f"scores must be a [N] array, got shape {values.shape}")
    if labels.shape != values.shape:
        raise ValueError(
            f"cluster_labels has shape {labels.shape}, scores has shape {values.shape}"
        )
    if np.isnan(values).any():
        raise ValueError("scores must not contain NaN")
    if not 0.0 <= exploration <= 1.0:
        raise ValueError(f"exploration must be in [0, 1], got {exploration}")
    n = len(values)
    if n == 0:
        return RerankedQueue(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool), "kept")

    rng = np.random.default_rng(seed)
    n_explore = int(np.floor(exploration * n + 0.5))
    explored = np.zeros(n, dtype=bool)
    picked = rng.choice(n, size=n_explore, replace=False)  # in random order
    explored[picked] = True
    exploit = np.flatnonzero(~explored)
    exploit = exploit[np.argsort(-values[exploit], kind="stable")]
    time = np.empty(n)
    time[picked] = (np.arange(n_explore) + 0.5) / max(n_explore, 1)
    time[exploit] = (np.arange(len(exploit)) + 0.5) / max(len(exploit), 1)

    cluster_values, inverse, sizes = np.unique(labels, return_inverse=True, return_counts=True)
    shares = cluster_draw_shares(labels, rare_fraction=rare_fraction, rare_weight=rare_weight)
    per_item = np.array([shares[int(v)] for v in cluster_values]) / sizes
    time /= (per_item / per_item.max())[inverse]
    queue = np.lexsort((np.arange(n), time))  # queue[i]: the comparison at place i

    queue = queue.astype(np.int64)
    needed = _needed_per_chunk(n, batch_size, min_clusters, len(cluster_values))
    short = np.flatnonzero(_distinct_per_chunk(inverse[queue], batch_size) < needed)
    if len(short) == 0:
        return RerankedQueue(queue, explored, "kept")
    if len(short) <= max(16, len(needed) // 100):
        swapped = _swap_in_clusters(queue, inverse, short, needed, batch_size)
        if swapped is not None:
            return RerankedQueue(swapped, explored, "swapped")
    order = _deal_batches(queue, inverse, sizes, batch_size, min_clusters)
    return RerankedQueue(order, explored, "dealt")


def _needed_per_chunk(n: int, batch_size: int, min_clusters: int, n_clusters: int) -> np.ndarray:
    """int64 [chunks]: the distinct clusters each consecutive chunk of ``batch_size`` must hold."""
    lengths = np.full(-(-n // batch_size), batch_size)
    lengths[-1] = n - batch_size * (len(lengths) - 1)
    return np.minimum(lengths, min(min_clusters, n_clusters))


def _distinct_per_chunk(clusters_in_order: np.ndarray, batch_size: int) -> np.ndarray:
    """int64 [chunks]: distinct values in each consecutive chunk of ``batch_size``."""
    n = len(clusters_in_order)
    chunk = np.arange(n) // batch_size
    key = np.lexsort((clusters_in_order, chunk))
    c, k = chunk[key], clusters_in_order[key]
    first = np.ones(n, dtype=bool)
    first[1:] = (c[1:] != c[:-1]) | (k[1:] != k[:-1])
    return np.bincount(c[first], minlength=-(-n // batch_size))


def _swap_in_clusters(
    queue: np.ndarray,
    inverse: np.ndarray,
    short: np.ndarray,
    needed: np.ndarray,
    batch_size: int,
) -> np.ndarray | None:
    """``queue`` with the ``short`` chunks mended by swaps (see ``rerank_queue``), or None when a
    chunk finds no partner. A Python loop over the few short chunks, NumPy within each."""
    order = queue.copy()
    clusters = inverse[order]
    n = len(order)
    for chunk in short.tolist():
        start, stop = chunk * batch_size, min(n, (chunk + 1) * batch_size)
        while True:
            present, counts = np.unique(clusters[start:stop], return_counts=True)
            if len(present) >= needed[chunk]:
                break
            give = start + int(
                np.flatnonzero(np.isin(clusters[start:stop], present[counts > 1]))[-1]
            )
            take = _swap_partner(clusters, present, clusters[give], needed, batch_size, start, stop)
            if take is None:
                return None
            order[[give, take]] = order[[take, give]]
            clusters[[give, take]] = clusters[[take, give]]
    return order


def _swap_partner(
    clusters: np.ndarray,
    present: np.ndarray,
    given: int,
    needed: np.ndarray,
    batch_size: int,
    start: int,
    stop: int,
) -> int | None:
    """The place nearest after ``stop`` (else before ``start``) whose cluster is not in
    ``present`` and whose chunk still holds its clusters after taking one of cluster ``given``."""
    n = len(clusters)
    tried = 0
    for low, high, step in ((stop, n, 1), (start - 1, -1, -1)):
        window = 4 * batch_size
        seen = low
        while seen != high:
            edge = min(seen + window, high) if step > 0 else max(seen - window, high)
            places = np.arange(seen, edge, step)
            for place in places[~np.isin(clusters[places], present)].tolist():
                chunk = place // batch_size
                members = clusters[chunk * batch_size : min(n, (chunk + 1) * batch_size)].copy()
                members[place - chunk * batch_size] = given
                if len(np.unique(members)) >= needed[chunk]:
                    return place
                tried += 1
                if tried > MAX_SWAP_TRIES:  # a crowded queue: dealing is the better tool
                    return None
            seen, window = edge, window * 2
    return None


def _deal_batches(
    queue: np.ndarray,
    inverse: np.ndarray,
    sizes: np.ndarray,
    batch_size: int,
    min_clusters: int,
) -> np.ndarray:
    """Rebuild the batches of ``queue`` (comparisons, best first) so each holds its clusters.

    The vectorised form of ``balanced_batches``' dealing: slot s of column j goes to the j-th
    batch with room for a (j+1)-th representative; a cluster deals consecutive slots, at most one
    column's length, so its cards land in distinct batches.
    """
    n = len(queue)
    needed = _needed_per_chunk(n, batch_size, min_clusters, len(sizes))
    n_batches = len(needed)
    lengths = np.full(n_batches, batch_size)
    lengths[-1] = n - batch_size * (n_batches - 1)
    place = np.empty(n, dtype=np.int64)
    place[queue] = np.arange(n)

    # Slots: column j lists, in order, the batches that need a (j+1)-th cluster.
    columns = [np.flatnonzero(needed > j) for j in range(int(needed.max()))]
    slot_batch = np.concatenate(columns)
    column_length = min(len(c) for c in columns)

    # Each cluster's comparisons, best first; clusters deal in order of their best comparison.
    by_cluster = np.lexsort((place, inverse))
    group_start = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    cluster_order = np.argsort(place[by_cluster[group_start]], kind="stable")
    deals = np.minimum(sizes, column_length)[cluster_order]
    deal_start = np.concatenate(([0], np.cumsum(deals)[:-1]))
    deals = np.clip(len(slot_batch) - deal_start, 0, deals)  # the slots run out: deal fewer
    card_cluster = np.repeat(cluster_order, deals)
    card_slot = np.arange(len(card_cluster)) + np.repeat(
        deal_start - np.cumsum(deals) + deals, deals
    )
    card_batch = slot_batch[card_slot]
    # A cluster's cards, taken in batch order, are its comparisons at evenly spaced ranks (all of
    # them when it deals them all): batch b gets one near its place in the queue, not the
    # cluster's b-th best, so a large cluster's best comparisons are not spread over the queue.
    dealt = np.zeros(len(sizes), dtype=np.int64)
    dealt[cluster_order] = deals
    by_batch = np.lexsort((card_batch, card_cluster))
    card_cluster, card_batch = card_cluster[by_batch], card_batch[by_batch]
    card_index = np.arange(len(card_cluster)) - np.repeat(
        np.concatenate(([0], np.cumsum(dealt)[:-1])), dealt
    )
    rank = card_index * sizes[card_cluster] // dealt[card_cluster]
    reps = by_cluster[group_start[card_cluster] + rank]
    is_rep = np.zeros(n, dtype=bool)
    is_rep[reps] = True

    batch = np.empty(n, dtype=np.int64)
    batch[reps] = card_batch
    room = lengths - np.bincount(batch[reps], minlength=n_batches)
    rest = queue[~is_rep[queue]]  # the others, in queue order
    batch[rest] = np.repeat(np.arange(n_batches), room)

    best = np.full(n_batches, n)
    np.minimum.at(best, batch, place)
    short_last = np.zeros(n_batches, dtype=bool)
    short_last[-1] = lengths[-1] < batch_size
    batch_rank = np.empty(n_batches, dtype=np.int64)
    batch_rank[np.lexsort((best, short_last))] = np.arange(n_batches)
    return np.lexsort((place, batch_rank[batch])).astype(np.int64)


# --- Overlap -----------------------------------------------------------------------------------------
def reduced_overlap(
    *,
    preference: np.ndarray,
    judge_preference: np.ndarray,
    overlap: int,
    enabled: bool = False,
    confidence: float = 0.9,
    reduced_to: int = 1,
) -> np.ndarray:
    """int64 [N]: how many humans should label each comparison.

    ``preference``: the ensemble's P(A > B) [N]; ``judge_preference``: a trusted judge's P(A > B)
    [N], NaN where it gave none; ``overlap``: the project's k. Off (``enabled`` False, the default):
    k everywhere. On: ``min(k, reduced_to)`` where the ensemble and the judge pick the same side and
    both are at least ``confidence`` sure of it (max(p, 1 - p) >= confidence), k elsewhere; a
    comparison with no judge verdict keeps k. Never below 1: ``reduced_to`` must be >= 1.
    """
    if isinstance(overlap, bool) or int(overlap) != overlap or overlap < 1:
        raise ValueError(f"overlap must be a whole number >= 1, got {overlap}")
    if isinstance(reduced_to, bool) or int(reduced_to) != reduced_to or reduced_to < 1:
        raise ValueError(f"reduced_to must be a whole number >= 1 (one human), got {reduced_to}")
    if not 0.5 < confidence <= 1.0:
        raise ValueError(f"confidence must be in (0.5, 1], got {confidence}")
    p = np.asarray(preference, dtype=np.float64)
    if p.ndim != 1 or np.isnan(p).any() or ((p < 0) | (p > 1)).any():
        raise ValueError("preference must be a [N] array of probabilities in [0, 1]")
    judge = np.asarray(judge_preference, dtype=np.float64)
    if judge.shape != p.shape:
        raise ValueError(
            f"judge_preference has shape {judge.shape}, preference has shape {p.shape}"
        )
    result = np.full(p.shape, int(overlap), dtype=np.int64)
    if not enabled:
        return result
    with np.errstate(invalid="ignore"):
        same_side = ((p > 0.5) & (judge > 0.5)) | ((p < 0.5) & (judge < 0.5))
        sure = (np.maximum(p, 1 - p) >= confidence) & (np.maximum(judge, 1 - judge) >= confidence)
    result[same_side & sure] = min(int(overlap), int(reduced_to))
    return result
