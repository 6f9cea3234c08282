"""Active preference collection in the labelling queue (issue #33): the latest reward-model
ensemble's scores stored per comparison, the queue ordered by an acquisition strategy over them
(``annotation.acquisition.rerank_queue``: exploration share, cluster-balanced batches), and overlap
reduction where the ensemble and the trusted judge agree with high confidence.

Everything here runs when an ensemble is retrained (``ensemble_scores_store``) or a setting
changes (``queue_order_apply``), never on a claim: a claim reads ``queue_position`` and
``target_overlap`` as it always did, so labelling speed does not depend on the model.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from django.db import transaction

from annotation.acquisition import (
    EnsembleScores,
    acquisition_scores,
    closeness_to_half,
    ensemble_scores,
    judge_disagreement,
    reduced_overlap,
    rerank_queue,
)
from annotation.models import Choice, Comparison, Judgement, Project, QueueOrder
from annotation.selectors.clustering import comparison_ids_balanced
from annotation.selectors.labelling import BATCH_SIZE
from common.errors import ConcordError

# P(A > B) a judge's verdict stands for (a tie: no side; "both bad" is not a preference).
JUDGE_PREFERENCE = {Choice.A: 1.0, Choice.B: 0.0, Choice.TIE: 0.5}
# Overlap reduction: both the ensemble and the judge at least this sure of the same side.
OVERLAP_CONFIDENCE = 0.9


class ActiveQueueError(ConcordError):
    """Scores that cannot be stored as given (the message says why); nothing was written."""


def judge_preferences(*, project: Project) -> dict[int, float]:
    """The project's trusted judge (``suggestion_judge``) as P(A > B) per comparison it judged:
    1 for A, 0 for B, 0.5 for a tie; {} without a judge."""
    if project.suggestion_judge_id is None:
        return {}
    rows = Judgement.objects.filter(
        comparison__project=project, annotator_id=project.suggestion_judge_id
    ).values_list("comparison_id", "choice")
    return {cid: JUDGE_PREFERENCE[choice] for cid, choice in rows if choice in JUDGE_PREFERENCE}


def _stored_scores(project: Project) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """(ids [N] by id, preference [N], disagreement [N], cluster labels [N]); NaN where the
    ensemble has not scored a comparison, cluster -1 for a prompt without one."""
    rows = list(
        Comparison.objects.filter(project=project)
        .order_by("id")
        .values_list("id", "ensemble_preference", "ensemble_disagreement", "prompt__cluster")
    )
    ids = [r[0] for r in rows]
    preference = np.array([np.nan if r[1] is None else r[1] for r in rows], dtype=np.float64)
    disagreement = np.array([np.nan if r[2] is None else r[2] for r in rows], dtype=np.float64)
    clusters = np.array([-1 if r[3] is None else r[3] for r in rows], dtype=np.int64)
    return ids, preference, disagreement, clusters


def acquisition_order(*, project: Project) -> list[int]:
    """The project's comparison ids in the order of its acquisition strategy
    (``project.queue_order``, not "balanced"): ``acquisition_scores`` from the stored ensemble
    scores (and the judge's verdicts), then ``rerank_queue`` with the project's exploration
    share in batches of the labelling screen, at least 2 clusters each. A comparison the ensemble
    has not scored yet (imported after the retrain) ranks with the best: unknown is worth asking."""
    ids, preference, disagreement, clusters = _stored_scores(project)
    if not ids:
        return []
    judged = judge_preferences(project=project)
    judge = np.array([judged.get(cid, np.nan) for cid in ids], dtype=np.float64)
    scored = ~np.isnan(preference) & ~np.isnan(disagreement)
    p = np.where(scored, preference, 0.5)
    scores = EnsembleScores(
        preference=p,
        disagreement=np.where(scored, disagreement, 0.0),
        closeness=closeness_to_half(preference=p),
        judge_disagreement=judge_disagreement(preference=p, judge_preference=judge),
    )
    values = acquisition_scores(scores=scores, strategy=project.queue_order, seed=project.pk)
    if scored.any() and not scored.all():
        values = np.where(scored, values, values[scored].max())
    queue = rerank_queue(
        scores=values,
        cluster_labels=clusters,
        exploration=project.exploration_share,
        batch_size=BATCH_SIZE,
        seed=project.pk,
    )
    return [ids[i] for i in queue.order]


def queue_rebalance(*, project: Project) -> int:
    """Hand pairs to annotators in cluster-balanced batches: rewrite every comparison's queue
    position from ``comparison_ids_balanced`` (batches the size of the labelling screen's). Returns
    the number of comparisons placed."""
    return _queue_positions_write(
        project, comparison_ids_balanced(project=project, batch_size=BATCH_SIZE)
    )


def queue_order_apply(*, project: Project) -> int:
    """Rewrite every comparison's queue position by the project's queue order: cluster-balanced
    (``queue_rebalance``, today's order) or its acquisition strategy (``acquisition_order``).
    Returns the number of comparisons placed."""
    if project.queue_order == QueueOrder.BALANCED:
        return queue_rebalance(project=project)
    return _queue_positions_write(project, acquisition_order(project=project))


def _queue_positions_write(project: Project, order: Sequence[int]) -> int:
    """Every comparison of ``project`` gets its index in ``order`` (comparison ids, each once) as
    its queue position. Returns the number of comparisons placed."""
    position = {comparison_id: index for index, comparison_id in enumerate(order)}
    comparisons = list(Comparison.objects.filter(project=project).only("id", "queue_position"))
    for comparison in comparisons:
        comparison.queue_position = position[comparison.pk]
    Comparison.objects.bulk_update(comparisons, ["queue_position"], batch_size=2000)
    return len(comparisons)


def overlap_targets_update(*, project: Project) -> int:
    """Set each comparison's ``target_overlap`` by ``reduced_overlap``: with
    ``project.overlap_reduction`` on, one annotator where the stored ensemble preference and the
    judge pick the same side, both at least ``OVERLAP_CONFIDENCE`` sure; the project's overlap
    (stored as empty) everywhere else, and everywhere when the setting is off. Never below 1.
    Returns how many comparisons need fewer annotators than the overlap."""
    ids, preference, _, _ = _stored_scores(project)
    judged = judge_preferences(project=project) if project.overlap_reduction else {}
    scored = ~np.isnan(preference)
    judge = np.array([judged.get(cid, np.nan) for cid in ids], dtype=np.float64)
    targets = reduced_overlap(
        preference=np.where(scored, preference, 0.5),
        judge_preference=np.where(scored, judge, np.nan),
        overlap=project.overlap,
        enabled=project.overlap_reduction,
        confidence=OVERLAP_CONFIDENCE,
    )
    reduced = [
        cid for cid, target in zip(ids, targets.tolist(), strict=True) if target < project.overlap
    ]
    with transaction.atomic():
        Comparison.objects.filter(project=project).exclude(pk__in=reduced).exclude(
            target_overlap=None
        ).update(target_overlap=None)
        if reduced:
            Comparison.objects.filter(pk__in=reduced).update(target_overlap=1)
    return len(reduced)


def ensemble_scores_store(
    *,
    project: Project,
    comparison_ids: Sequence[int],
    rewards_a: np.ndarray,
    rewards_b: np.ndarray,
) -> int:
    """Store a retrained ensemble's view of the project's comparisons and re-order the queue.

    ``comparison_ids``: [N] comparisons of ``project``; ``rewards_a``, ``rewards_b``: [K, N] the
    K members' rewards of each comparison's response A and B. Stores P(A > B) and the members'
    std of r_A - r_B (``ensemble_scores``) on each comparison, then ``overlap_targets_update``
    and ``queue_order_apply``, in one transaction. ActiveQueueError (nothing written) when the
    shapes disagree or an id is not the project's. Returns the number of comparisons scored."""
    a, b = np.asarray(rewards_a, dtype=np.float64), np.asarray(rewards_b, dtype=np.float64)
    ids = list(comparison_ids)
    if a.ndim != 2 or a.shape != b.shape or a.shape[1] != len(ids):
        raise ActiveQueueError(
            f"rewards must be [K, N] with N = {len(ids)} comparisons, got {a.shape} and {b.shape}"
        )
    if not np.isfinite(a).all() or not np.isfinite(b).all():
        raise ActiveQueueError("rewards must be finite")
    known = set(Comparison.objects.filter(project=project, pk__in=ids).values_list("pk", flat=True))
    strangers = sorted(set(ids) - known)
    if strangers:
        raise ActiveQueueError(f"comparisons {strangers[:5]} are not in project {project.slug}")
    scores = ensemble_scores(rewards_a=a, rewards_b=b)
    with transaction.atomic():
        rows = list(Comparison.objects.filter(pk__in=ids).only("id"))
        index = {cid: i for i, cid in enumerate(ids)}
        for row in rows:
            i = index[row.pk]
            row.ensemble_preference = float(scores.preference[i])
            row.ensemble_disagreement = float(scores.disagreement[i])
        Comparison.objects.bulk_update(
            rows, ["ensemble_preference", "ensemble_disagreement"], batch_size=2000
        )
        overlap_targets_update(project=project)
        queue_order_apply(project=project)
    return len(ids)
