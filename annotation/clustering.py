"""Prompt clustering and cluster-balanced batches: pure NumPy / scikit-learn, no Django.

Everything here takes arrays and returns arrays or dataclasses, so the web app, the training recipes
and the human-eval code can all use it:

- ``cluster_embeddings``: KMeans (MiniBatchKMeans for large inputs) on L2-normalised sentence
  embeddings, with ``k`` given or chosen by the silhouette score over a range.
- ``cluster_top_terms``: class-based TF-IDF (c-TF-IDF, as in BERTopic) top terms per cluster.
- ``central_members``: the members closest to each cluster's centroid (cosine).
- ``project_2d``: a PCA projection for the clusters page.
- ``balanced_batches``: one epoch of batches, each mixing clusters, rare clusters up-weighted.
- ``ClusterBalancedBatchSampler``: the same as a ``batch_sampler`` for a training DataLoader.
- ``stratified_sample``: a sample that keeps the clusters' shares (held-out human-eval prompts).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

# scikit-learn is imported inside the functions that use it: this module is imported when Django
# starts (through the clustering service), and scikit-learn with what it pulls in (SciPy, pandas,
# pyarrow) is about 200 MB of every web and worker process that never clusters.

# Above this many points KMeans is replaced by MiniBatchKMeans (full KMeans is O(n k d) per iteration
# over all points; mini-batches keep a 100k-prompt project to seconds).
MINIBATCH_THRESHOLD = 20_000
# The silhouette score is O(n^2): score a random sample of this many points.
SILHOUETTE_SAMPLE = 3_000
# Up to this many points KMeans restarts 10 times (3 above).
SMALL_INPUT = 1_000
DEFAULT_K_RANGE = (2, 12)
# c-TF-IDF terms: words of two or more characters that start with a letter (no bare numbers), not
# the tail of a contraction ("I've" gives no "ve"); the heads of negative contractions are stop words.
WORD_PATTERN = r"(?u)(?<!['\u2019])\b[a-zA-Z][\w-]+\b"
CONTRACTION_HEADS = frozenset(
    {"ain", "aren", "can", "couldn", "didn", "doesn", "don", "hadn", "hasn", "haven", "isn"}
    | {"mustn", "needn", "shan", "shouldn", "wasn", "weren", "won", "wouldn"}
)


# --- Clustering --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClusteringResult:
    """The outcome of ``cluster_embeddings``.

    ``labels``: int64 [n], values 0..k-1, cluster 0 the largest (ties by first member).
    ``centroids``: float32 [k, d], unit length, in label order.
    ``silhouette``: the score of the chosen k (cosine), None when it is undefined (k < 2 or k >= n).
    ``silhouette_by_k``: every k tried by the search and its score on the search sample (empty
    when k was given).
    """

    labels: np.ndarray
    centroids: np.ndarray
    k: int
    silhouette: float | None
    silhouette_by_k: dict[int, float] = field(default_factory=dict)

    @property
    def sizes(self) -> np.ndarray:
        """int64 [k]: members per cluster."""
        return np.bincount(self.labels, minlength=self.k)


def normalise_rows(vectors: np.ndarray) -> np.ndarray:
    """float32 [n, d] -> the same rows scaled to unit L2 length (zero rows stay zero)."""
    matrix = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)


def _fit_kmeans(
    points: np.ndarray, k: int, *, seed: int, minibatch_threshold: int
) -> tuple[np.ndarray, np.ndarray]:
    if len(points) > minibatch_threshold:
        from sklearn.cluster import MiniBatchKMeans

        model = MiniBatchKMeans(
            n_clusters=k, random_state=seed, n_init=3, batch_size=4096, max_no_improvement=20
        )
    else:
        # Restarts are cheap on small inputs and make the fit (and the silhouette search) stable:
        # with 3-4 restarts the 72 demo prompts' search swings between k = 2 and k = 11.
        restarts = 10 if len(points) <= SMALL_INPUT else 3
        from sklearn.cluster import KMeans

        model = KMeans(n_clusters=k, random_state=seed, n_init=restarts)
    labels = model.fit_predict(points)
    return labels.astype(np.int64), model.cluster_centers_.astype(np.float32)


def _silhouette_by_k(
    points: np.ndarray, candidates: range, *, seed: int, minibatch_threshold: int
) -> dict[int, float]:
    """The cosine silhouette of a KMeans fit for each candidate k, on a random sample of at most
    SILHOUETTE_SAMPLE points: the search costs the same for 5,000 or 500,000 prompts, and only the
    chosen k is then fitted on everything."""
    if len(points) > SILHOUETTE_SAMPLE:
        rng = np.random.default_rng(seed)
        points = points[np.sort(rng.choice(len(points), SILHOUETTE_SAMPLE, replace=False))]
    scores: dict[int, float] = {}
    for candidate in candidates:
        labels, _ = _fit_kmeans(
            points, candidate, seed=seed, minibatch_threshold=minibatch_threshold
        )
        score = _silhouette(points, labels, seed=seed)
        if score is not None:
            scores[candidate] = score
    return scores


def _silhouette(points: np.ndarray, labels: np.ndarray, *, seed: int) -> float | None:
    n_labels = len(np.unique(labels))
    if n_labels < 2 or n_labels >= len(points):
        return None
    from sklearn.metrics import silhouette_score

    sample = min(len(points), SILHOUETTE_SAMPLE)
    return float(
        silhouette_score(points, labels, metric="cosine", sample_size=sample, random_state=seed)
    )


def _relabel_by_size(labels: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Renumber clusters so 0 is the largest (ties: the one whose first member comes first)."""
    k = len(centroids)
    sizes = np.bincount(labels, minlength=k)
    first = np.full(k, len(labels))
    for label in range(k):
        members = np.flatnonzero(labels == label)
        if len(members):
            first[label] = members[0]
    order = np.lexsort((first, -sizes))  # new label i is old label order[i]
    new_of_old = np.empty(k, dtype=np.int64)
    new_of_old[order] = np.arange(k)
    return new_of_old[labels], centroids[order]


def cluster_embeddings(
    embeddings: np.ndarray,
    *,
    k: int | None = None,
    k_range: tuple[int, int] = DEFAULT_K_RANGE,
    seed: int = 0,
    minibatch_threshold: int = MINIBATCH_THRESHOLD,
) -> ClusteringResult:
    """Cluster sentence embeddings with KMeans on the unit sphere (cosine geometry).

    ``embeddings``: float [n, d]; rows are L2-normalised first, so Euclidean KMeans approximates
    cosine (spherical) KMeans. ``k``: the number of clusters, or None to try every k in
    ``k_range`` (inclusive) and keep the best cosine silhouette score (the search runs on a
    sample of at most SILHOUETTE_SAMPLE points; the chosen k is then fitted on all). It stops at
    ``floor(sqrt(n))`` (clusters of about sqrt(n) members or more; the silhouette of many tiny
    clusters is noise) and at n - 1. Fewer than 3 points form one cluster. Deterministic for a seed.
    """
    points = normalise_rows(embeddings)
    if points.ndim != 2 or len(points) == 0:
        raise ValueError(f"embeddings must be a non-empty [n, d] array, got shape {points.shape}")
    n = len(points)
    if k is not None and not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and the number of points ({n}), got {k}")
    low, high = k_range
    if k is None and not 2 <= low <= high:
        raise ValueError(f"k_range must be (low, high) with 2 <= low <= high, got {k_range}")

    scores: dict[int, float] = {}
    if k is None:
        candidates = range(low, min(high, n - 1, max(low, math.isqrt(n))) + 1)
        scores = _silhouette_by_k(
            points, candidates, seed=seed, minibatch_threshold=minibatch_threshold
        )
        # The best score; ties go to the smaller k. Too few points to compare: one cluster.
        k = max(scores, key=lambda c: (scores[c], -c)) if scores else 1
    if k == 1:
        centroid = normalise_rows(points.mean(axis=0, keepdims=True))
        return ClusteringResult(np.zeros(n, dtype=np.int64), centroid, 1, None, scores)
    labels, centroids = _fit_kmeans(points, k, seed=seed, minibatch_threshold=minibatch_threshold)
    labels, centroids = _relabel_by_size(labels, centroids)
    return ClusteringResult(
        labels=labels,
        centroids=normalise_rows(centroids),
        k=k,
        silhouette=_silhouette(points, labels, seed=seed),
        silhouette_by_k=scores,
    )


def central_members(
    embeddings: np.ndarray, labels: np.ndarray, centroids: np.ndarray, *, n: int = 3
) -> dict[int, list[int]]:
    """The ``n`` members of each cluster closest to its centroid by cosine similarity.

    ``embeddings``: [N, d]; ``labels``: int [N]; ``centroids``: [k, d]. Returns {label: [index into
    embeddings, most central first]} for every label 0..k-1 (an empty list for an empty cluster).
    """
    points = normalise_rows(embeddings)
    centres = normalise_rows(centroids)
    labels = np.asarray(labels)
    result: dict[int, list[int]] = {}
    for label in range(len(centres)):
        members = np.flatnonzero(labels == label)
        similarity = points[members] @ centres[label]
        order = np.lexsort((members, -similarity))[:n]  # ties: lower index first
        result[label] = [int(i) for i in members[order]]
    return result


def cluster_top_terms(
    texts: Sequence[str],
    labels: np.ndarray,
    *,
    n_terms: int = 8,
    stop_words: str | None = "english",
) -> dict[int, list[str]]:
    """Class-based TF-IDF (Grootendorst 2022, BERTopic): the words that set each cluster apart.

    All texts of a cluster form one document. For term t and cluster c:
    ``tf(t, c) = count(t, c) / words(c)`` and ``idf(t) = log(1 + A / f(t))``, where A is the mean
    number of words per cluster and f(t) the count of t over all clusters. Returns {label: the
    ``n_terms`` best terms, best first} for each label present (ties broken alphabetically).
    ``stop_words``: "english" (scikit-learn's list and contraction heads such as "don") or None.
    """
    labels = np.asarray(labels)
    if len(texts) != len(labels):
        raise ValueError(f"{len(texts)} texts but {len(labels)} labels")
    present = sorted(int(label) for label in np.unique(labels))
    if not present:
        return {}
    documents = [
        " ".join(text for text, lab in zip(texts, labels, strict=True) if lab == label)
        for label in present
    ]
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, CountVectorizer

    stop = sorted(ENGLISH_STOP_WORDS | CONTRACTION_HEADS) if stop_words == "english" else None
    vectorizer = CountVectorizer(stop_words=stop, token_pattern=WORD_PATTERN)
    try:
        counts = vectorizer.fit_transform(documents).toarray().astype(np.float64)
    except ValueError:  # nothing but stop words
        return {label: [] for label in present}
    vocabulary = vectorizer.get_feature_names_out()
    words_per_class = counts.sum(axis=1, keepdims=True)
    tf = counts / np.where(words_per_class == 0, 1.0, words_per_class)
    idf = np.log(1.0 + words_per_class.mean() / counts.sum(axis=0))
    scores = tf * idf
    result: dict[int, list[str]] = {}
    for row, label in enumerate(present):
        order = np.lexsort((vocabulary, -scores[row]))
        result[label] = [str(vocabulary[i]) for i in order[:n_terms] if counts[row, i] > 0]
    return result


def project_2d(embeddings: np.ndarray, *, seed: int = 0) -> np.ndarray:
    """float32 [n, 2]: the first two principal components of the unit-normalised embeddings.

    Fewer than 2 points (or a rank-0 input) gives zeros for the missing components.
    """
    points = normalise_rows(embeddings)
    n, d = points.shape
    out = np.zeros((n, 2), dtype=np.float32)
    n_components = min(2, n, d)
    if n_components == 0 or n < 2:
        return out
    from sklearn.decomposition import PCA

    out[:, :n_components] = PCA(n_components=n_components, random_state=seed).fit_transform(points)
    return out


# --- Balanced batches --------------------------------------------------------------------------------
def _validate_batch_args(
    batch_size: int, min_clusters: int, rare_fraction: float, rare_weight: float
) -> None:
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if min_clusters < 1:
        raise ValueError(f"min_clusters must be at least 1, got {min_clusters}")
    if not 0.0 <= rare_fraction <= 1.0:
        raise ValueError(f"rare_fraction must be in [0, 1], got {rare_fraction}")
    if not rare_weight > 0.0:
        raise ValueError(f"rare_weight must be positive, got {rare_weight}")


def cluster_draw_shares(
    cluster_labels: Sequence[int] | np.ndarray,
    *,
    rare_fraction: float = 0.05,
    rare_weight: float = 3.0,
) -> dict[int, float]:
    """The share of draws each cluster should get: sizes weighted, rare clusters ``rare_weight``x.

    A cluster is rare when it holds fewer than ``rare_fraction`` of the items. Each item of a rare
    cluster weighs ``rare_weight``, every other item 1; a cluster's share is its weight over the
    total. Example: sizes 90 and 4 (4/94 < 5%), weight 3: shares 90/102 and 12/102.
    """
    labels = np.asarray(cluster_labels)
    values, sizes = np.unique(labels, return_counts=True)
    if len(labels) == 0:
        return {}
    weights = np.where(sizes < rare_fraction * len(labels), rare_weight, 1.0) * sizes
    return {int(v): float(w / weights.sum()) for v, w in zip(values, weights, strict=True)}


def _systematic_round(expected: np.ndarray, total: int, rng: np.random.Generator) -> np.ndarray:
    """Integer counts summing to ``total``, each floor or ceil of ``expected``, in expectation equal
    to it (systematic sampling with one random offset). ``expected`` must sum to ``total``."""
    # Rounded so that whole-number expectations (rare_weight 1) give exactly those counts.
    edges = np.round(np.concatenate(([0.0], np.cumsum(expected))), 9)
    edges[-1] = total
    offset = rng.random()
    # The points offset, offset + 1, ..., offset + total - 1: how many lie below each edge.
    reached = np.clip(np.ceil(edges - offset).astype(np.int64), 0, total)
    return np.diff(reached)


def _make_mixable(quota: np.ndarray, n_batches: int, needed: int) -> np.ndarray:
    """Move draws from the fullest clusters to others until every batch can hold ``needed``
    distinct clusters: a cluster adds at most one distinct member per batch, so we need
    ``sum(min(quota, n_batches)) >= needed * n_batches``."""
    quota = quota.copy()
    while np.minimum(quota, n_batches).sum() < needed * n_batches:
        donor = int(
            np.argmax(quota)
        )  # has more than n_batches draws, or the sum could not fall short
        short = np.flatnonzero(quota < n_batches)
        taker = int(short[np.argmax(quota[short])])  # the cluster nearest to one per batch
        moved = min(quota[donor] - n_batches, n_batches - quota[taker])
        quota[donor] -= moved
        quota[taker] += moved
    return quota


def balanced_batches(
    cluster_labels: Sequence[int] | np.ndarray,
    batch_size: int,
    *,
    min_clusters: int = 2,
    rare_fraction: float = 0.05,
    rare_weight: float = 3.0,
    seed: int = 0,
) -> list[list[int]]:
    """One epoch of cluster-balanced batches of indices into ``cluster_labels``.

    ``cluster_labels``: int [n], any label values (e.g. Prompt.cluster of each comparison's prompt).
    Returns ``ceil(n / batch_size)`` batches holding n draws in all; batch sizes differ by at most one
    (so none is a lone leftover). The rules:

    1. Rare clusters (fewer than ``rare_fraction`` of the items) are drawn ``rare_weight`` times as
       often per item as the others: cluster c gets ``n * share(c)`` draws (see
       ``cluster_draw_shares``), rounded up or down at random so the expectation is exact. Within a
       cluster, members are drawn in shuffled rounds: no member repeats before all were drawn.
    2. Every batch holds at least ``min(min_clusters, clusters in the data, batch size)`` distinct
       clusters. Where the shares alone cannot give that (one cluster at 99%), just enough draws
       move from the largest cluster to the others: the mixing rule wins over the shares.
    3. The same inputs and seed give the same batches; another seed, another epoch.
    """
    _validate_batch_args(batch_size, min_clusters, rare_fraction, rare_weight)
    labels = np.asarray(cluster_labels)
    n = len(labels)
    if n == 0:
        return []
    rng = np.random.default_rng(seed)
    values, inverse = np.unique(labels, return_inverse=True)
    shares = cluster_draw_shares(labels, rare_fraction=rare_fraction, rare_weight=rare_weight)
    expected = np.array([shares[int(v)] for v in values]) * n
    quota = _systematic_round(expected, n, rng)

    n_batches = math.ceil(n / batch_size)
    sizes = np.full(n_batches, n // n_batches)
    sizes[: n % n_batches] += 1
    needed = min(min_clusters, len(values), int(sizes.min()))
    quota = _make_mixable(quota, n_batches, needed)

    # Draws per cluster: shuffled rounds over the members, so repeats are spread evenly.
    draws: list[np.ndarray] = []
    for cluster, count in enumerate(quota):
        members = np.flatnonzero(inverse == cluster)
        rounds = -(-int(count) // len(members))
        picked = np.concatenate([rng.permutation(members) for _ in range(rounds)] or [members[:0]])
        draws.append(picked[:count])

    # Representatives: deal `needed` per batch round-robin, one cluster after another. A cluster
    # deals at most n_batches consecutive cards, so they land in distinct batches.
    batches: list[list[int]] = [[] for _ in range(n_batches)]
    rest: list[np.ndarray] = []
    slot = 0
    for cluster in rng.permutation(len(values)):
        pool = draws[cluster]
        dealt = min(len(pool), n_batches, needed * n_batches - slot)
        for item in pool[:dealt]:
            batches[slot % n_batches].append(int(item))
            slot += 1
        rest.append(pool[dealt:])
    # The other draws fill the remaining room at random.
    leftovers = rng.permutation(np.concatenate(rest)) if rest else np.array([], dtype=np.int64)
    cursor = 0
    for batch, size in zip(batches, sizes, strict=True):
        room = int(size) - len(batch)
        batch.extend(int(i) for i in leftovers[cursor : cursor + room])
        cursor += room
    for batch in batches:
        rng.shuffle(batch)
    order = rng.permutation(n_batches)
    return [batches[i] for i in order]


class ClusterBalancedBatchSampler:
    """A ``batch_sampler`` for a training DataLoader: ``balanced_batches`` anew every epoch.

    ``DataLoader(dataset, batch_sampler=ClusterBalancedBatchSampler(labels, 8))`` where
    ``labels[i]`` is the cluster of dataset item i. Epoch e uses seed ``seed + e``; call
    ``set_epoch(e)`` before iterating (as with DistributedSampler), or let iteration advance it.
    Pure Python/NumPy: no torch import needed.
    """

    def __init__(
        self,
        cluster_labels: Sequence[int] | np.ndarray,
        batch_size: int,
        *,
        min_clusters: int = 2,
        rare_fraction: float = 0.05,
        rare_weight: float = 3.0,
        seed: int = 0,
    ) -> None:
        _validate_batch_args(batch_size, min_clusters, rare_fraction, rare_weight)
        self.cluster_labels = np.asarray(cluster_labels)
        self.batch_size = batch_size
        self.min_clusters = min_clusters
        self.rare_fraction = rare_fraction
        self.rare_weight = rare_weight
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Use the batches of ``epoch`` on the next iteration."""
        self.epoch = epoch

    def __len__(self) -> int:
        return math.ceil(len(self.cluster_labels) / self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        batches = balanced_batches(
            self.cluster_labels,
            self.batch_size,
            min_clusters=self.min_clusters,
            rare_fraction=self.rare_fraction,
            rare_weight=self.rare_weight,
            seed=self.seed + self.epoch,
        )
        self.epoch += 1
        yield from batches


def stratified_sample(
    cluster_labels: Sequence[int] | np.ndarray, size: int, *, seed: int = 0
) -> list[int]:
    """``size`` distinct indices whose clusters keep their shares of the data (held-out prompts).

    Each cluster gets ``size * share`` places, rounded by largest remainder (ties: the larger
    cluster, then the lower label), and at least one place while places remain for the clusters
    not yet represented, smallest clusters last. Returned sorted. ``size`` is capped at n.
    """
    labels = np.asarray(cluster_labels)
    size = min(size, len(labels))
    if size <= 0:
        return []
    rng = np.random.default_rng(seed)
    values, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    exact = counts * size / len(labels)
    places = np.floor(exact).astype(np.int64)
    order = np.lexsort((values, -counts, -(exact - places)))
    for cluster in order[: size - places.sum()]:
        places[cluster] += 1
    # Every cluster present in the sample when size allows: take from the best-served cluster.
    for cluster in np.lexsort((values, -counts)):
        if places[cluster] == 0 and (places > 1).any():
            places[int(np.argmax(places))] -= 1
            places[cluster] += 1
    chosen = [
        rng.choice(np.flatnonzero(inverse == cluster), size=int(k), replace=False)
        for cluster, k in enumerate(places)
    ]
    return sorted(int(i) for i in np.concatenate(chosen))
