"""The work queue's claim primitive (annotation.work_queue.claims), shared by rating and ranking
items and the eval rounds: the first free slot in queue order, a slot re-counted full under its
lock is passed, a lease refused by a constraint moves on to the next slot, nothing is written for
a slot it passes; and the queue's one release (policy.release_expired) for slots without a
counter."""

import threading
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from annotation.models import TaskItem, TaskLease
from annotation.work_queue.claims import slot_claim
from annotation.work_queue.policy import release_expired
from tests.helpers.locks import claim_while_held
from tests.helpers.task_items import annotators, rating_project

pytestmark = pytest.mark.django_db


def _lease_for(user):
    """A lease callable in the items' way: bump the counter, record the lease."""

    def lease(item: TaskItem, taken: int) -> TaskLease:
        TaskItem.objects.filter(pk=item.pk).update(taken=F("taken") + 1)
        return TaskLease.objects.create(
            item=item, annotator=user, order=[0], expires_at=timezone.now() + timedelta(minutes=5)
        )

    return lease


def _claim(project, user, *, taken=None, lease=None):
    candidates = TaskItem.objects.filter(project=project).order_by("queue_position", "pk")
    with transaction.atomic():
        return slot_claim(
            candidates,
            capacity=project.overlap,
            taken=taken or (lambda item: item.taken),
            lease=lease or _lease_for(user),
        )


def test_the_first_slot_in_queue_order_is_claimed_with_the_count_before_it():
    """Items 0, 1, 2 in queue order, overlap 2: the claim takes item 0 and its lease sees 0 taken."""
    project, items = rating_project(3, overlap=2)
    (user,) = annotators(project, 1)
    seen = []

    def lease(item, taken):
        seen.append((item.pk, taken))
        return _lease_for(user)(item, taken)

    made = _claim(project, user, lease=lease)
    assert made.item_id == items[0].pk and seen == [(items[0].pk, 0)]
    assert TaskItem.objects.get(pk=items[0].pk).taken == 1


def test_a_slot_full_under_its_lock_is_passed_and_left_unchanged():
    """The count under the lock says item 0 is full (2 of 2): item 1 is leased instead, and
    item 0's counter and leases are untouched."""
    project, items = rating_project(3, overlap=2)
    (user,) = annotators(project, 1)
    full = {items[0].pk: 2}
    made = _claim(project, user, taken=lambda item: full.get(item.pk, item.taken))
    assert made.item_id == items[1].pk
    assert TaskItem.objects.get(pk=items[0].pk).taken == 0
    assert not TaskLease.objects.filter(item=items[0]).exists()


def test_a_refused_lease_is_undone_and_the_next_slot_is_tried():
    """An IntegrityError in the lease (the same person's second tab) rolls back its savepoint,
    counter bump included, and the claim moves on to item 1."""
    project, items = rating_project(3, overlap=2)
    (user,) = annotators(project, 1)

    def lease(item, taken):
        TaskItem.objects.filter(pk=item.pk).update(taken=F("taken") + 1)
        if item.pk == items[0].pk:
            raise IntegrityError("duplicate lease")
        return _lease_for(user)(item, taken)

    made = _claim(project, user, lease=lease)
    assert made.item_id == items[1].pk
    assert TaskItem.objects.get(pk=items[0].pk).taken == 0


def test_nothing_free_gives_none_and_gold_has_no_capacity():
    """Every slot full: None after looking at each once; capacity None (gold) takes a full one."""
    project, items = rating_project(2, overlap=1)
    (user,) = annotators(project, 1)
    assert _claim(project, user, taken=lambda item: 1) is None
    candidates = TaskItem.objects.filter(project=project).order_by("queue_position")
    with transaction.atomic():
        made = slot_claim(candidates, capacity=None, taken=lambda i: 9, lease=_lease_for(user))
    assert made.item_id == items[0].pk


def test_unordered_candidates_are_refused():
    """Without an order_by "the first free slot" means nothing: ValueError, nothing claimed."""
    project, _ = rating_project(1)
    (user,) = annotators(project, 1)
    with transaction.atomic(), pytest.raises(ValueError, match="queue order"):
        slot_claim(TaskItem.objects.all(), capacity=1, taken=len, lease=_lease_for(user))
    assert not TaskLease.objects.exists()


def test_release_without_a_counter_deletes_lapsed_active_leases_only():
    """The queue's one release (policy.release_expired) over leases whose slots count their
    places from the leases (slots None, as eval items): leases claimed 40, 10 and 50 minutes ago,
    the last one done, lapsed when claimed over 30 minutes ago. Only the first is deleted (1
    returned); the taken counters (1 each, from the claims) are not touched; a second call
    releases nothing."""
    project, items = rating_project(3, overlap=2)
    old, fresh, done = (_lease_for(u) for u in annotators(project, 3))
    leases = [old(items[0], 0), fresh(items[1], 0), done(items[2], 0)]
    now = timezone.now()
    for lease, minutes in zip(leases, (40, 10, 50), strict=True):
        TaskLease.objects.filter(pk=lease.pk).update(claimed_at=now - timedelta(minutes=minutes))
    TaskLease.objects.filter(pk=leases[2].pk).update(status=TaskLease.Status.DONE)
    lapsed = Q(claimed_at__lt=now - timedelta(minutes=30))
    with transaction.atomic():
        assert release_expired(TaskLease.objects.all(), lapsed=lapsed) == 1
    assert set(TaskLease.objects.values_list("pk", flat=True)) == {leases[1].pk, leases[2].pk}
    assert list(TaskItem.objects.order_by("pk").values_list("taken", flat=True)) == [1, 1, 1]
    with transaction.atomic():
        assert release_expired(TaskLease.objects.all(), lapsed=lapsed) == 0


# Threads need committed rows: a transactional test. Not serialized_rollback: right after a plain
# transactional test (whose flush re-creates the role groups) its restore would clash on them.
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_slot_locked_by_one_claim_is_skipped_by_another():
    """A claim outside a transaction is refused (its lock would end at once). While one claim
    holds item 0's lock (its transaction open), a claim on another connection does not wait: it
    takes item 1 (SKIP LOCKED)."""
    project, items = rating_project(2, overlap=2)
    first, second = annotators(project, 2)
    ordered = TaskItem.objects.order_by("pk")
    with pytest.raises(RuntimeError, match="inside a transaction"):  # a lock would end at once
        slot_claim(ordered, capacity=2, taken=len, lease=_lease_for(first))
    if connection.vendor != "postgresql":
        pytest.skip("row locks with SKIP LOCKED need PostgreSQL (make test uses it)")
    holding, release = threading.Event(), threading.Event()
    got: dict[str, int] = {}

    def hold() -> None:
        try:
            with transaction.atomic():
                got["first"] = _claim(project, first).item_id
                holding.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    thread = threading.Thread(target=hold)
    thread.start()
    assert holding.wait(timeout=30)
    try:
        got["second"] = _claim(project, second).item_id
    finally:
        release.set()
        thread.join(timeout=30)
    assert got == {"first": items[0].pk, "second": items[1].pk}


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
@pytest.mark.parametrize(("overlap", "expected"), [(2, "item 0"), (1, None)])
def test_a_claim_finding_every_free_slot_locked_looks_again_after_a_pause(
    monkeypatch, overlap, expected
):
    """One item. Another claim holds its lock, so the claim finds nothing unlocked; the item is
    still a candidate, so it pauses (the other claim commits meanwhile: the patched sleep lets it)
    and looks again. Overlap 2: the item has a place left and the claim takes it. Overlap 1: the
    other claim filled it, and the claim says None after one pause, not after all of them."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks with SKIP LOCKED need PostgreSQL (make test uses it)")
    project, items = rating_project(1, overlap=overlap)
    first, second = annotators(project, 2)
    made, pauses = claim_while_held(
        monkeypatch,
        "annotation.work_queue.claims.time.sleep",
        hold=lambda: _claim(project, first),
        claim=lambda: _claim(project, second),
    )
    assert (made and f"item {items.index(made.item)}") == expected and len(pauses) == 1
    assert TaskLease.objects.filter(item=items[0]).count() == (2 if expected else 1)
