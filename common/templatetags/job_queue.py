"""How every job page shows a job: ``{% job_state job %}`` renders the one partial
(``common/_job_state.html``): the lifecycle state as a badge, in the same words on every page, and
for a queued job the line that says what it waits behind.

``{% load job_queue %}``, then ``{% job_state run testid="run-status" %}``,
``{% job_state round "judge_status" %}`` for a model with two jobs, or
``{% job_state "annotation.ImportJob" pk=job.id %}`` where the page holds a job's id rather than the
job. ``{% waits_behind job %}`` is the waiting line alone.
"""

from __future__ import annotations

from django import template
from django.apps import apps
from django.db.models import Model
from django.utils.html import format_html
from django.utils.safestring import SafeString

from common.job_selectors import job_waiting_text
from common.lifecycle import QUEUED
from common.lifecycle import job_state as lifecycle_state

register = template.Library()


def _job(job: Model | str, pk: int | None) -> Model | None:
    if isinstance(job, str):
        return apps.get_model(job).objects.filter(pk=pk).first()
    return job


@register.inclusion_tag("common/_job_state.html")
def job_state(
    job: Model | str,
    status_field: str = "status",
    *,
    pk: int | None = None,
    testid: str = "job-state",
    waits: bool = True,
) -> dict[str, object]:
    """The context of the job-state partial: ``state`` (the stored value), ``words`` (the
    lifecycle's label, or the model's for an idle value), ``waiting`` (what a queued job waits
    behind; "" otherwise, or when ``waits`` is False), ``testid`` for the badge."""
    found = _job(job, pk)
    if found is None:
        return {"state": "", "words": "", "waiting": "", "testid": testid}
    state, words = lifecycle_state(found, status_field)
    waiting = (
        job_waiting_text(job=found, status_field=status_field) if waits and state == QUEUED else ""
    )
    return {"state": state, "words": words, "waiting": waiting, "testid": testid}


@register.simple_tag
def waits_behind(
    job: Model | str, status_field: str = "status", *, pk: int | None = None
) -> SafeString | str:
    found = _job(job, pk)
    if found is None:
        return ""
    text = job_waiting_text(job=found, status_field=status_field)
    if not text:
        return ""
    return format_html('<p class="waits-behind" data-testid="waits-behind">{}</p>', text)
