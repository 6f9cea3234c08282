"""Celery tasks of prompt clustering (default queue). They take ids and call the service."""

from __future__ import annotations

from celery import shared_task

from annotation.clustering_service import clustering_run_execute


@shared_task(name="annotation.clustering_tasks.cluster_prompts")
def cluster_prompts(run_id: int) -> dict[str, int | str]:
    """Execute a queued clustering run; its progress and outcome are stored on the run."""
    run = clustering_run_execute(run_id=run_id)
    return {"run": run.pk, "status": run.status}
