"""Active preference collection, the pure core: ensemble scores worked out by hand, the acquisition
strategies, the queue re-ranking's rules (exploration share, rare clusters, mixed batches,
determinism) and the overlap reduction that never goes below one human."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from annotation.acquisition import (
    EnsembleScores,
    acquisition_scores,
    closeness_to_half,
    ensemble_scores,
    judge_disagreement,
    preference_probability,
    reduced_overlap,
    rerank_queue,
    reward_disagreement,
)

# Two members, two comparisons. Differences r_A - r_B: member 0 (1, 0), member 1 (2, 0).
REWARDS_A = np.array([[1.0, 0.0], [3.0, 0.0]])
REWARDS_B = np.array([[0.0, 0.0], [1.0, 0.0]])
SIGMOID_1 = 1 / (1 + math.exp(-1))  # 0.7310586
SIGMOID_2 = 1 / (1 + math.exp(-2))  # 0.8807971


def _distinct_per_batch(labels, order, batch_size):
    ordered = np.asarray(labels)[order]
    return [
        len(set(ordered[i : i + batch_size].tolist())) for i in range(0, len(order), batch_size)
    ]


# --- Scores ------------------------------------------------------------------------------------------
def test_preference_is_the_mean_of_the_members_sigmoids():
    """Comparison 0: (sigmoid(1) + sigmoid(2)) / 2 = (0.7310586 + 0.8807971) / 2 = 0.8059278, not
    sigmoid of the mean difference, sigmoid(1.5) = 0.8175745. Comparison 1: both differences 0,
    sigmoid(0) = 0.5."""
    p = preference_probability(rewards_a=REWARDS_A, rewards_b=REWARDS_B)
    assert p == pytest.approx([0.8059278, 0.5], abs=1e-7)
    assert p[0] == pytest.approx((SIGMOID_1 + SIGMOID_2) / 2, abs=1e-12)


def test_disagreement_is_the_population_std_of_the_reward_differences():
    """Differences (1, 2): mean 1.5, std sqrt(((1 - 1.5)^2 + (2 - 1.5)^2) / 2) = 0.5 (ddof 0);
    differences (0, 0): 0."""
    d = reward_disagreement(rewards_a=REWARDS_A, rewards_b=REWARDS_B)
    assert d == pytest.approx([0.5, 0.0], abs=1e-12)


def test_closeness_to_half_by_hand():
    """1 - 2|p - 0.5|: p = 0.5 -> 1; p = 0.8 -> 1 - 0.6 = 0.4; p = 0.1 -> 1 - 0.8 = 0.2; p = 1 -> 0."""
    c = closeness_to_half(preference=np.array([0.5, 0.8, 0.1, 1.0]))
    assert c == pytest.approx([1.0, 0.4, 0.2, 0.0], abs=1e-12)


def test_closeness_ranks_like_the_binary_entropy():
    """H(p) = -p ln p - (1 - p) ln(1 - p) and 1 - 2|p - 0.5| both fall with |p - 0.5|: on 200
    distinct probabilities they give the same order."""
    p = np.random.default_rng(2).uniform(0.001, 0.999, 200)
    entropy = -p * np.log(p) - (1 - p) * np.log(1 - p)
    closeness = closeness_to_half(preference=p)
    assert np.argsort(closeness).tolist() == np.argsort(entropy).tolist()


def test_judge_disagreement_is_nan_where_no_judge():
    """|p - p_judge|: |0.8059278 - 0.2| = 0.6059278; no verdict (NaN) stays NaN."""
    p = np.array([(SIGMOID_1 + SIGMOID_2) / 2, 0.5])
    j = judge_disagreement(preference=p, judge_preference=np.array([0.2, np.nan]))
    assert j[0] == pytest.approx(0.6059278, abs=1e-7)
    assert np.isnan(j[1])


def test_ensemble_scores_gathers_the_four_figures():
    """The same hand values in one call: p (0.8059278, 0.5), std (0.5, 0), closeness
    1 - 2 * 0.3059278 = 0.3881443 and 1, judge disagreement 0.6059278 and NaN; no judge at all
    gives NaN everywhere."""
    s = ensemble_scores(
        rewards_a=REWARDS_A, rewards_b=REWARDS_B, judge_preference=np.array([0.2, np.nan])
    )
    assert s.preference == pytest.approx([0.8059278, 0.5], abs=1e-7)
    assert s.disagreement == pytest.approx([0.5, 0.0], abs=1e-12)
    assert s.closeness == pytest.approx([0.3881443, 1.0], abs=1e-7)
    assert s.judge_disagreement[0] == pytest.approx(0.6059278, abs=1e-7)
    assert np.isnan(s.judge_disagreement[1])
    assert np.isnan(
        ensemble_scores(rewards_a=REWARDS_A, rewards_b=REWARDS_B).judge_disagreement
    ).all()


def test_identical_members_do_not_disagree():
    """Five copies of one reward model: the std over members is exactly 0, and p is that model's own
    sigmoid(r_A - r_B)."""
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=50), rng.normal(size=50)
    s = ensemble_scores(rewards_a=np.tile(a, (5, 1)), rewards_b=np.tile(b, (5, 1)))
    assert (s.disagreement == 0).all()
    assert s.preference == pytest.approx(1 / (1 + np.exp(-(a - b))), abs=1e-12)


def test_swapping_a_and_b_maps_p_to_one_minus_p_and_keeps_the_rest():
    """sigmoid(-x) = 1 - sigmoid(x), and std(-d) = std(d): swapping the responses turns p into
    1 - p and leaves disagreement and closeness unchanged."""
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=(5, 40)), rng.normal(size=(5, 40))
    forward = ensemble_scores(rewards_a=a, rewards_b=b)
    swapped = ensemble_scores(rewards_a=b, rewards_b=a)
    assert swapped.preference == pytest.approx(1 - forward.preference, abs=1e-12)
    assert swapped.disagreement == pytest.approx(forward.disagreement, abs=1e-12)
    assert swapped.closeness == pytest.approx(forward.closeness, abs=1e-12)


def test_large_reward_gaps_do_not_overflow():
    """A gap of 1000 reward units gives p = 1 (and -1000 gives 0) with no overflow warning."""
    with np.errstate(all="raise"):
        p = preference_probability(
            rewards_a=np.array([[1000.0, -1000.0]]), rewards_b=np.zeros((1, 2))
        )
    assert p.tolist() == [1.0, 0.0]


# --- Acquisition strategies --------------------------------------------------------------------------
def _hand_scores() -> EnsembleScores:
    return ensemble_scores(
        rewards_a=REWARDS_A, rewards_b=REWARDS_B, judge_preference=np.array([0.2, np.nan])
    )


def test_named_strategies_by_hand():
    """disagreement: the std (0.5, 0); uncertainty: the closeness (0.3881443, 1); judge
    disagreement: 0.6059278 and 0 where no verdict; random: seeded uniform values in [0, 1)."""
    s = _hand_scores()
    assert acquisition_scores(scores=s, strategy="disagreement") == pytest.approx([0.5, 0.0])
    assert acquisition_scores(scores=s, strategy="uncertainty") == pytest.approx(
        [0.3881443, 1.0], abs=1e-7
    )
    assert acquisition_scores(scores=s, strategy="judge_disagreement") == pytest.approx(
        [0.6059278, 0.0], abs=1e-7
    )
    first = acquisition_scores(scores=s, strategy="random", seed=7)
    assert first.tolist() == acquisition_scores(scores=s, strategy="random", seed=7).tolist()
    assert ((first >= 0) & (first < 1)).all()
    assert first.tolist() != acquisition_scores(scores=s, strategy="random", seed=8).tolist()


def test_weighted_mix_by_hand():
    """{"disagreement": 1, "uncertainty": 0.5}: disagreement over its maximum 0.5 gives (1, 0);
    plus 0.5 x closeness (0.3881443, 1): 1 + 0.1940722 = 1.1940722 and 0 + 0.5 = 0.5. Adding
    {"judge_disagreement": 2}: + 2 x (0.6059278, 0) -> 2.4059278 and 0.5."""
    s = _hand_scores()
    mix = acquisition_scores(scores=s, weights={"disagreement": 1, "uncertainty": 0.5})
    assert mix == pytest.approx([1.1940722, 0.5], abs=1e-7)
    mix = acquisition_scores(
        scores=s, weights={"disagreement": 1, "uncertainty": 0.5, "judge_disagreement": 2}
    )
    assert mix == pytest.approx([2.4059278, 0.5], abs=1e-7)


def test_mix_with_no_disagreement_anywhere_stays_finite():
    """Identical members: every std is 0, so the normalised disagreement is 0 (no 0/0) and the mix
    is the closeness alone: p = sigmoid(0) = 0.5 -> 1."""
    s = ensemble_scores(rewards_a=np.zeros((3, 2)), rewards_b=np.zeros((3, 2)))
    mix = acquisition_scores(scores=s, weights={"disagreement": 1, "uncertainty": 1})
    assert mix.tolist() == [1.0, 1.0]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"strategy": "entropy"}, "strategy"),
        ({"weights": {"entropy": 1}}, "weights"),
        ({"weights": {"disagreement": -1}}, "weights"),
        ({"weights": {"disagreement": 0}}, "weights"),
        ({"weights": {"disagreement": float("nan")}}, "weights"),
    ],
)
def test_bad_strategy_or_weights_are_refused(kwargs, named):
    """An unknown strategy, or weights that are unknown, negative, NaN or all zero: ValueError
    naming the argument."""
    with pytest.raises(ValueError, match=named):
        acquisition_scores(scores=_hand_scores(), **kwargs)


@pytest.mark.parametrize(
    ("a", "b", "named"),
    [
        (np.zeros((2, 3)), np.zeros((2, 4)), "rewards_b"),
        (np.zeros(3), np.zeros(3), "rewards_a"),
        (np.zeros((0, 3)), np.zeros((0, 3)), "rewards_a"),
        (np.zeros((2, 3)), np.full((2, 3), np.nan), "rewards_b"),
    ],
)
def test_bad_rewards_are_refused(a, b, named):
    """Shapes that differ, a 1-D array, no members, or NaN: ValueError naming the argument."""
    with pytest.raises(ValueError, match=named):
        ensemble_scores(rewards_a=a, rewards_b=b)


def test_judge_of_the_wrong_length_or_range_is_refused():
    """A judge vector of another length, or a judge probability of 1.2: ValueError naming it."""
    with pytest.raises(ValueError, match="judge_preference"):
        ensemble_scores(rewards_a=REWARDS_A, rewards_b=REWARDS_B, judge_preference=np.zeros(3))
    with pytest.raises(ValueError, match="judge_preference"):
        ensemble_scores(
            rewards_a=REWARDS_A, rewards_b=REWARDS_B, judge_preference=np.array([1.2, 0.5])
        )


# --- Queue re-ranking --------------------------------------------------------------------------------
def test_without_exploration_one_cluster_is_plain_score_order():
    """Scores (0.1, 0.9, 0.5, 0.9), one cluster, no exploration: highest first, the tie at 0.9 by
    lower index: 1, 3, 2, 0."""
    q = rerank_queue(
        scores=np.array([0.1, 0.9, 0.5, 0.9]), cluster_labels=np.zeros(4), exploration=0
    )
    assert q.order.tolist() == [1, 3, 2, 0]
    assert not q.explored.any()
    assert q.balancing == "kept"


@pytest.mark.parametrize(
    ("n", "share", "count"),
    [(1000, 0.2, 200), (7, 0.25, 2), (2, 0.25, 1), (10, 1.0, 10), (10, 0.0, 0)],
)
def test_exploration_share_is_an_exact_count(n, share, count):
    """round(share x n), halves up: 1000 x 0.2 = 200; 7 x 0.25 = 1.75 -> 2; 2 x 0.25 = 0.5 -> 1;
    all; none."""
    q = rerank_queue(
        scores=np.arange(n, dtype=float), cluster_labels=np.arange(n) % 3, exploration=share
    )
    assert int(q.explored.sum()) == count
    assert sorted(q.order.tolist()) == list(range(n))


def test_exploration_is_interleaved_evenly():
    """10 comparisons, one cluster, 20%: 2 random ones at times 0.25 and 0.75, the 8 by score at
    (r + 0.5) / 8 = 0.0625, 0.1875, 0.3125, ...: the random ones land at places 2 (after two by
    score) and 7 (after six by score and the first random one)."""
    q = rerank_queue(
        scores=np.arange(10, dtype=float), cluster_labels=np.zeros(10), exploration=0.2
    )
    places = np.flatnonzero(q.explored[q.order]).tolist()
    assert places == [2, 7]
    by_score = [i for i in q.order.tolist() if not q.explored[i]]
    assert by_score == sorted(by_score, reverse=True)


def test_rare_cluster_moves_forward_by_its_weight():
    """99 comparisons in cluster 0, one (index 60) in cluster 1: 1% < 5%, so it is rare and weighs
    3. Scores fall with the index, so index 60 is 61st by score: time (60 + 0.5) / 100 = 0.605,
    divided by 1 (the rare weight is the largest), while the others' times are multiplied by 3:
    3 (r + 0.5) / 100 < 0.605 for ranks r = 0..19. It comes 21st (place 20), not 61st; with
    rare_weight 1 it stays at place 60."""
    labels = np.zeros(100, dtype=int)
    labels[60] = 1
    scores = -np.arange(100, dtype=float)
    kwargs = {
        "scores": scores,
        "cluster_labels": labels,
        "exploration": 0,
        "batch_size": 100,
        "min_clusters": 1,
    }
    assert rerank_queue(**kwargs).order.tolist().index(60) == 20
    assert rerank_queue(**kwargs, rare_weight=1.0).order.tolist().index(60) == 60


def test_score_order_is_kept_when_batches_are_already_mixed():
    """Two clusters alternating by index, scores falling with the index: the score order already
    mixes every batch of 4, so it is returned untouched ("kept")."""
    q = rerank_queue(
        scores=-np.arange(20, dtype=float),
        cluster_labels=np.arange(20) % 2,
        exploration=0,
        batch_size=4,
    )
    assert q.order.tolist() == list(range(20))
    assert q.balancing == "kept"


def test_one_short_batch_is_mended_by_one_swap():
    """Clusters alternate 0, 1 by index except places 8-15, all cluster 0; scores fall with the
    index. Only the second batch of 8 falls short, so it swaps: its last comparison (15, cluster 0
    held eight times) trades places with the nearest later one of another cluster whose batch
    keeps two clusters: 17 (cluster 1; batch 16-23 then holds 0 at 16, 17, 18 and 1 at 19, ...).
    Everything else keeps its place."""
    labels = np.arange(40) % 2
    labels[8:16] = 0
    q = rerank_queue(
        scores=-np.arange(40, dtype=float),
        cluster_labels=labels,
        exploration=0,
        batch_size=8,
        rare_weight=1.0,
    )
    expected = list(range(40))
    expected[15], expected[17] = 17, 15
    assert q.balancing == "swapped"
    assert q.order.tolist() == expected


@pytest.mark.parametrize(("half", "balancing"), [(50, "swapped"), (1000, "dealt")])
def test_a_dominant_cluster_at_the_top_is_mixed_into_every_batch(half, balancing):
    """Cluster 0's ``half`` comparisons hold the best scores, clusters 1-4 the rest: by score the
    first half/10 batches of 10 would be cluster 0 alone. 5 short batches of 10 are few (at most 16)
    and get swaps; 100 of 200 are many and the batches are dealt. Either way every batch of 10
    then holds at least 2 clusters (3 when asked), every comparison appears once, and the first
    batch still starts with the best comparison."""
    labels = np.concatenate([np.zeros(half, dtype=int), 1 + np.arange(half) % 4])
    scores = -np.arange(2 * half, dtype=float)
    for min_clusters in (2, 3):
        q = rerank_queue(
            scores=scores,
            cluster_labels=labels,
            exploration=0,
            batch_size=10,
            min_clusters=min_clusters,
        )
        assert q.balancing == balancing
        assert sorted(q.order.tolist()) == list(range(2 * half))
        assert min(_distinct_per_batch(labels, q.order, 10)) >= min_clusters
        assert q.order[0] == 0


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 60), min_size=1, max_size=6),
    batch_size=st.integers(1, 9),
    min_clusters=st.integers(1, 4),
    exploration=st.sampled_from([0.0, 0.2, 0.5, 1.0]),
    grouped=st.booleans(),
    seed=st.integers(0, 3),
)
def test_every_batch_has_its_clusters_when_the_data_allow(
    sizes, batch_size, min_clusters, exploration, grouped, seed
):
    """Any cluster sizes, batch size, exploration and seed, with scores random or grouped by cluster
    (long runs of one cluster: many short batches, so the dealing path): the order is a
    permutation, and when the data allow it (sum over clusters of min(size, batches - 1) at least
    min_clusters per batch, the sufficient condition of the dealing) every chunk of batch_size
    holds min(min_clusters, clusters, chunk length) distinct clusters."""
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.repeat(np.arange(len(sizes)), sizes))
    n = len(labels)
    scores = -labels + 0.1 * rng.random(n) if grouped else rng.normal(size=n)
    q = rerank_queue(
        scores=scores,
        cluster_labels=labels,
        exploration=exploration,
        batch_size=batch_size,
        min_clusters=min_clusters,
        seed=seed,
    )
    assert sorted(q.order.tolist()) == list(range(n))
    n_batches = -(-n // batch_size)
    needed = min(min_clusters, len(sizes), batch_size)
    if sum(min(s, n_batches - 1) for s in sizes) >= needed * n_batches:
        distinct = _distinct_per_batch(labels, q.order, batch_size)
        lengths = [min(batch_size, n - i) for i in range(0, n, batch_size)]
        assert all(d >= min(needed, length) for d, length in zip(distinct, lengths, strict=True))


def test_same_seed_same_queue_other_seed_other_exploration():
    """Deterministic for a seed; another seed draws other random comparisons."""
    rng = np.random.default_rng(0)
    scores, labels = rng.normal(size=500), rng.integers(0, 7, 500)
    first = rerank_queue(scores=scores, cluster_labels=labels, seed=5)
    again = rerank_queue(scores=scores, cluster_labels=labels, seed=5)
    other = rerank_queue(scores=scores, cluster_labels=labels, seed=6)
    assert first.order.tolist() == again.order.tolist()
    assert first.explored.tolist() == again.explored.tolist()
    assert first.explored.tolist() != other.explored.tolist()


def test_no_open_comparisons_gives_an_empty_queue():
    """Nothing to label: an empty order, not an error."""
    q = rerank_queue(scores=np.zeros(0), cluster_labels=np.zeros(0, dtype=int))
    assert q.order.tolist() == [] and q.explored.tolist() == []


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"scores": np.zeros(3), "cluster_labels": np.zeros(4)}, "cluster_labels"),
        ({"scores": np.zeros((3, 1)), "cluster_labels": np.zeros(3)}, "scores"),
        ({"scores": np.array([0.0, np.nan]), "cluster_labels": np.zeros(2)}, "scores"),
        ({"scores": np.zeros(3), "cluster_labels": np.zeros(3), "exploration": 1.5}, "exploration"),
        (
            {"scores": np.zeros(3), "cluster_labels": np.zeros(3), "exploration": -0.1},
            "exploration",
        ),
        ({"scores": np.zeros(3), "cluster_labels": np.zeros(3), "batch_size": 0}, "batch_size"),
        ({"scores": np.zeros(3), "cluster_labels": np.zeros(3), "min_clusters": 0}, "min_clusters"),
    ],
)
def test_bad_queue_input_is_refused(kwargs, named):
    """Lengths that differ, a 2-D score array, NaN scores, exploration outside [0, 1], batch size or
    cluster minimum below 1: ValueError naming the argument."""
    with pytest.raises(ValueError, match=named):
        rerank_queue(**kwargs)


# --- Overlap reduction -------------------------------------------------------------------------------
P = np.array([0.95, 0.95, 0.95, 0.6, 0.05, 0.92])
JUDGE = np.array([0.97, 0.1, np.nan, 0.99, 0.02, 0.85])


def test_overlap_is_k_everywhere_when_off():
    """Off by default: the project's k (3) for every comparison, confident or not."""
    assert reduced_overlap(preference=P, judge_preference=JUDGE, overlap=3).tolist() == [3] * 6


def test_overlap_reduced_only_where_both_agree_confidently():
    """Threshold 0.9: (0.95, 0.97) same side, both sure -> 1; (0.95, 0.1) opposite sides -> 3; no
    verdict -> 3; ensemble 0.6 unsure -> 3; (0.05, 0.02) both sure of B -> 1; judge 0.85 unsure ->
    3. With reduced_to 2: 2 instead of 1."""
    on = {"preference": P, "judge_preference": JUDGE, "overlap": 3, "enabled": True}
    assert reduced_overlap(**on).tolist() == [1, 3, 3, 3, 1, 3]
    assert reduced_overlap(**on, reduced_to=2).tolist() == [2, 3, 3, 3, 2, 3]
    assert reduced_overlap(**on, confidence=0.8).tolist() == [1, 3, 3, 3, 1, 1]


def test_overlap_never_below_one_human():
    """k = 1 stays 1 where reduced; reduced_to 0 or k = 0 is refused (naming the argument), so no
    comparison can end up with no human."""
    on = {"preference": P, "judge_preference": JUDGE, "enabled": True}
    assert reduced_overlap(**on, overlap=1).tolist() == [1] * 6
    rng = np.random.default_rng(1)
    many = reduced_overlap(
        preference=rng.random(1000),
        judge_preference=rng.random(1000),
        overlap=5,
        enabled=True,
        confidence=0.51,
    )
    assert many.min() >= 1
    with pytest.raises(ValueError, match="reduced_to"):
        reduced_overlap(**on, overlap=3, reduced_to=0)
    with pytest.raises(ValueError, match="overlap"):
        reduced_overlap(**on, overlap=0)
    with pytest.raises(ValueError, match="confidence"):
        reduced_overlap(**on, overlap=3, confidence=0.5)
    with pytest.raises(ValueError, match="judge_preference"):
        reduced_overlap(preference=P, judge_preference=JUDGE[:3], overlap=3)
