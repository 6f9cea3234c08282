"""The Celery application. Settings come from Django settings with the ``CELERY_`` prefix."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("concord")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Each app keeps its tasks in ``tasks.py`` or in ``<topic>_tasks.py`` modules; missing ones are skipped.
for _module in ("tasks", "import_tasks", "clustering_tasks", "export_tasks"):
    app.autodiscover_tasks(related_name=_module)
