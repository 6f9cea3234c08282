"""The work queue's claims of rating and ranking items: leases, overlap, skips, gold items and
repeats, and the display order stored with each lease and answer.

A claim is one short transaction: it locks the next item in queue order that still has a free
slot and that the annotator was never given (``claims.slot_claim``, the primitive eval rounds
claim with too: ``SELECT ... FOR UPDATE SKIP LOCKED``), bumps its ``taken`` (active normal leases +
answers, never above the project's overlap) and ``served`` counters, and records a lease with the
display order (``policy.display_order``). Every
``gold_every``-th item is a gold item (everyone, outside the overlap) and every
``repeat_every``-th a repeat (an item answered at least ``REPEAT_MIN_DISTANCE`` items ago, shown in
the reversed order), as for pairs. Expired leases give their slots back (``policy.release_due``).
An answer is validated by the project's task-type plug-in and stored in stored terms.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Exists, F, OuterRef
from django.utils import timezone

from annotation.models import Project, TaskAnswer, TaskItem, TaskLease, TaskType
from annotation.work_queue.claims import slot_claim
from annotation.work_queue.plugins import AnswerError
from annotation.work_queue.policy import (
    REPEAT_MIN_DISTANCE,
    display_order,
    due,
    lease_skip,
    may_claim,
    release_due,
    release_expired,
    repeat_order,
)
from annotation.work_queue.registry import task_type_of

# Per process: project pk -> time.monotonic() of this process's last look for expired item leases.
_release_asked: dict[int, float] = {}


def _release_expired(project: Project) -> int:
    """Give the slots of expired item leases back to the pool; returns how many were released."""
    return release_expired(TaskLease.objects.filter(item__project=project), TaskItem, "item_id")


def _lease(item: TaskItem, annotator: AbstractBaseUser, kind: str, order: list[int]) -> TaskLease:
    minutes = item.project.lease_minutes
    return TaskLease.objects.create(
        item=item,
        annotator=annotator,
        kind=kind,
        order=order,
        expires_at=timezone.now() + timedelta(minutes=minutes),
    )


def _size(item: TaskItem) -> int:
    return item.positions.count()


def _never_given(annotator: AbstractBaseUser):
    given = TaskLease.objects.filter(item=OuterRef("pk"), annotator=annotator)
    answered = TaskAnswer.objects.filter(item=OuterRef("pk"), annotator=annotator)
    return ~Exists(given) & ~Exists(answered)


def _claim_normal(project: Project, annotator: AbstractBaseUser) -> TaskLease | None:
    """The first item in queue order below the overlap (``claims.slot_claim``: ``taken`` is the
    locked row's counter, so it is current under the lock)."""

    def lease(item: TaskItem, taken: int) -> TaskLease:
        TaskItem.objects.filter(pk=item.pk).update(taken=F("taken") + 1, served=F("served") + 1)
        item.project = project
        order = display_order(item.pk, item.served, _size(item))
        return _lease(item, annotator, TaskLease.Kind.NORMAL, order)

    candidates = (
        TaskItem.objects.filter(project=project, gold={}, taken__lt=project.overlap)
        .filter(_never_given(annotator))
        .order_by("queue_position", "pk")
    )
    return slot_claim(
        candidates, capacity=project.overlap, taken=lambda item: item.taken, lease=lease
    )


def _claim_gold(project: Project, annotator: AbstractBaseUser) -> TaskLease | None:
    """A gold item the annotator has not seen; gold items go to everyone, outside the overlap."""
    item = (
        TaskItem.objects.filter(project=project)
        .exclude(gold={})
        .filter(_never_given(annotator))
        .order_by("queue_position", "pk")
        .first()
    )
    if item is None:
        return None
    TaskItem.objects.filter(pk=item.pk).update(served=F("served") + 1)
    item.project = project
    order = display_order(item.pk, item.served, _size(item))
    return _lease(item, annotator, TaskLease.Kind.GOLD, order)


def _claim_repeat(project: Project, annotator: AbstractBaseUser) -> TaskLease | None:
    """An item the annotator answered a while ago and has not repeated, in the reversed order."""
    answered = list(
        TaskAnswer.objects.filter(item__project=project, annotator=annotator, repeat=False)
        .select_related("item")
        .order_by("-created_at")[REPEAT_MIN_DISTANCE : REPEAT_MIN_DISTANCE + 50]
    )
    repeated = set(
        TaskLease.objects.filter(
            annotator=annotator,
            kind=TaskLease.Kind.REPEAT,
            item_id__in=[a.item_id for a in answered],
        ).values_list("item_id", flat=True)
    )
    for answer in reversed(answered):  # the oldest first
        if answer.item_id not in repeated:
            answer.item.project = project
            return _lease(answer.item, annotator, TaskLease.Kind.REPEAT, repeat_order(answer.order))
    return None


def _claim_special(project: Project, annotator: AbstractBaseUser) -> TaskLease | None:
    """A repeat or a gold item when one is due for the annotator, else None."""
    done = TaskLease.objects.filter(
        item__project=project, annotator=annotator, status=TaskLease.Status.DONE
    ).count()
    try:
        with transaction.atomic():
            if due(project.repeat_every, done) and (repeat := _claim_repeat(project, annotator)):
                return repeat
            if due(project.gold_every, done) and (gold := _claim_gold(project, annotator)):
                return gold
    except IntegrityError:
        pass  # a concurrent tab claimed the same special item: fall back to a normal one
    return None


def _active_lease(project: Project, annotator: AbstractBaseUser) -> TaskLease | None:
    return (
        TaskLease.objects.filter(
            item__project=project,
            annotator=annotator,
            status=TaskLease.Status.ACTIVE,
            expires_at__gte=timezone.now(),
        )
        .order_by("pk")
        .first()
    )


def item_claim(*, annotator: AbstractBaseUser, project: Project) -> TaskLease | None:
    """The annotator's current item in a rating or ranking ``project``, or a newly claimed one;
    None when none is left. An active lease is returned again (a reload shows the same item, in
    the same order)."""
    if project.task_type == TaskType.PAIRWISE:
        raise AnswerError("pairwise projects claim pairs (annotation.services.labelling)")
    with transaction.atomic():
        released = release_due(project, asked=_release_asked, queue="item-release")
        if released:
            _release_expired(project)
        lease = _active_lease(project, annotator)
        if lease is None and not may_claim(project, annotator):
            return None
        if lease is None and (project.repeat_every or project.gold_every):
            lease = _claim_special(project, annotator)
        if lease is None:
            lease = _claim_normal(project, annotator)
        if lease is None and not released and _release_expired(project):
            lease = _claim_normal(project, annotator)
    return lease


def item_screen(lease: TaskLease) -> list[dict[str, Any]]:
    """The lease's responses in screen order: [{"slot": j, "position": p, "response": Response}]."""
    responses = {
        row.position: row.response
        for row in lease.item.positions.select_related("response").order_by("position")
    }
    return [
        {"slot": slot, "position": position, "response": responses[position]}
        for slot, position in enumerate(lease.order)
    ]


def item_submit(
    *,
    annotator: AbstractBaseUser,
    lease_id: int,
    answer: Mapping[str, Any],
    rationale: str = "",
    elapsed_ms: int | None = None,
) -> TaskAnswer:
    """Record the annotator's answer on their lease, validated by the project's task type and
    stored in stored terms with the lease's display order; idempotent (a second submission
    returns the stored answer unchanged). AnswerError (nothing written) for an answer the type
    refuses or a lease that is no longer theirs. A late submission of an expired, unreleased
    lease is kept."""
    with transaction.atomic():
        lease = (
            TaskLease.objects.select_for_update(of=("self",))
            .select_related("item__project")
            .filter(pk=lease_id, annotator=annotator)
            .exclude(status=TaskLease.Status.SKIPPED)
            .first()
        )
        if lease is None:
            raise AnswerError("this item is no longer assigned to you; the next one is loaded")
        repeat = lease.kind == TaskLease.Kind.REPEAT
        mine = TaskAnswer.objects.filter(item=lease.item, annotator=annotator, repeat=repeat)
        if lease.status == TaskLease.Status.DONE and (stored := mine.first()) is not None:
            return stored
        project = lease.item.project
        fields = task_type_of(project).validate(project, answer, list(lease.order))
        stored, _ = TaskAnswer.objects.get_or_create(
            item=lease.item,
            annotator=annotator,
            repeat=repeat,
            defaults={
                **fields,
                "gold": lease.kind == TaskLease.Kind.GOLD,
                "order": lease.order,
                "rationale": rationale[:10_000],
                "elapsed_ms": elapsed_ms,
            },
        )
        lease.status = TaskLease.Status.DONE
        lease.finished_at = timezone.now()
        lease.save(update_fields=["status", "finished_at"])
        return stored


def item_skip(*, annotator: AbstractBaseUser, lease_id: int) -> None:
    """Give the item back without answering; it is not offered to this annotator again."""
    lease_skip(TaskLease.objects.filter(annotator=annotator), TaskItem, "item_id", lease_id)
