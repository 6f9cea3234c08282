"""Sending Celery tasks from services: by the task's registered name, the one way every app does it.

A task module imports the service it calls, so a service never imports its tasks module, not even
lazily inside a function: it names the task. Every task is registered under its dotted path
(``"annotation.tasks.agreement_report_refresh"`` is ``agreement_report_refresh`` in
``annotation/tasks.py``), so the name is also where to find it; ``task_send`` imports it from there at
send time. Sending the task object (not ``app.send_task``) keeps the routes of settings and the eager
mode of tests.

It also keeps the registry of job models (``JobKind``): which rows are jobs, where each keeps its
lifecycle's fields, and which queue each job goes to; ``common.lifecycle`` (claim, heartbeat,
finish, cancel, the reaper) and ``common.job_selectors`` (what a queued job waits behind) read it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class JobKind:
    """A model whose rows are jobs on a Celery queue: what the one job lifecycle
    (``common.lifecycle``) and the "waits behind" line (``common.job_selectors``) need to know.

    Each app registers its job models (``job_kind_register``, from its AppConfig.ready), so common
    reads them without importing any app. Every job's ``status_field`` holds the lifecycle's values
    (queued, running, succeeded, failed, cancelled), plus the kind's ``idle`` values before it is
    queued (a draft). ``queue_of(job)``: the name of the queue its task is sent to (the same rule
    as the service that sends it). The ``*_field`` names say where the job keeps its worker,
    heartbeat, start and end times and error (a model with two jobs, an eval round's generation and
    its judge, names other fields for each); ``error_value`` turns an error message into what
    ``error_field`` stores (default: the text itself); ``cancel_field``: a flag a running job polls
    to stop early ("" when a running job cannot be stopped); ``reap_advice``: a sentence added to
    the reaper's message (what the user can do); ``reap_updates``: (field, value) pairs the reaper
    writes with the failed state (an eval round fails with its generation); ``on_reaped(job)``:
    more to write when the reaper fails one (in the same transaction).
    """

    model: str  # "app_label.ModelName"
    noun: str  # how a page names one job, e.g. "training run" (-> "training run #12")
    queue_of: Callable[[Any], str]
    status_field: str = "status"
    # Related rows queue_of reads, fetched with the jobs (select_related).
    related: tuple[str, ...] = ()
    idle: tuple[str, ...] = ()
    worker_field: str = "worker"
    heartbeat_field: str = "heartbeat_at"
    started_field: str = "started_at"
    finished_field: str = "finished_at"
    error_field: str = "error"
    error_value: Callable[[str], Any] | None = None
    cancel_field: str = ""
    reap_advice: str = ""
    reap_updates: tuple[tuple[str, Any], ...] = ()
    on_reaped: Callable[[Any], None] | None = None


_JOB_KINDS: list[JobKind] = []


def job_kind_register(kind: JobKind) -> None:
    """Add ``kind`` to the registered job kinds (once per model and status field: a second
    registration replaces the first)."""
    _JOB_KINDS[:] = [
        k for k in _JOB_KINDS if (k.model, k.status_field) != (kind.model, kind.status_field)
    ]
    _JOB_KINDS.append(kind)


def job_kinds() -> tuple[JobKind, ...]:
    """The registered job kinds, in registration order."""
    return tuple(_JOB_KINDS)
