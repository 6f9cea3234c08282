from django.apps import AppConfig


def _default_queue(job: object) -> str:
    from django.conf import settings

    return settings.CELERY_TASK_DEFAULT_QUEUE


def _import_errors(message: str) -> list[dict[str, object]]:
    """An import job stores its errors as rows (line, unit, field, message); a job-wide one has
    line 0."""
    return [{"line": 0, "unit": "", "field": "", "message": message}]


class AnnotationConfig(AppConfig):
    name = "annotation"
    verbose_name = "Annotation"

    def ready(self) -> None:
        from annotation.archive import ANNOTATION_PART
        from common.archive import archive_part_register
        from common.jobs import JobKind, job_kind_register

        archive_part_register(ANNOTATION_PART)

        # Imports, exports and clustering run on the default queue (no route in settings names them).
        job_kind_register(
            JobKind(model="annotation.ImportJob", noun="import", queue_of=_default_queue,
                    cancel_field="cancel_requested",
                    error_field="errors", error_value=_import_errors,
                    reap_advice="Nothing was imported; upload the file again.")
        )  # fmt: skip
        job_kind_register(
            JobKind(model="annotation.ExportJob", noun="export", queue_of=_default_queue,
                    cancel_field="cancel_requested",
                    reap_advice="Nothing half-written is kept; create the export (or ask for "
                                "its zip) again.")
        )  # fmt: skip
        job_kind_register(
            JobKind(model="annotation.ClusteringRun", noun="clustering run",
                    queue_of=_default_queue,
                    reap_advice="The prompts keep their previous clusters; re-cluster to try again.")
        )  # fmt: skip
