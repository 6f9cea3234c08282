"""Celery tasks of the import (default queue): fetch the id, call the service."""

from celery import shared_task

from annotation.import_jobs import import_job_run


@shared_task(name="annotation.import_tasks.import_job_run_task", acks_late=True)
def import_job_run_task(job_id: int) -> str:
    return import_job_run(job_id=job_id).status
