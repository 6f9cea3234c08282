"""Sending Celery tasks from services: by the task's registered name, the one way every app does it.

A task module imports the service it calls, so a service never imports its tasks module, not even
lazily inside a function: it names the task. Every task is registered under its dotted path
(``"annotation.tasks.agreement_report_refresh"`` is ``agreement_report_refresh`` in
``annotation/tasks.py``), so the name is also where to find it; ``task_send`` imports it from there at
send time. Sending the task object (not ``app.send_task``) keeps the routes of settings and the eager
mode of tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import import_module
from typing import Any

from django.db import transaction


def _task(name: str) -> Any:
    module, _, function = name.rpartition(".")
    task = getattr(import_module(module), function, None)
    if task is None or getattr(task, "name", None) != name:
        raise LookupError(f"no Celery task registered as {name!r} in {module}")
    return task


def task_send(
    name: str,
    *,
    args: Sequence[Any] = (),
    queue: str | None = None,
    countdown: float | None = None,
    on_commit: bool = True,
) -> None:
    """Send the task registered as ``name`` with positional ``args``.

    ``on_commit`` (the default) sends it once the current transaction commits, so the worker finds
    the rows the service wrote (and nothing is sent when the transaction rolls back); False sends it
    now and lets a broker error reach the caller. ``queue`` overrides the route of settings;
    ``countdown`` delays the start, in seconds.
    """
    task = _task(name)  # a wrong name fails here, in the service's transaction, not after commit
    options: dict[str, Any] = {}
    if queue is not None:
        options["queue"] = queue
    if countdown is not None:
        options["countdown"] = countdown

    def send() -> None:
        task.apply_async(args=list(args), **options)

    if on_commit:
        transaction.on_commit(send)
    else:
        send()
