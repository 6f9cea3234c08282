"""The one job lifecycle every job model follows: queued -> running -> succeeded / failed / cancelled.

Imports, clustering runs, judges, eval-round generation, eval-round judges and training runs are
rows in the database whose state a Celery task moves on; the broker only carries the row's id. Each
model registers a ``common.jobs.JobKind`` naming its fields (status, worker, heartbeat, started,
finished, error), and every write below goes through that registry, so the rules are the same for
all of them:

- ``job_claim``: one conditional UPDATE (status queued -> running, sets worker, started and
  heartbeat). A redelivered or duplicated message finds the job taken (or finished) and does
  nothing: whoever claims it first runs it, nobody runs it twice.
- ``job_heartbeat`` / ``JobHeartbeat``: the worker refreshes the heartbeat while it works (a thread,
  every ``CONCORD_HEARTBEAT_EVERY_S`` seconds), so a long step never looks like a dead worker.
- ``job_finish``: running -> succeeded / failed / cancelled, conditional too: a job the reaper
  already failed, or one cancelled meanwhile, keeps that state.
- ``job_cancel``: a queued (or not yet launched) job is cancelled at once; a running one is asked to
  stop when its kind polls a cancel flag (training), and refused otherwise.
- ``jobs_reap_stale``: the one reaper (``common.tasks.jobs_reap_stale``, every minute from beat) fails
  every running job, of every kind, whose heartbeat is older than ``CONCORD_HEARTBEAT_STALE_S``.

A model may hold values before ``queued`` (a training run's or a judge's draft, an eval round's judge
that waits for the answers): those are the kind's ``idle`` values, outside the lifecycle.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.apps import apps
from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import Model
from django.utils import timezone

from common.errors import ConcordError
from common.jobs import JobKind, job_kinds

log = logging.getLogger(__name__)

QUEUED = "queued"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
STATES = (QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED)
FINISHED = (SUCCEEDED, FAILED, CANCELLED)
ACTIVE = (QUEUED, RUNNING)
# The words every job page shows for a state (each job model's status choices use them too).
STATE_LABELS = {
    QUEUED: "Queued",
    RUNNING: "Running",
    SUCCEEDED: "Succeeded",
    FAILED: "Failed",
    CANCELLED: "Cancelled",
}
CANCELLED_MESSAGE = "Cancelled before it started."


class JobStatus(models.TextChoices):
    """The states as a model's status choices, for a job model with no idle values before it is
    queued (an import, an export, a clustering run name it as their ``Status``; a model with a
    draft declares its own)."""

    QUEUED = QUEUED, STATE_LABELS[QUEUED]
    RUNNING = RUNNING, STATE_LABELS[RUNNING]
    SUCCEEDED = SUCCEEDED, STATE_LABELS[SUCCEEDED]
    FAILED = FAILED, STATE_LABELS[FAILED]
    CANCELLED = CANCELLED, STATE_LABELS[CANCELLED]


class JobStateError(ConcordError):
    """A lifecycle step that does not fit the job's state (the message says why)."""


def worker_name() -> str:
    """This worker process as a job records it: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _model_label(model: type[Model]) -> str:
    return f"{model._meta.app_label}.{model.__name__}"


def job_kind_of(model: type[Model] | str, status_field: str = "status") -> JobKind:
    """The registered kind of ``model`` (a class or "app_label.Model") and its ``status_field``;
    LookupError when it is no registered job."""
    label = model if isinstance(model, str) else _model_label(model)
    for kind in job_kinds():
        if kind.model == label and kind.status_field == status_field:
            return kind
    raise LookupError(f"{label}.{status_field} is not a registered job (common.jobs.JobKind)")


def _rows(kind: JobKind, pk: int):
    return apps.get_model(kind.model).objects.filter(pk=pk)


def job_claim(
    *,
    model: type[Model],
    pk: int,
    worker: str | None = None,
    status_field: str = "status",
    updates: Mapping[str, Any] | None = None,
) -> bool:
    """queued -> running for this ``worker`` (default: this process), in one conditional UPDATE
    that also sets the started and heartbeat times (and ``updates``, e.g. an attempt counter).
    Returns False, writing nothing, when the job is not queued: a redelivered message, a job
    another worker took, a finished or cancelled one."""
    kind = job_kind_of(model, status_field)
    now = timezone.now()
    values: dict[str, Any] = {
        kind.status_field: RUNNING,
        kind.worker_field: (worker or worker_name())[:200],
        kind.started_field: now,
        kind.heartbeat_field: now,
        **(updates or {}),
    }
    if kind.finished_field:
        values[kind.finished_field] = None
    return bool(_rows(kind, pk).filter(**{kind.status_field: QUEUED}).update(**values))


def job_heartbeat(*, model: type[Model], pk: int, status_field: str = "status") -> bool:
    """Refresh a running job's heartbeat; False when it is no longer running (finished, reaped or
    cancelled: the worker should stop)."""
    kind = job_kind_of(model, status_field)
    return bool(
        _rows(kind, pk)
        .filter(**{kind.status_field: RUNNING})
        .update(**{kind.heartbeat_field: timezone.now()})
    )


def _error_value(kind: JobKind, message: str) -> Any:
    return kind.error_value(message) if kind.error_value else message


def job_finish(
    *,
    model: type[Model],
    pk: int,
    state: str,
    error: str = "",
    status_field: str = "status",
    updates: Mapping[str, Any] | None = None,
) -> bool:
    """running -> ``state`` (succeeded, failed or cancelled) with the finished time, ``error``
    (stored as the kind stores errors; ``updates`` may set the error field itself) and
    ``updates``, in one conditional UPDATE. Returns False,
    writing nothing, when the job is not running any more (the reaper failed it, or it was
    cancelled): its state stands. ValueError for a state that is no end."""
    if state not in FINISHED:
        raise ValueError(f"a job finishes as one of {', '.join(FINISHED)}, not {state!r}")
    kind = job_kind_of(model, status_field)
    values: dict[str, Any] = {kind.status_field: state, **(updates or {})}
    if kind.finished_field:
        values[kind.finished_field] = timezone.now()
    if error:
        values[kind.error_field] = _error_value(kind, error)
    elif state == FAILED and kind.error_field not in values:
        values[kind.error_field] = _error_value(kind, "failed (no message)")
    return bool(_rows(kind, pk).filter(**{kind.status_field: RUNNING}).update(**values))


def job_cancel(*, model: type[Model], pk: int, status_field: str = "status") -> str:
    """Cancel a job: one that has not started (queued, or an idle value such as a draft) becomes
    cancelled at once ("cancelled"); a running one of a kind that polls a cancel flag gets the flag
    and stops at its next check ("requested"). Anything else raises JobStateError, naming the
    state, and changes nothing."""
    kind = job_kind_of(model, status_field)
    rows = _rows(kind, pk)
    values: dict[str, Any] = {kind.status_field: CANCELLED}
    if kind.finished_field:
        values[kind.finished_field] = timezone.now()
    if rows.filter(**{f"{kind.status_field}__in": (QUEUED, *kind.idle)}).update(**values):
        return CANCELLED
    if kind.cancel_field and rows.filter(**{kind.status_field: RUNNING}).update(
        **{kind.cancel_field: True}
    ):
        return "requested"
    state = rows.values_list(kind.status_field, flat=True).first()
    if state is None:
        raise JobStateError(f"{kind.noun} #{pk} does not exist")
    if state == RUNNING:
        raise JobStateError(f"{kind.noun} #{pk} is running and cannot be stopped part-way")
    raise JobStateError(f"{kind.noun} #{pk} is {state}; there is nothing to cancel")


def job_cancel_requested(*, model: type[Model], pk: int, status_field: str = "status") -> bool:
    """Whether a running job was asked to stop (its kind's cancel flag; False for kinds without)."""
    kind = job_kind_of(model, status_field)
    if not kind.cancel_field:
        return False
    return bool(_rows(kind, pk).values_list(kind.cancel_field, flat=True).first())


@dataclass(frozen=True)
class ReapedJob:
    """A job the reaper failed: its kind's model and status field, its key, its last heartbeat."""

    model: str
    status_field: str
    pk: int
    heartbeat_at: datetime | None


def stale_message(kind: JobKind, heartbeat_at: datetime | None, stale_after_s: float) -> str:
    """The error a reaped job shows: when it was last heard of, and what to do (the kind's advice)."""
    since = (
        f"no heartbeat since {heartbeat_at:%Y-%m-%d %H:%M:%S} UTC"
        if heartbeat_at
        else "no heartbeat at all"
    )
    message = (
        f"The worker stopped answering ({since}, more than {stale_after_s:g} s ago): "
        f"the {kind.noun} was failed by the reaper."
    )
    return f"{message} {kind.reap_advice}" if kind.reap_advice else message


def jobs_reap_stale(
    *, stale_after_s: float | None = None, models: Iterable[str] | None = None
) -> list[ReapedJob]:
    """Fail every running job whose heartbeat is older than ``stale_after_s`` seconds (default
    ``CONCORD_HEARTBEAT_STALE_S``), of every registered kind (or of the kinds of ``models``, e.g.
    ``["training.TrainingRun"]``), with a message saying when it was last heard of. Each job is
    failed by a conditional UPDATE (still running, same heartbeat), so a job that beat or finished
    meanwhile is left alone; the kind's ``on_reaped`` runs in the same transaction. Fresh jobs and
    queued ones are never touched. Returns the jobs failed."""
    stale_after = (
        float(settings.CONCORD_HEARTBEAT_STALE_S) if stale_after_s is None else stale_after_s
    )
    limit = timezone.now() - timedelta(seconds=stale_after)
    wanted = set(models) if models is not None else None
    reaped: list[ReapedJob] = []
    for kind in job_kinds():
        if wanted is not None and kind.model not in wanted:
            continue
        model = apps.get_model(kind.model)
        running = model.objects.filter(**{kind.status_field: RUNNING})
        stale = running.filter(**{f"{kind.heartbeat_field}__lt": limit}) | running.filter(
            **{f"{kind.heartbeat_field}__isnull": True}
        )
        for pk, beat in stale.values_list("pk", kind.heartbeat_field):
            values: dict[str, Any] = {
                **dict(kind.reap_updates),
                kind.status_field: FAILED,
                kind.error_field: _error_value(kind, stale_message(kind, beat, stale_after)),
            }
            if kind.finished_field:
                values[kind.finished_field] = timezone.now()
            with transaction.atomic():
                if not model.objects.filter(
                    pk=pk, **{kind.status_field: RUNNING, kind.heartbeat_field: beat}
                ).update(**values):
                    continue
                if kind.on_reaped is not None:
                    kind.on_reaped(model.objects.get(pk=pk))
            log.warning("reaped %s #%s (heartbeat %s)", kind.noun, pk, beat)
            reaped.append(ReapedJob(kind.model, kind.status_field, pk, beat))
    return reaped


class JobHeartbeat(threading.Thread):
    """Refreshes a running job's heartbeat every ``every_s`` seconds (default
    ``CONCORD_HEARTBEAT_EVERY_S``) on its own database connection while the worker's thread does
    the work, also through one long step. ``cancel`` is set when the job's cancel flag is up (kinds
    with one) or the job stopped running (reaped, cancelled); ``done`` stops the thread.

    Use it as a context manager (``with JobHeartbeat(model=..., pk=...) as beat:``): it starts
    on entry and stops, joined, on exit."""

    def __init__(
        self,
        *,
        model: type[Model],
        pk: int,
        status_field: str = "status",
        every_s: float | None = None,
    ) -> None:
        super().__init__(daemon=True, name=f"heartbeat-{_model_label(model)}-{pk}")
        self.model, self.pk, self.status_field = model, pk, status_field
        self.every_s = float(settings.CONCORD_HEARTBEAT_EVERY_S if every_s is None else every_s)
        self.cancel = threading.Event()
        self.done = threading.Event()

    def beat(self) -> None:
        """One refresh (and the cancel check)."""
        running = job_heartbeat(model=self.model, pk=self.pk, status_field=self.status_field)
        if not running or job_cancel_requested(
            model=self.model, pk=self.pk, status_field=self.status_field
        ):
            self.cancel.set()

    def run(self) -> None:
        try:
            while not self.done.wait(self.every_s):
                try:
                    self.beat()
                except Exception:  # a database blip must not end the heartbeat for good
                    log.exception("heartbeat of %s #%s failed", self.model.__name__, self.pk)
        finally:
            connection.close()

    def stop(self, timeout_s: float = 30.0) -> None:
        self.done.set()
        if self.is_alive():
            self.join(timeout=timeout_s)

    def __enter__(self) -> JobHeartbeat:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def job_state(job: Model, status_field: str = "status") -> tuple[str, str]:
    """(state, words) of ``job`` for its page: a lifecycle state with ``STATE_LABELS``' words, or an
    idle value (a draft) with the model's own label."""
    value = getattr(job, status_field)
    if value in STATE_LABELS:
        return value, STATE_LABELS[value]
    display = getattr(job, f"get_{status_field}_display", None)
    return value, str(display()) if display else str(value)
