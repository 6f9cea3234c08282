"""The work queue's claim primitive, the same for every lease table: rating and ranking items
(``items``, over TaskItem and TaskLease) and the eval rounds' items (monitoring, over its own
EvalItem and EvalAssignment; the queue knows nothing of them).

- ``slot_claim``: lock the first free slot in queue order (``SELECT ... FOR UPDATE SKIP LOCKED``,
  so concurrent claims never wait on each other), count its taken places again under the lock,
  create the lease in a savepoint, and move on to the next slot when the slot filled up meanwhile
  or the lease cannot be made (an IntegrityError: the same person claiming in a second tab).
  When every free slot is locked by other claims at that instant, it looks again a few times
  after a pause of milliseconds (``BUSY_WAITS_S``) instead of saying that nothing is left: those
  claims commit within milliseconds, and a slot they did not fill is free again.

Expired leases of every table go back to the pool through one function, ``policy.release_expired``
(with a ``taken`` counter on the slot, or, for eval items, places counted from the leases).

Pairwise labelling keeps its one-statement SQL claim (annotation/services/labelling.py, measured
by bench/load_labelling.py) with the same rules: lock in queue order with SKIP LOCKED, never above
the overlap, one lease per person and pair.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from django.db import IntegrityError, models, transaction

Slot = TypeVar("Slot", bound=models.Model)
Lease = TypeVar("Lease")
Got = TypeVar("Got")

# Slots a claim looks at before it gives up (each one full or refused under the lock).
TRIES = 20
# Pauses (seconds) before looking again when every candidate slot is locked by other claims:
# at most 0.35 s in all, far longer than a claim's transaction holds its lock.
BUSY_WAITS_S = (0.01, 0.02, 0.04, 0.08, 0.2)


def after_locks(
    take: Callable[[], Got | None], locked_left: Callable[[], bool], waits: Iterator[float]
) -> Got | None:
    """``take()``'s result; when it finds nothing but ``locked_left()`` says a candidate is still
    there (locked by another claim, about to commit), it pauses for the next of ``waits`` and
    takes again. None when nothing is left, or still nothing after the last pause."""
    while (got := take()) is None:
        pause = next(waits, None)
        if pause is None or not locked_left():
            return None
        time.sleep(pause)
    return got


def slot_claim(
    candidates: models.QuerySet[Slot],
    *,
    capacity: int | None,
    taken: Callable[[Slot], int],
    lease: Callable[[Slot, int], Lease],
    tries: int = TRIES,
) -> Lease | None:
    """The lease on the first free slot among ``candidates``, or None when none is free.

    ``candidates``: the slots this claimant may take, in queue order (an ordered queryset that can
    be locked: no aggregation; already narrowed to slots never given to the claimant and, as far
    as the query can tell, below ``capacity``). ``capacity``: places per slot (the overlap, the
    reviewers per item); None for slots outside it (gold). ``taken(slot)``: the slot's places taken
    now, asked under its lock (a counter on the locked row, or a count of its leases).
    ``lease(slot, taken)``: creates and returns the lease (and bumps any counter); it runs in a
    savepoint, so an IntegrityError undoes it and the next slot is tried.

    Runs inside the caller's transaction: the slot stays locked until it commits, so two claims
    can never both take a slot's last place. At most ``tries`` slots are looked at. None only when
    no candidate is left unlocked after the ``BUSY_WAITS_S`` pauses (a candidate locked by
    another claim may still have a place once that claim commits)."""
    if not candidates.ordered:
        raise ValueError("slot_claim needs the candidates in queue order (order_by)")
    if not transaction.get_connection(candidates.db).in_atomic_block:
        raise RuntimeError("slot_claim runs inside a transaction (the lock lasts until commit)")
    passed: list[int] = []
    waits = iter(BUSY_WAITS_S)
    looked = 0
    while looked < tries:
        pool = candidates.exclude(pk__in=passed) if passed else candidates
        locking = pool.select_for_update(skip_locked=True, of=("self",))
        slot = after_locks(locking.first, pool.exists, waits)
        if slot is None:
            return None  # nothing left, or still locked by others after every pause
        looked += 1
        held = taken(slot)
        if capacity is None or held < capacity:
            try:
                with transaction.atomic():
                    return lease(slot, held)
            except IntegrityError:
                pass  # the claimant holds this slot already (another tab): try the next
        passed.append(slot.pk)
    return None
