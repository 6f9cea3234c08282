"""Infrastructure tasks."""

import os
import socket

from celery import shared_task


@shared_task(name="common.tasks.worker_ping")
def worker_ping(token: str) -> dict[str, str | int]:
    """Echo ``token`` with the worker's host and process id: proof that a real worker ran the task."""
    return {"token": token, "host": socket.gethostname(), "pid": os.getpid()}
