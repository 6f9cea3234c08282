"""The labelling queue ordered by the reward ensemble's acquisition scores (issue #33): stored
scores, the queue through the real claims (cluster-balanced batches kept), overlap reduction that
never goes below one annotator, and refusals that write nothing."""

import numpy as np
import pytest

from annotation.models import Comparison, QueueOrder
from annotation.selectors.labelling import BATCH_SIZE
from annotation.services import labelling
from annotation.services.active_queue import (
    ActiveQueueError,
    ensemble_scores_store,
    overlap_targets_update,
)
from annotation.services.labelling import Verdict
from annotation.services.projects import project_update
from common.roles import ANNOTATOR, ML_ENGINEER
from tests.factories import ComparisonFactory, JudgementFactory, ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db


def _clustered_project(per_cluster: int, clusters: int, **fields):
    """``clusters`` x ``per_cluster`` comparisons, each prompt in its cluster (label c)."""
    project = ProjectFactory(gold_every=0, repeat_every=0, **fields)
    comparisons = []
    for c in range(clusters):
        for _ in range(per_cluster):
            comparison = ComparisonFactory(project=project)
            comparison.prompt.cluster = c
            comparison.prompt.save(update_fields=["cluster"])
            comparisons.append(comparison)
    return project, comparisons


def _claim_all(project, user) -> list[Comparison]:
    order = []
    while (assignment := labelling.assignment_claim(annotator=user, project=project)) is not None:
        order.append(assignment.comparison)
        labelling.judgement_submit(
            annotator=user, assignment_id=assignment.pk, verdict=Verdict("left"), elapsed_ms=900
        )
    return order


def test_disagreement_order_through_the_real_queue_keeps_every_batch_mixed():
    """48 comparisons in 4 clusters; the ensemble's members disagree most on cluster 0 (std of the
    reward gap 2.0 against 0.1 elsewhere), so a pure score order would hand out 12 cluster-0 pairs
    first. Through the real claims, every batch of the labelling screen holds at least 2 clusters,
    the first batches still lean to cluster 0, and every comparison comes once."""
    project, comparisons = _clustered_project(
        12, 4, overlap=1, queue_order=QueueOrder.DISAGREEMENT, exploration_share=0.2
    )
    ids = [c.pk for c in comparisons]
    spread = np.array([2.0 if c.prompt.cluster == 0 else 0.1 for c in comparisons])
    members = np.array([-1.0, 1.0, 0.0])[:, None] * spread * np.sqrt(1.5)  # population std = spread
    ensemble_scores_store(
        project=project, comparison_ids=ids, rewards_a=members, rewards_b=np.zeros_like(members)
    )
    stored = Comparison.objects.get(pk=ids[0])
    assert stored.ensemble_disagreement == pytest.approx(2.0)
    assert stored.ensemble_preference == pytest.approx(
        np.mean(1 / (1 + np.exp(-members[:, 0]))), abs=1e-9
    )
    annotator = UserFactory(role=ANNOTATOR)
    project.members.add(annotator)
    handed = _claim_all(project, annotator)
    assert sorted(c.pk for c in handed) == sorted(ids)
    clusters = [c.prompt.cluster for c in handed]
    for start in range(0, len(clusters), BATCH_SIZE):
        assert len(set(clusters[start : start + BATCH_SIZE])) >= 2, clusters
    first_two_batches = clusters[: 2 * BATCH_SIZE]
    assert first_two_batches.count(0) > 2 * BATCH_SIZE / 4  # above cluster 0's 1/4 share


def test_overlap_reduction_gives_confident_agreed_pairs_one_annotator_never_fewer():
    """Overlap 3. The judge says A on comparisons 0-2 and B on 3. The ensemble is sure of A on 0
    (P = 0.99) and 3 (0.99: disagrees with the judge), unsure on 1 (0.6), sure of B on 2 (0.01:
    disagrees). Only 0 drops to one annotator; the claims hand it to one and the others to three.
    Switched off, every comparison needs the project's overlap again."""
    judge = UserFactory(username="judge-bot")
    project = ProjectFactory(gold_every=0, repeat_every=0, overlap=3)
    comparisons = [ComparisonFactory(project=project) for _ in range(4)]
    for comparison, choice in zip(comparisons, ["a", "a", "a", "b"], strict=True):
        JudgementFactory(comparison=comparison, annotator=judge, choice=choice)
    # The judge's verdicts take no slot of the overlap in this test.
    Comparison.objects.filter(project=project).update(taken=0)
    project.suggestion_judge = judge
    project.overlap_reduction = True
    project.save()
    p = np.array([0.99, 0.6, 0.01, 0.99])
    gap = np.log(p / (1 - p))[None, :].repeat(2, axis=0)  # two members that agree
    ensemble_scores_store(
        project=project,
        comparison_ids=[c.pk for c in comparisons],
        rewards_a=gap,
        rewards_b=np.zeros_like(gap),
    )
    targets = dict(Comparison.objects.filter(project=project).values_list("pk", "target_overlap"))
    assert targets == {comparisons[0].pk: 1, **{c.pk: None for c in comparisons[1:]}}
    users = [UserFactory(role=ANNOTATOR) for _ in range(4)]
    project.members.add(*users)
    for user in users:
        _claim_all(project, user)
    human = {
        c.pk: c.judgements.exclude(annotator=judge).count()
        for c in Comparison.objects.filter(project=project)
    }
    assert human == {comparisons[0].pk: 1, **{c.pk: 3 for c in comparisons[1:]}}
    project.overlap_reduction = False
    project.save()
    assert overlap_targets_update(project=project) == 0
    assert not Comparison.objects.filter(project=project, target_overlap__isnull=False).exists()


def test_overlap_targets_are_never_below_one_in_the_schema():
    """A target of 0 humans cannot be stored: the check constraint refuses it."""
    from django.db import IntegrityError, transaction

    comparison = ComparisonFactory()
    with pytest.raises(IntegrityError), transaction.atomic():
        Comparison.objects.filter(pk=comparison.pk).update(target_overlap=0)


def test_scores_of_the_wrong_shape_or_project_are_refused_and_nothing_changes():
    """[K, N] must match the ids; an id of another project is refused; nothing is written."""
    project, comparisons = _clustered_project(2, 2, queue_order=QueueOrder.UNCERTAINTY)
    other = ComparisonFactory()
    ids = [c.pk for c in comparisons]
    with pytest.raises(ActiveQueueError, match="K, N"):
        ensemble_scores_store(
            project=project,
            comparison_ids=ids,
            rewards_a=np.zeros((2, 3)),
            rewards_b=np.zeros((2, 3)),
        )
    with pytest.raises(ActiveQueueError, match="not in project"):
        ensemble_scores_store(
            project=project,
            comparison_ids=[*ids[:3], other.pk],
            rewards_a=np.zeros((2, 4)),
            rewards_b=np.zeros((2, 4)),
        )
    assert not Comparison.objects.filter(ensemble_preference__isnull=False).exists()


def test_changing_the_queue_order_setting_reorders_the_queue():
    """Back to cluster-balanced, the queue is the balanced order again (queue_rebalance): the
    first batch holds both clusters."""
    project, comparisons = _clustered_project(8, 2, queue_order=QueueOrder.DISAGREEMENT)
    lead = UserFactory(role=ML_ENGINEER)
    ids = [c.pk for c in comparisons]
    rewards = np.array([[float(i) for i in range(16)], [0.0] * 16])
    ensemble_scores_store(
        project=project, comparison_ids=ids, rewards_a=rewards, rewards_b=np.zeros_like(rewards)
    )
    project = project_update(project=project, actor=lead, queue_order=QueueOrder.BALANCED)
    first = (
        Comparison.objects.filter(project=project)
        .order_by("queue_position", "id")
        .values_list("prompt__cluster", flat=True)[:BATCH_SIZE]
    )
    assert set(first) == {0, 1}


def test_the_project_page_shows_the_queue_order_and_the_learning_curve(ml_engineer):
    """The manage page names the strategy that orders the queue and its exploration share, and
    draws one point per retrain: 40 labels at accuracy 0.6 on the left, 120 at 0.7 on the right
    edge (x = 480 - 36), higher on the chart (smaller y) for the better accuracy."""
    from django.urls import reverse

    from annotation.models import LearningCurvePoint
    from tests.helpers.clients import logged_in

    project = ProjectFactory(
        queue_order=QueueOrder.UNCERTAINTY, exploration_share=0.25, continuous_rm=True
    )
    LearningCurvePoint.objects.create(project=project, run_id=1, labels=40, accuracy=0.6)
    LearningCurvePoint.objects.create(project=project, run_id=2, labels=120, accuracy=0.7)
    page = logged_in(ml_engineer).get(reverse("annotation:project-manage", args=[project.slug]))
    html = page.content.decode()
    assert page.status_code == 200
    assert "Closeness to 50/50" in html and "25% exploration" in html
    assert 'data-testid="learning-curve"' in html
    assert "120 labels: accuracy 0.700" in html
    assert 'cx="444.0" cy="74.4"' in html  # x: 36 + 408 * 120/120; y: 36 + 128 * (1 - 0.7)
    assert 'cx="172.0" cy="87.2"' in html  # x: 36 + 408 * 40/120 = 172; y: 36 + 128 * 0.4


def test_a_comparison_with_reduced_overlap_counts_complete_at_its_own_target():
    """Overlap 3; overlap reduction gave one comparison one annotator: one judgement makes it
    complete in the item browser's status, the batches' progress and the adjudication rules,
    while its neighbour with one judgement stays in progress."""
    from annotation.selectors.adjudication import adjudication_queue
    from annotation.selectors.items import ItemFilters, items_page
    from annotation.selectors.projects import batch_progress

    project, (reduced, full) = _clustered_project(per_cluster=1, clusters=2, overlap=3)
    Comparison.objects.filter(pk=reduced.pk).update(target_overlap=1)
    for comparison in (reduced, full):
        JudgementFactory(comparison=comparison, choice="a")
    status = {r.id: r.status for r in items_page(project=project, filters=ItemFilters()).rows}
    assert status == {reduced.pk: "complete", full.pk: "in_progress"}
    done = items_page(project=project, filters=ItemFilters(status="complete")).rows
    assert [r.id for r in done] == [reduced.pk]
    assert [b.complete for b in batch_progress(project=project)] == [1]
    assert adjudication_queue(project=project, threshold=0.0) == []
