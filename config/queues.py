"""Names of the Celery queues. Tasks are routed by name in settings.CELERY_TASK_ROUTES.

- ``default``: imports, clustering, reports (many workers, short tasks); exports have no task.
- ``gpu``: training and generation (one task at a time, a fresh process per task).
"""

DEFAULT = "default"
GPU = "gpu"

ALL = (DEFAULT, GPU)
