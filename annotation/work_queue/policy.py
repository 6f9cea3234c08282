"""The work queue's shared rules: when a gold item or a repeat is due, when a claim looks for
expired leases, who may claim, and which display order an annotator is shown. (How a claim locks
a slot is ``claims``.)

Display order: a pair's left side alternates between the annotators of a comparison
(``side_for``: its ``served`` counter's parity, started from the id's); K responses are shown in a
rotation of a per-item random permutation (``display_order``): the k-th annotator of an item sees
the permutation rotated by k, so over K annotators every response is shown once in every slot
(a Latin square per item), and the starting permutation differs between items.
"""

from __future__ import annotations

import random
import time

from django.contrib.auth.models import AbstractBaseUser
from django.core.cache import cache
from django.db import models, transaction
from django.db.models import F
from django.utils import timezone

from annotation.models import Assignment, Project, ProjectMembership, Side

# Leases (Assignment for pairs, TaskLease for items) share these kinds and states.
Kind, Status = Assignment.Kind, Assignment.Status

# Repeats come from items answered at least this many items ago (memory of the answer fades).
REPEAT_MIN_DISTANCE = 5
# Claims look for expired leases to release at most this often per project (seconds).
RELEASE_EVERY_S = 5


def release_due(project: models.Model, *, asked: dict[int, float], queue: str) -> bool:
    """True for one claim per project and queue every RELEASE_EVERY_S seconds (across all web
    processes): looking for expired leases on every claim costs a locking query each time, and a
    slot that comes back a few seconds later changes nothing. A claim that finds nothing free
    looks at once.

    Each process asks the shared cache at most once per window (the other claims of the window
    skip that round trip); a race between two threads costs one extra ask, never a second release.
    ``project``: the owner of the pool (a Project; an EvalRound for the eval rounds' queue);
    ``asked``: the calling queue's per-process note (owner pk -> time.monotonic() of its last
    turn); ``queue`` names its lease table in the cache key (pairs: "lease-release", items:
    "item-release", eval rounds: "eval-release").
    """
    now = time.monotonic()
    if now - asked.get(project.pk, -RELEASE_EVERY_S) < RELEASE_EVERY_S:
        return False
    asked[project.pk] = now
    return cache.add(f"concord:{queue}:{project.pk}", 1, RELEASE_EVERY_S)


def release_expired(
    leases: models.QuerySet,
    slots: type[models.Model] | None = None,
    slot_field: str = "",
    *,
    lapsed: models.Q | None = None,
) -> int:
    """Give the slots of expired leases back to the pool; returns how many were released. The one
    release of every queue: pairs, rating and ranking items, eval rounds.

    ``leases``: the pool's leases (Assignment, TaskLease or EvalAssignment rows), each with a
    ``status`` and a ``kind``; only active ones expire, and expired ones are deleted. ``slots``:
    the model whose ``taken`` counter a normal lease holds (Comparison or TaskItem), named on the
    lease by ``slot_field`` ("comparison_id" or "item_id"); None where a slot's places are counted
    from its leases (eval items), so deleting the lease is the release. ``lapsed``: which active
    leases have run out (default: ``expires_at`` passed; eval rounds: claimed LEASE ago). Locks
    with SKIP LOCKED: a lease another claim is releasing, or one being answered now, is left to
    it. At most 500 per call; runs inside the caller's transaction."""
    expired = list(
        leases.select_for_update(skip_locked=True, of=("self",))
        .filter(lapsed if lapsed is not None else models.Q(expires_at__lt=timezone.now()))
        .filter(status=Status.ACTIVE)
        .order_by("pk")
        .values_list("pk", slot_field or "pk", "kind")[:500]
    )
    if not expired:
        return 0
    leases.model.objects.filter(pk__in=[pk for pk, _, _ in expired]).delete()
    if slots is None:
        return len(expired)
    for slot_id in sorted({sid for _, sid, kind in expired if kind == Kind.NORMAL}):
        released = sum(1 for _, sid, kind in expired if sid == slot_id and kind == Kind.NORMAL)
        slots.objects.filter(pk=slot_id).update(taken=F("taken") - released)
    return len(expired)


def lease_skip(
    leases: models.QuerySet,
    slots: type[models.Model] | None,
    slot_field: str,
    lease_id: int,
) -> bool:
    """Mark the active lease ``lease_id`` among ``leases`` (already narrowed to the annotator's)
    skipped; a normal lease gives its slot back (``slots``' ``taken``, by ``slot_field``; with
    ``slots`` None the slot's places are counted from its unskipped leases, so the status is the
    release). The skipped lease stays, so the slot is never offered to the same annotator again.
    Returns False when there was no such active lease."""
    with transaction.atomic():
        lease = leases.select_for_update().filter(pk=lease_id, status=Status.ACTIVE).first()
        if lease is None:
            return False
        lease.status = Status.SKIPPED
        lease.finished_at = timezone.now()
        lease.save(update_fields=["status", "finished_at"])
        if slots is not None and lease.kind == Kind.NORMAL:
            slots.objects.filter(pk=getattr(lease, slot_field)).update(taken=F("taken") - 1)
    return True


def due(every: int, done: int) -> bool:
    """Whether the annotator's next item (after ``done`` finished ones) is the ``every``-th."""
    return every > 0 and done > 0 and done % every == every - 1


def may_claim(project: Project, annotator: AbstractBaseUser) -> bool:
    """False in an archived project and for a paused (or reviewer) member; asked before a new claim
    only (one query). Locks the membership row until the claim commits, so a pause
    (services.projects.member_pause) waits for a claim in flight, then releases its lease too."""
    if project.archived_at is not None:
        return False
    membership = (
        ProjectMembership.objects.select_for_update(no_key=True)
        .filter(project=project, user=annotator)
        .values_list("role", "paused_at")
        .first()
    )
    return membership is None or membership == (ProjectMembership.Role.ANNOTATOR, None)


def side_for(pk: int, served: int) -> str:
    """The stored side shown on the left to a comparison's next annotator (``served`` before
    them): alternating, starting from the id's parity so that A is not always first."""
    return Side.A if (pk + served) % 2 == 0 else Side.B


def display_order(pk: int, served: int, size: int) -> list[int]:
    """The stored positions (0 .. size-1) in the screen order of an item's next annotator
    (``served`` before them): the item's permutation (seeded by its id) rotated by ``served``."""
    if size < 1:
        raise ValueError(f"an item has at least one response, got {size}")
    base = list(range(size))
    random.Random(pk).shuffle(base)  # noqa: S311  # nosec B311 (an order, not a secret)
    shift = served % size
    return base[shift:] + base[:shift]


def repeat_order(order: list[int]) -> list[int]:
    """The order a repeat shows: the first showing's reversed (a pair: sides flipped)."""
    return list(reversed(order))
