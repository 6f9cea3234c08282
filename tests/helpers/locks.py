"""A row lock held by another connection while the code under test claims: the claim finds the
row locked, pauses, and the holder commits during that pause."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from django.db import connection, transaction

T = TypeVar("T")


def claim_while_held(
    monkeypatch, sleep_path: str, hold: Callable[[], object], claim: Callable[[], T]
) -> tuple[T, list[float]]:
    """``hold()`` runs in a thread, in a transaction left open until ``claim()`` (here) first
    sleeps: ``sleep_path`` (e.g. "annotation.work_queue.claims.time.sleep") is patched so that the
    pause lets the holder commit instead. Returns what ``claim()`` returned and the pauses asked
    for (seconds). Needs a transactional test (the holder's rows must be committed to be seen)."""
    holding, release = threading.Event(), threading.Event()

    def holder() -> None:
        try:
            with transaction.atomic():
                hold()
                holding.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    thread = threading.Thread(target=holder)
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        release.set()
        thread.join(timeout=30)

    monkeypatch.setattr(sleep_path, pause)
    thread.start()
    assert holding.wait(timeout=30), "the holder never took its lock"
    try:
        got = claim()
    finally:
        release.set()
        thread.join(timeout=30)
    return got, pauses
