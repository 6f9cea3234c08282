"""The pure clustering maths: KMeans recovers separable clusters, c-TF-IDF names them, and
``balanced_batches`` keeps its three rules (mixed batches, weighted shares, determinism)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from annotation.clustering import (
    ClusterBalancedBatchSampler,
    balanced_batches,
    central_members,
    cluster_draw_shares,
    cluster_embeddings,
    cluster_top_terms,
    project_2d,
    stratified_sample,
)


def _blobs(sizes, dim=24, spread=0.05, seed=0):
    """Points around mutually distant random unit directions; returns (points, true labels)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(len(sizes), dim))
    points = [
        c + spread * rng.normal(size=(n, dim)) * np.linalg.norm(c)
        for c, n in zip(centres, sizes, strict=True)
    ]
    truth = np.repeat(np.arange(len(sizes)), sizes)
    return np.concatenate(points).astype(np.float32), truth


def _same_partition(a, b) -> bool:
    """True when the two labelings group the items identically (up to renaming)."""
    pairs = set(zip(a.tolist(), b.tolist(), strict=True))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


# --- clustering -------------------------------------------------------------------------------------
def test_silhouette_search_recovers_separable_clusters():
    """Four well-separated blobs: the silhouette peaks at k=4 and KMeans finds the blobs exactly."""
    points, truth = _blobs([40, 30, 20, 10])
    result = cluster_embeddings(points, k_range=(2, 7))
    assert result.k == 4
    assert _same_partition(result.labels, truth)
    assert max(result.silhouette_by_k, key=result.silhouette_by_k.get) == 4
    assert result.silhouette > 0.8


def test_labels_are_numbered_by_size_and_centroids_are_unit_length():
    """Cluster 0 is the largest; centroids lie on the unit sphere, like the normalised points."""
    points, truth = _blobs([10, 40, 25])
    result = cluster_embeddings(points, k=3)
    assert result.sizes.tolist() == [40, 25, 10]
    assert np.allclose(np.linalg.norm(result.centroids, axis=1), 1.0, atol=1e-5)
    assert result.labels[truth == 1].tolist() == [0] * 40


def test_minibatch_kmeans_for_large_inputs_recovers_the_clusters():
    """Above the threshold MiniBatchKMeans runs instead; on clean blobs it is just as exact."""
    points, truth = _blobs([300, 200, 100], dim=16)
    result = cluster_embeddings(points, k=3, minibatch_threshold=100)
    assert _same_partition(result.labels, truth)


def test_clustering_is_deterministic_for_a_seed():
    points, _ = _blobs([30, 30, 30], spread=0.6)
    first = cluster_embeddings(points, seed=3)
    second = cluster_embeddings(points, seed=3)
    assert first.k == second.k
    assert np.array_equal(first.labels, second.labels)


@pytest.mark.parametrize("n", [1, 2])
def test_too_few_points_for_a_search_form_one_cluster(n):
    """The silhouette needs 2 <= k <= n - 1: with one or two points there is nothing to compare."""
    result = cluster_embeddings(np.eye(4)[:n])
    assert (result.k, result.labels.tolist(), result.silhouette) == (1, [0] * n, None)


def test_bad_k_is_refused_with_the_number_of_points():
    with pytest.raises(ValueError, match=r"between 1 and the number of points \(3\), got 5"):
        cluster_embeddings(np.eye(3), k=5)


def test_central_members_are_closest_to_the_centroid_first():
    """On a circle around direction x, the member pointing straight along x is the most central."""
    angles = np.array([0.3, 0.0, -0.2, 0.5])
    points = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    central = central_members(points, np.zeros(4, dtype=int), np.array([[1.0, 0.0]]), n=3)
    assert central == {0: [1, 2, 0]}


def test_ctfidf_top_terms_set_each_cluster_apart():
    """Words shared by every cluster ('please', 'help') rank below each cluster's own words.

    Cluster 0: 'python' x3 and 'list' x2 of 8 words; idf(python) = log(1 + 8/3) beats idf(please)
    = log(1 + 8/4) (4 occurrences over both clusters), so python ranks first.
    """
    texts = [
        "please help python list",
        "python list please",
        "python help",
        "please help sleep tonight",
        "sleep tonight",
        "sleep please",
    ]
    terms = cluster_top_terms(texts, np.array([0, 0, 0, 1, 1, 1]), n_terms=2, stop_words=None)
    assert terms == {0: ["python", "list"], 1: ["sleep", "tonight"]}


def test_ctfidf_ignores_contraction_fragments():
    """ "I've" and "don't" give neither "ve" nor "don" (nor "t", too short)."""
    texts = ["I've slept badly, don't know why", "I don't sleep", "Python's lists"]
    terms = cluster_top_terms(texts, np.array([0, 0, 1]), n_terms=5)
    assert terms == {0: ["badly", "know", "sleep", "slept"], 1: ["lists", "python"]}


def test_ctfidf_of_stop_words_only_gives_empty_lists():
    assert cluster_top_terms(["the a", "of and"], np.array([0, 1])) == {0: [], 1: []}


def test_projection_is_two_dimensional_and_separates_blobs():
    points, truth = _blobs([20, 20])
    xy = project_2d(points)
    assert xy.shape == (40, 2)
    assert np.sign(xy[truth == 0, 0]).tolist().count(np.sign(xy[0, 0])) == 20


# --- balanced batches -------------------------------------------------------------------------------
SKEWED = np.array([0] * 80 + [1] * 16 + [2] * 4)  # cluster 2 is rare (4% < 5%)


def test_one_epoch_of_batches_with_sizes_differing_by_one():
    """100 items in batches of 8: ceil(100 / 8) = 13 batches, 100 draws, sizes 7 or 8."""
    batches = balanced_batches(SKEWED, 8)
    assert len(batches) == 13
    assert sum(map(len, batches)) == 100
    assert {len(b) for b in batches} <= {7, 8}


def test_every_batch_mixes_clusters():
    batches = balanced_batches(SKEWED, 8, min_clusters=2)
    assert all(len(set(SKEWED[b])) >= 2 for b in batches)


def test_min_clusters_three_puts_every_cluster_in_every_batch():
    batches = balanced_batches(SKEWED, 8, min_clusters=3)
    assert all(set(SKEWED[b]) == {0, 1, 2} for b in batches)


def test_rare_cluster_gets_its_weighted_share():
    """Weights: 80 x 1, 16 x 1, 4 x 3 = 108. The rare cluster's share of draws is 12/108 = 11.1%
    (against 4% of the data); over one epoch of 100 draws that is 11.1, so 11 or 12 draws."""
    shares = cluster_draw_shares(SKEWED)
    assert shares[2] == pytest.approx(12 / 108)
    batches = balanced_batches(SKEWED, 10, seed=7)
    drawn = np.bincount(SKEWED[np.concatenate(batches)], minlength=3)
    assert drawn[2] in (11, 12)
    assert drawn[1] in (14, 15)  # 16/108 * 100 = 14.8


def test_rare_share_is_exact_on_average_over_epochs():
    """Random rounding keeps the expectation: over 200 epochs the mean is 100 * 12/108 = 11.11."""
    counts = [
        np.bincount(SKEWED[np.concatenate(balanced_batches(SKEWED, 10, seed=s))], minlength=3)[2]
        for s in range(200)
    ]
    assert np.mean(counts) == pytest.approx(100 * 12 / 108, abs=0.1)


def test_no_member_repeats_before_its_cluster_is_exhausted():
    """The rare cluster's 4 members are drawn 11-12 times: each 2 or 3 times, never 1 and 4."""
    drawn = np.concatenate(balanced_batches(SKEWED, 10, seed=1))
    per_member = np.bincount(drawn, minlength=100)[96:]
    assert per_member.max() - per_member.min() <= 1


def test_same_seed_same_batches_other_seed_other_batches():
    assert balanced_batches(SKEWED, 8, seed=5) == balanced_batches(SKEWED, 8, seed=5)
    assert balanced_batches(SKEWED, 8, seed=5) != balanced_batches(SKEWED, 8, seed=6)


def test_mixing_wins_over_shares_when_one_cluster_dominates():
    """99 items of cluster 0 and 1 of cluster 1 in 10 batches: the lone item is drawn in every batch
    (10 times instead of its weighted 3), because every batch must hold two clusters."""
    labels = np.array([0] * 99 + [1])
    batches = balanced_batches(labels, 10)
    assert all(set(labels[b]) == {0, 1} for b in batches)
    assert sum(b.count(99) for b in batches) == 10


def test_a_single_cluster_and_empty_input():
    assert balanced_batches([], 4) == []
    batches = balanced_batches([7, 7, 7, 7, 7], 2)
    assert sorted(i for b in batches for i in b) == [0, 1, 2, 3, 4]
    assert len(batches) == 3


def test_labels_may_be_any_integers():
    labels = [-1, 42, 42, 42, -1, 42]
    batches = balanced_batches(labels, 3, rare_fraction=0.0)
    assert all({labels[i] for i in b} == {-1, 42} for b in batches)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "batch_size must be at least 1"),
        ({"min_clusters": 0}, "min_clusters must be at least 1"),
        ({"rare_fraction": 1.5}, r"rare_fraction must be in \[0, 1\]"),
        ({"rare_weight": 0.0}, "rare_weight must be positive"),
    ],
)
def test_bad_arguments_are_refused(kwargs, message):
    arguments = {"batch_size": 4} | kwargs
    with pytest.raises(ValueError, match=message):
        balanced_batches([0, 1], **arguments)


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    batch_size=st.integers(1, 16),
    min_clusters=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_batch_rules_hold_for_any_mix(sizes, batch_size, min_clusters, seed):
    """For any cluster sizes: ceil(n / batch_size) batches, n draws, sizes within one of each
    other and at most batch_size, every index valid, and each batch as mixed as it can be."""
    labels = np.repeat(np.arange(len(sizes)), sizes)
    rng = np.random.default_rng(seed)
    labels = labels[rng.permutation(len(labels))]
    n = len(labels)
    batches = balanced_batches(labels, batch_size, min_clusters=min_clusters, seed=seed)
    lengths = [len(b) for b in batches]
    assert len(batches) == math.ceil(n / batch_size)
    assert sum(lengths) == n
    assert max(lengths) - min(lengths) <= 1 and max(lengths) <= batch_size
    assert all(0 <= i < n for b in batches for i in b)
    needed = min(min_clusters, len(sizes), min(lengths))
    assert all(len(set(labels[b])) >= needed for b in batches)


# --- sampler and stratified sample ------------------------------------------------------------------
def test_sampler_gives_a_new_balanced_epoch_each_time():
    """The DataLoader protocol: len() batches per epoch; epoch e equals balanced_batches(seed + e)."""
    sampler = ClusterBalancedBatchSampler(SKEWED, 8, seed=10)
    assert len(sampler) == 13
    first, second = list(sampler), list(sampler)
    assert first == balanced_batches(SKEWED, 8, seed=10)
    assert second == balanced_batches(SKEWED, 8, seed=11)
    sampler.set_epoch(0)
    assert list(sampler) == first


def test_sampler_drives_a_torch_dataloader():
    """No torch in the sampler, but a DataLoader accepts it as its batch_sampler."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    dataset = TensorDataset(torch.as_tensor(SKEWED))
    loader = DataLoader(dataset, batch_sampler=ClusterBalancedBatchSampler(SKEWED, 8))
    batches = [batch[0].tolist() for batch in loader]
    assert len(batches) == 13 and all(len(set(b)) >= 2 for b in batches)


def test_stratified_sample_keeps_shares_and_represents_every_cluster():
    """10 of 100 with shares 80/16/4: exact places 8, 1.6, 0.4 -> 8, 2, 0 by largest remainder; the
    empty rare cluster then takes one place from the largest: 7, 2, 1."""
    chosen = stratified_sample(SKEWED, 10, seed=0)
    assert len(set(chosen)) == 10
    assert np.bincount(SKEWED[chosen], minlength=3).tolist() == [7, 2, 1]
    assert stratified_sample(SKEWED, 10, seed=0) == chosen
