"""Eval rounds on the shared work queue (annotation.work_queue): the claim of an item for a
reviewer, repeats, skips and the expiry of unanswered assignments, over monitoring's EvalItem and
EvalAssignment (the queue's lease: a kind, normal or repeat, and a state, active, done or skipped).

A claim is ``claims.slot_claim``, the primitive rating and ranking items claim with: it locks the
first rateable item in round order (``position``) still short of ``reviewers_per_item`` reviewers
and never given to this reviewer (``SELECT ... FOR UPDATE SKIP LOCKED``), counts its places again
under the lock (its normal assignments not skipped), and records the assignment (a unique (item,
reviewer, kind) constraint makes a second one impossible; a second tab's IntegrityError moves on
to the next item). Rateable: drawn for the reviewers (``EvalItem.for_humans``) and not answered
identically by both models (``eval_selectors.rateable_items``); an identical item is never handed
out.

Sides are counterbalanced with the queue's pair rule (``policy.side_for``): the k-th reviewer of
item i sees the checkpoint on the left when (i + k) is even, so each item and the round as a whole
show the checkpoint on both sides about equally, and no reviewer can learn a fixed side. The side
is stored with the assignment, and so with its judgement.

Skips (``assignment_skip``, the queue's ``policy.lease_skip``): the skipped assignment stays, marked
skipped; it no longer holds a place, so the item goes back to the pool for other reviewers, and
it is never offered to the same reviewer again.

Repeats, as in the labelling projects: with ``round.repeat_every`` = n, when the reviewer's next
item is the n-th (``policy.due`` over their finished assignments), they are shown again an item
they rated at least ``policy.REPEAT_MIN_DISTANCE`` ratings ago (the oldest not yet repeated), with
the sides flipped (``policy.repeat_order``). Its answer is a repeat judgement: it never counts in
the round's results, it measures the reviewer's self-consistency.

An assignment left unanswered for ``LEASE`` returns its place to the pool through the queue's one
release, ``policy.release_expired``: looked for at most every ``policy.RELEASE_EVERY_S`` seconds
per round (``policy.release_due``), and at once when a claim finds nothing free. A reviewer's own
unanswered assignment is handed back to them first, however old.
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from annotation.work_queue.claims import slot_claim
from annotation.work_queue.policy import (
    REPEAT_MIN_DISTANCE,
    due,
    lease_skip,
    release_due,
    release_expired,
    repeat_order,
    side_for,
)
from monitoring.eval_rating import assignment_order
from monitoring.models import EVAL_PAIR, EvalAssignment, EvalItem, EvalJudgement, EvalRound
from monitoring.selectors import eval_rounds as eval_selectors

# An unanswered assignment older than this returns its place to the pool.
LEASE = timedelta(minutes=30)
Side, Kind, Status = EvalAssignment.Side, EvalAssignment.Kind, EvalAssignment.Status
# The assignments that hold one of an item's ``reviewers_per_item`` places.
HOLDS_A_PLACE = Q(kind=Kind.NORMAL) & ~Q(status=Status.SKIPPED)

# Per process: round pk -> time.monotonic() of this process's last look for stale assignments.
_release_asked: dict[int, float] = {}


def stale_assignments_release(round_: EvalRound) -> int:
    """Delete the round's assignments left unanswered for longer than ``LEASE``; returns how
    many (their items are handed out again)."""
    with transaction.atomic():
        return release_expired(
            EvalAssignment.objects.filter(item__round=round_),
            lapsed=Q(created_at__lt=timezone.now() - LEASE),
        )


def _open_assignment(round_: EvalRound, reviewer: AbstractBaseUser) -> EvalAssignment | None:
    return (
        EvalAssignment.objects.filter(item__round=round_, reviewer=reviewer, status=Status.ACTIVE)
        .select_related("item__prompt")
        .order_by("item__position", "pk")
        .first()
    )


def _candidates(round_: EvalRound, reviewer: AbstractBaseUser) -> QuerySet[EvalItem]:
    """Rateable items short of reviewers that this reviewer was never given (nor skipped), in
    round order (lockable: the count of places is a correlated subquery, not a GROUP BY)."""
    taken = (
        EvalAssignment.objects.filter(HOLDS_A_PLACE, item=OuterRef("pk"))
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
        taken=lambda item: EvalAssignment.objects.filter(HOLDS_A_PLACE, item=item).count(),
        lease=lease,
    )


def _claim_repeat(round_: EvalRound, reviewer: AbstractBaseUser) -> EvalAssignment | None:
    """A repeat of the oldest item the reviewer rated at least REPEAT_MIN_DISTANCE ratings ago and
    has not repeated, sides flipped; None when there is none (yet)."""
    rated = list(
        EvalJudgement.objects.filter(assignment__item__round=round_, assignment__reviewer=reviewer)
        .select_related("assignment")
        .order_by("-created_at", "-pk")[REPEAT_MIN_DISTANCE : REPEAT_MIN_DISTANCE + 50]
    )
    repeated = set(
        EvalAssignment.objects.filter(
            reviewer=reviewer,
            kind=Kind.REPEAT,
            item_id__in=[j.assignment.item_id for j in rated],
        ).values_list("item_id", flat=True)
    )
    for judgement in reversed(rated):  # the oldest first
        first = judgement.assignment
        if first.item_id in repeated:
            continue
        flipped = repeat_order(assignment_order(first.shown_left))
        return EvalAssignment.objects.create(
            item_id=first.item_id,
            reviewer=reviewer,
            kind=Kind.REPEAT,
            shown_left=EVAL_PAIR[flipped[0]],
        )
    return None


def _repeat_if_due(round_: EvalRound, reviewer: AbstractBaseUser) -> EvalAssignment | None:
    done = EvalAssignment.objects.filter(
        item__round=round_, reviewer=reviewer, status=Status.DONE
    ).count()
    if not due(round_.repeat_every, done):
        return None
    try:
        with transaction.atomic():
            return _claim_repeat(round_, reviewer)
    except IntegrityError:
        return None  # another tab claimed the same repeat: a normal item instead


def assignment_claim(*, reviewer: AbstractBaseUser, round_: EvalRound) -> EvalAssignment | None:
    """The reviewer's unanswered assignment in ``round_`` (open or not: the caller checks), else
    a repeat when one is due, else a newly claimed item; None when nothing is left for them.
    Returned with its item and prompt."""
    mine = _open_assignment(round_, reviewer)
    if mine is not None:
        return mine
    with transaction.atomic():
        released = release_due(round_, asked=_release_asked, queue="eval-release")
        if released:
            stale_assignments_release(round_)
        claimed = _repeat_if_due(round_, reviewer) if round_.repeat_every else None
        if claimed is None:
            claimed = _claim(round_, reviewer)
        if claimed is None and not released and stale_assignments_release(round_):
            claimed = _claim(round_, reviewer)
    if claimed is None:
        return None
    return EvalAssignment.objects.select_related("item__prompt").get(pk=claimed.pk)


def assignment_skip(*, reviewer: AbstractBaseUser, assignment_id: int) -> bool:
    """The reviewer gives their active assignment back unanswered (``policy.lease_skip``): the
    item returns to the pool for others, never to them. False when it was not theirs and active."""
    return lease_skip(
        EvalAssignment.objects.filter(reviewer=reviewer), None, "item_id", assignment_id
    )
