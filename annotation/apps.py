from django.apps import AppConfig


def _default_queue(job: object) -> str:
    from django.conf import settings

    return settings.CELERY_TASK_DEFAULT_QUEUE


class AnnotationConfig(AppConfig):
    name = "annotation"
    verbose_name = "Annotation"

    def ready(self) -> None:
        from annotation.archive import ANNOTATION_PART
        from common.archive import archive_part_register
        from common.jobs import JobKind, job_kind_register

        archive_part_register(ANNOTATION_PART)

        # Imports and clustering run on the default queue (no route in settings names them).
        job_kind_register(
            JobKind(model="annotation.ImportJob", noun="import", queued=("queued",),
                    running=("validating", "importing"), queue_of=_default_queue)
        )  # fmt: skip
        job_kind_register(
            JobKind(model="annotation.ClusteringRun", noun="clustering run", queued=("queued",),
                    running=("running",), queue_of=_default_queue)
        )  # fmt: skip
