from django.apps import AppConfig


def _judge_queue(judge) -> str:
    """judge_services.judge_launch's rule: an OpenAI-compatible endpoint judges from the default
    queue (HTTP only), a local model on the gpu queue."""
    from django.conf import settings

    if judge.kind == "openai":
        return settings.CELERY_TASK_DEFAULT_QUEUE
    return settings.CONCORD_GPU_QUEUE


def _round_judge_queue(round_) -> str:
    return _judge_queue(round_.judge)


def _generation_queue(round_) -> str:
    """eval_services' rule: a round generating through an endpoint uses the default queue."""
    from django.conf import settings

    return settings.CELERY_TASK_DEFAULT_QUEUE if round_.endpoint else settings.CONCORD_GPU_QUEUE


class MonitoringConfig(AppConfig):
    name = "monitoring"
    verbose_name = "Monitoring"

    def ready(self) -> None:
        from common.archive import archive_part_register
        from common.jobs import JobKind, job_kind_register
        from monitoring.archive import MONITORING_PART

        archive_part_register(MONITORING_PART)

        job_kind_register(
            JobKind(model="monitoring.Judge", noun="judge", queued=("queued",),
                    running=("running",), queue_of=_judge_queue)
        )  # fmt: skip
        job_kind_register(
            JobKind(model="monitoring.EvalRound", noun="judge of eval round", queued=("queued",),
                    running=("running",), queue_of=_round_judge_queue,
                    status_field="judge_status", related=("judge",))
        )  # fmt: skip
        # A generating round may be queued or running (one status for both): it is listed ahead
        # of other jobs as "generating responses" and its own page shows no waiting line.
        job_kind_register(
            JobKind(model="monitoring.EvalRound", noun="eval round", queued=(),
                    running=("generating",), queue_of=_generation_queue)
        )  # fmt: skip
