"""Names of the Celery queues. Tasks are routed by name in settings.CELERY_TASK_ROUTES.

- ``default``: imports, clustering, exports, reports (many workers, short tasks).
- ``gpu``: training and generation (one task at a time, a fresh process per task).
"""

DEFAULT = "default"
GPU = "gpu"

ALL = (DEFAULT, GPU)
