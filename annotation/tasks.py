"""Celery tasks of the annotation app (default queue). They take ids and call a service."""

from __future__ import annotations

from celery import shared_task

from annotation.agreement_service import dashboard_refresh
from annotation.models import Project


@shared_task(name="annotation.tasks.agreement_report_refresh")
def agreement_report_refresh(project_id: int) -> dict[str, int | str]:
    """Recompute a project's agreement report and cache it for the dashboard."""
    project = Project.objects.filter(pk=project_id).first()
    if project is None:  # deleted since the run was scheduled
        return {"project": project_id, "status": "gone"}
    payload = dashboard_refresh(project=project)
    return {"project": project_id, "status": "done", "computed_at": payload["computed_at"]}
