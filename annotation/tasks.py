"""Celery tasks of the annotation app (default queue). They take ids and call a service.

Services send them by name (``common.jobs.task_send``); nothing in the app imports this module.
"""

from __future__ import annotations

from celery import shared_task

from annotation.models import Project
from annotation.services.agreement import dashboard_refresh
from annotation.services.clustering import clustering_run_execute
from annotation.services.consensus import consensus_refit_due
from annotation.services.export_jobs import export_job_run
from annotation.services.import_jobs import import_job_run


@shared_task(name="annotation.tasks.agreement_report_refresh")
def agreement_report_refresh(project_id: int) -> dict[str, int | str]:
    """Recompute a project's agreement report and cache it for the dashboard."""
    project = Project.objects.filter(pk=project_id).first()
    if project is None:  # deleted since the run was scheduled
        return {"project": project_id, "status": "gone"}
    payload = dashboard_refresh(project=project)
    return {"project": project_id, "status": "done", "computed_at": payload["computed_at"]}


@shared_task(name="annotation.tasks.consensus_refit")
def consensus_refit(project_id: int) -> dict[str, int | str]:
    """Refit a project's Dawid-Skene consensus and rewrite its stored rows (debounced by
    ``consensus_refit_schedule``)."""
    result = consensus_refit_due(project_id=project_id)
    if result is None:  # deleted since the run was scheduled
        return {"project": project_id, "status": "gone"}
    return {"project": project_id, "status": "done", "rows": result.n_rows}


@shared_task(name="annotation.tasks.cluster_prompts")
def cluster_prompts(run_id: int) -> dict[str, int | str]:
    """Execute a queued clustering run; its progress and outcome are stored on the run. A
    redelivered message finds the run running or finished and does nothing."""
    run = clustering_run_execute(run_id=run_id)
    return {"run": run.pk, "status": run.status}


@shared_task(name="annotation.tasks.import_job_run_task", acks_late=True)
def import_job_run_task(job_id: int) -> str:
    """Run a queued import job; its progress and outcome are stored on the job. A redelivered
    message finds the job running or finished and imports nothing."""
    return import_job_run(job_id=job_id).status


@shared_task(name="annotation.tasks.export_job_run_task", acks_late=True)
def export_job_run_task(job_id: int) -> str:
    """Run a queued export job; its progress and outcome (the export) are stored on the job. A
    redelivered message finds the job running or finished and exports nothing."""
    return export_job_run(job_id=job_id).status
