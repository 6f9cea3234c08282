"""The Celery application. Settings come from Django settings with the ``CELERY_`` prefix."""

import os

from celery import Celery
from celery.signals import worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("concord")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Each installed app keeps its tasks in its ``tasks.py``.
app.autodiscover_tasks()


@worker_process_init.connect
def _no_progress_bars(**kwargs) -> None:
    """tqdm bars (model loading, encoding) are drawn for a terminal; a worker's stderr goes to its log,
    where each redraw was a line. Runs in each pool process before any task imports tqdm."""
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
