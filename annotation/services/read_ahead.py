"""Read an iterator ahead in a worker thread, so that the caller's waits overlap with its work.

The import's PostgreSQL path spends most of its time waiting for the server (COPY, the set-based
statements); psycopg lets go of the GIL while it waits, so a thread that reads and checks the next
rows of the file in the meantime takes time off the import instead of adding to it. The worker
touches no database connection (Django's are per thread): it runs only the pure reading. The
export's reads (annotation.services.export_reads) run here too, each on the worker thread's own
connection, which they close when done.

Memory stays bounded: the worker holds at most ``depth`` batches of ``batch`` items beyond what the
caller has taken.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from itertools import islice
from typing import TypeVar

T = TypeVar("T")
_POLL_S = 0.1  # how often a worker blocked on a full queue looks whether the caller has gone


def read_ahead(items: Iterator[T], *, batch: int, depth: int) -> Iterator[T]:
    """The items of ``items``, in order, read by a worker thread up to ``depth`` batches of
    ``batch`` items ahead of the caller. An exception raised while reading is raised here, where
    the item it stopped at would have come; closing this generator (or an exception in the caller)
    stops the worker and closes ``items``."""
    handoff: queue.Queue[list[T] | BaseException] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(value: list[T] | BaseException) -> bool:
        while not stop.is_set():
            try:
                handoff.put(value, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
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
