"""Read an iterator ahead in a worker thread, so that the caller's waits overlap with its work.

The import's PostgreSQL path spends most of its time waiting for the server (COPY, the set-based
statements); psycopg lets go of the GIL while it waits, so a thread that reads and checks the next
rows of the file in the meantime takes time off the import instead of adding to it. The worker
touches no database connection (Django's are per thread): it runs only the pure reading.

With ``share_db``, the worker reads from the database itself, through the caller's own connection
(Django's connections are per thread; the worker is handed the caller's, as Django's live test
server hands its threads the test's): the reads see what the caller's transaction sees, and
psycopg's connection lock runs one statement at a time. The export's PostgreSQL reads run there
while the caller formats and writes the previous chunk (``annotation.services.exporting``).

Memory stays bounded: the worker holds at most ``depth`` batches of ``batch`` items beyond what the
caller has taken.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from itertools import islice
from typing import TypeVar

from django.db import connections

T = TypeVar("T")
_POLL_S = 0.1  # how often a worker blocked on a full queue looks whether the caller has gone


def read_ahead(
    items: Iterator[T], *, batch: int, depth: int, share_db: str | None = None
) -> Iterator[T]:
    """The items of ``items``, in order, read by a worker thread up to ``depth`` batches of
    ``batch`` items ahead of the caller. An exception raised while reading is raised here, where
    the item it stopped at would have come; closing this generator (or an exception in the caller)
    stops the worker and closes ``items``. ``share_db``: a database alias whose connection, the
    caller's, the worker uses for the reads ``items`` makes (None: the worker makes none)."""
    handoff: queue.Queue[list[T] | BaseException] = queue.Queue(maxsize=depth)
    stop = threading.Event()
    shared = connections[share_db] if share_db is not None else None

    def put(value: list[T] | BaseException) -> bool:
        while not stop.is_set():
            try:
                handoff.put(value, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        if shared is not None:
            connections[shared.alias] = shared  # this thread's reads go through the caller's
        try:
            while not stop.is_set():
                chunk = list(islice(items, batch))
                if not put(chunk) or not chunk:
                    return
        except BaseException as exc:  # handed to the caller, which raises it
            put(exc)
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=work, name="read-ahead", daemon=True)
    if shared is not None:
        shared.inc_thread_sharing()
    worker.start()
    try:
        while True:
            got = handoff.get()
            if isinstance(got, BaseException):
                raise got
            if not got:
                return
            yield from got
    finally:
        stop.set()
        worker.join()
        if shared is not None:
            shared.dec_thread_sharing()
