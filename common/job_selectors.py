"""What a queued job waits behind: the jobs ahead of it on the same Celery queue.

Every job model registers itself in ``common.jobs`` (a ``JobKind``: its fields and the rule that
picks its queue; its states are the one lifecycle's, ``common.lifecycle``), so this module reads
imports, clustering runs, training runs, judges and eval rounds alike without importing any app. A
worker takes a queue's messages in the order they were sent, one at a time on the gpu queue, so a
queued job waits behind every job of its queue that is running, and behind every queued one created
before it (the order of creation stands in for the order of sending: a training run or a judge is
created, then launched).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.apps import apps
from django.db.models import Model

from common.jobs import JobKind, job_kinds
from common.lifecycle import QUEUED, RUNNING, job_state

# How many jobs ahead the line names before it says "and N more".
NAMED_AHEAD = 3


@dataclass(frozen=True)
class JobAhead:
    """One job ahead of a queued job on its queue. ``state``: its status in plain words."""

    noun: str
    pk: int
    state: str
    running: bool
    created_at: datetime

    @property
    def label(self) -> str:
        return f"{self.noun} #{self.pk}"


@dataclass(frozen=True)
class QueuePlace:
    """A queued job's queue and the jobs ahead of it there: running ones, then queued ones, each
    oldest first."""

    queue: str
    ahead: tuple[JobAhead, ...]


def _model_label(model: type[Model]) -> str:
    return f"{model._meta.app_label}.{model.__name__}"


def _kind_for(job: Model, status_field: str) -> JobKind | None:
    label = _model_label(type(job))
    return next(
        (k for k in job_kinds() if k.model == label and k.status_field == status_field), None
    )


def _state_words(job: Model, kind: JobKind) -> str:
    return job_state(job, kind.status_field)[1].lower()


def _active_jobs(kind: JobKind) -> list[tuple[Any, bool]]:
    """(job, running) for every job of ``kind`` that is queued or running."""
    model = apps.get_model(kind.model)
    rows = model.objects.filter(**{f"{kind.status_field}__in": (QUEUED, RUNNING)})
    if kind.related:
        rows = rows.select_related(*kind.related)
    return [(row, getattr(row, kind.status_field) == RUNNING) for row in rows]


def job_queue_place(*, job: Model, status_field: str = "status") -> QueuePlace | None:
    """Where a queued ``job`` stands on its queue; None when it is not queued (or is no registered
    job). ``status_field`` names the job's state field: a model with two jobs (an eval round's
    generation ``status`` and its judge's ``judge_status``) is registered once per field."""
    kind = _kind_for(job, status_field)
    if kind is None or getattr(job, status_field) != QUEUED:
        return None
    queue = kind.queue_of(job)
    ahead: list[JobAhead] = []
    for other_kind in job_kinds():
        for other, running in _active_jobs(other_kind):
            if other_kind is kind and other.pk == job.pk:
                continue
            if other_kind.queue_of(other) != queue:
                continue
            if not running and other.created_at >= job.created_at:
                continue  # queued after this one
            ahead.append(
                JobAhead(
                    noun=other_kind.noun,
                    pk=other.pk,
                    state=_state_words(other, other_kind),
                    running=running,
                    created_at=other.created_at,
                )
            )
    ahead.sort(key=lambda a: (not a.running, a.created_at, a.noun, a.pk))
    return QueuePlace(queue=queue, ahead=tuple(ahead))


def _and_join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def job_waiting_text(*, job: Model, status_field: str = "status") -> str:
    """One plain sentence for a queued job's page, e.g. "Queued: waiting behind training run #12
    (running) on the gpu queue."; "" when the job is not queued."""
    place = job_queue_place(job=job, status_field=status_field)
    if place is None:
        return ""
    if not place.ahead:
        return (
            f"Queued: nothing is ahead of it on the {place.queue} queue; it starts when a "
            f"{place.queue} worker takes it."
        )
    named = [f"{a.label} ({a.state})" for a in place.ahead[:NAMED_AHEAD]]
    more = len(place.ahead) - len(named)
    if more:
        named.append(f"{more} more job{'s' if more > 1 else ''}")
    return f"Queued: waiting behind {_and_join(named)} on the {place.queue} queue."
