"""``{% waits_behind job %}``: the "waits behind" line of a queued job's page (nothing otherwise).

``{% load job_queue %}``, then ``{% waits_behind run %}``, ``{% waits_behind round "judge_status" %}``
for a model with two jobs, or ``{% waits_behind "annotation.ImportJob" pk=job.id %}`` where the page
holds a job's id rather than the job.
"""

from __future__ import annotations

from django import template
from django.apps import apps
from django.db.models import Model
from django.utils.html import format_html
from django.utils.safestring import SafeString

from common.job_selectors import job_waiting_text

register = template.Library()


@register.simple_tag
def waits_behind(
    job: Model | str, status_field: str = "status", *, pk: int | None = None
) -> SafeString | str:
    if isinstance(job, str):
        job = apps.get_model(job).objects.filter(pk=pk).first()
        if job is None:
            return ""
    text = job_waiting_text(job=job, status_field=status_field)
    if not text:
        return ""
    return format_html('<p class="waits-behind" data-testid="waits-behind">{}</p>', text)
