"""Eval rounds on the shared work queue (annotation.work_queue): the claim of an item for a
reviewer and the expiry of unanswered assignments, over monitoring's EvalItem and EvalAssignment.

A claim is ``claims.slot_claim``, the primitive rating and ranking items claim with: it locks the
first rateable item in round order (``position``) still short of ``reviewers_per_item`` reviewers
and never given to this reviewer (``SELECT ... FOR UPDATE SKIP LOCKED``), counts its assignments
again under the lock, and records the assignment (a unique (item, reviewer) constraint makes a
second one impossible; a second tab's IntegrityError moves on to the next item). Rateable: drawn
for the reviewers (``EvalItem.for_humans``) and not answered identically by both models
(``eval_selectors.rateable_items``); an identical item is never handed out.

Sides are counterbalanced with the queue's pair rule (``policy.side_for``): the k-th reviewer of
item i sees the checkpoint on the left when (i + k) is even, so each item and the round as a whole
show the checkpoint on both sides about equally, and no reviewer can learn a fixed side. The side
is stored with the assignment, and so with its judgement.

An assignment left unanswered for ``LEASE`` returns its place to the pool
(``claims.stale_leases_release``): looked for at most every ``policy.RELEASE_EVERY_S`` seconds per
round (``policy.release_due``), and at once when a claim finds nothing free. A reviewer's own
unanswered assignment is handed back to them first, however old.
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Count, Exists, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from annotation.work_queue.claims import slot_claim, stale_leases_release
from annotation.work_queue.policy import release_due, side_for
from monitoring.models import EvalAssignment, EvalItem, EvalJudgement, EvalRound
from monitoring.selectors import eval_rounds as eval_selectors

# An unanswered assignment older than this returns its place to the pool.
LEASE = timedelta(minutes=30)
Side = EvalAssignment.Side

# Per process: round pk -> time.monotonic() of this process's last look for stale assignments.
_release_asked: dict[int, float] = {}


def _unanswered(round_: EvalRound) -> QuerySet[EvalAssignment]:
    answered = EvalJudgement.objects.filter(assignment=OuterRef("pk"))
    return EvalAssignment.objects.filter(item__round=round_).filter(~Exists(answered))


def stale_assignments_release(round_: EvalRound) -> int:
    """Delete the round's assignments left unanswered for longer than ``LEASE``; returns how
    many (their items are handed out again)."""
    return stale_leases_release(_unanswered(round_), claimed_before=timezone.now() - LEASE)


def _open_assignment(round_: EvalRound, reviewer: AbstractBaseUser) -> EvalAssignment | None:
    return (
        _unanswered(round_)
        .filter(reviewer=reviewer)
        .select_related("item__prompt")
        .order_by("item__position")
        .first()
    )


def _candidates(round_: EvalRound, reviewer: AbstractBaseUser) -> QuerySet[EvalItem]:
    """Rateable items short of reviewers that this reviewer was never given, in round order
    (lockable: the count of assignments is a correlated subquery, not a GROUP BY)."""
    taken = (
        EvalAssignment.objects.filter(item=OuterRef("pk"))
        .order_by()
        .values("item")
        .annotate(n=Count("pk"))
        .values("n")
    )
    mine = EvalAssignment.objects.filter(item=OuterRef("pk"), reviewer=reviewer)
    return (
        eval_selectors.rateable_items(round_)
        .filter(~Exists(mine))
        .annotate(n_taken=Coalesce(Subquery(taken), 0))
        .filter(n_taken__lt=round_.reviewers_per_item)
        .order_by("position", "pk")
    )


def _claim(round_: EvalRound, reviewer: AbstractBaseUser) -> EvalAssignment | None:
    def lease(item: EvalItem, taken: int) -> EvalAssignment:
        # Stored position 0 (side "a" of the queue's rule) is the checkpoint's answer.
        first = side_for(item.position, taken) == "a"
        left = Side.CHECKPOINT if first else Side.BASELINE
        return EvalAssignment.objects.create(item=item, reviewer=reviewer, shown_left=left)

    return slot_claim(
        _candidates(round_, reviewer),
        capacity=round_.reviewers_per_item,
        taken=lambda item: EvalAssignment.objects.filter(item=item).count(),
        lease=lease,
    )


def assignment_claim(*, reviewer: AbstractBaseUser, round_: EvalRound) -> EvalAssignment | None:
    """The reviewer's unanswered assignment in ``round_`` (open or not: the caller checks), else
    a newly claimed item; None when nothing is left for them. Returned with its item and prompt."""
    mine = _open_assignment(round_, reviewer)
    if mine is not None:
        return mine
    with transaction.atomic():
        released = release_due(round_, asked=_release_asked, queue="eval-release")
        if released:
            stale_assignments_release(round_)
        claimed = _claim(round_, reviewer)
        if claimed is None and not released and stale_assignments_release(round_):
            claimed = _claim(round_, reviewer)
    if claimed is None:
        return None
    return EvalAssignment.objects.select_related("item__prompt").get(pk=claimed.pk)
