from django.apps import AppConfig


def _gpu_queue(run: object) -> str:
    from django.conf import settings

    return settings.CONCORD_GPU_QUEUE


def _run_reaped(run) -> None:
    from training.services import run_reaped_record

    run_reaped_record(run=run)


class TrainingConfig(AppConfig):
    name = "training"
    verbose_name = "Training"

    def ready(self) -> None:
        from common.archive import archive_part_register
        from common.jobs import JobKind, job_kind_register
        from training.archive import TRAINING_PART

        archive_part_register(TRAINING_PART)

        # services.run_launch sends every run to the gpu queue.
        job_kind_register(
            JobKind(model="training.TrainingRun", noun="training run", queue_of=_gpu_queue,
                    idle=("draft",), cancel_field="cancel_requested", on_reaped=_run_reaped,
                    reap_advice="Its checkpoints are kept: resume to continue from the last one.")
        )  # fmt: skip
