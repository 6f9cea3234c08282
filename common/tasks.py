"""Infrastructure tasks: the worker ping and the one reaper of every job kind."""

import os
import socket

from celery import shared_task

from common.lifecycle import jobs_reap_stale as reap


@shared_task(name="common.tasks.worker_ping")
def worker_ping(token: str) -> dict[str, str | int]:
    """Echo ``token`` with the worker's host and process id: proof that a real worker ran the task."""
    return {"token": token, "host": socket.gethostname(), "pid": os.getpid()}


@shared_task(name="common.tasks.jobs_reap_stale")
def jobs_reap_stale() -> list[str]:
    """Fail every running job (imports, clustering, judges, eval rounds' generation and judges,
    training runs) whose heartbeat is older than ``CONCORD_HEARTBEAT_STALE_S``; beat sends it
    every minute. Returns them as "app.Model.status_field#pk"."""
    return [f"{job.model}.{job.status_field}#{job.pk}" for job in reap()]
