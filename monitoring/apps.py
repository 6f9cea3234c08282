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


def _generation_reaped(round_) -> None:
    """The judge's job of a round whose generation the reaper failed (the round itself fails
    with it: ``reap_updates``) waited for the answers: it fails too, as when the generation fails
    on the worker (``eval_services.round_generate``)."""
    from monitoring.services.round_judges import round_judge_without_answers

    round_judge_without_answers(round_id=round_.pk)


class MonitoringConfig(AppConfig):
    name = "monitoring"
    verbose_name = "Monitoring"

    def ready(self) -> None:
        from annotation.work_queue.registry import HOSTED, register
        from common.archive import archive_part_register
        from common.jobs import JobKind, job_kind_register
        from monitoring.archive import MONITORING_PART
        from monitoring.eval_rating import EVAL_RATING

        archive_part_register(MONITORING_PART)
        # The eval rounds' rating is a task type of the shared work queue, hosted on our tables.
        if EVAL_RATING.name not in HOSTED:
            register(EVAL_RATING, hosted=True)

        job_kind_register(
            JobKind(model="monitoring.Judge", noun="judge", queue_of=_judge_queue, idle=("draft",),
                    reap_advice="Its answers so far are kept; run it again to answer the rest.")
        )  # fmt: skip
        # An eval round holds two jobs: its judge's (``judge_*`` fields; "" and "waiting" come
        # before it is queued) and the generation of its answers (``generation_*`` fields).
        job_kind_register(
            JobKind(model="monitoring.EvalRound", noun="judge of eval round",
                    queue_of=_round_judge_queue, status_field="judge_status",
                    related=("judge",), idle=("", "waiting"), worker_field="judge_worker",
                    heartbeat_field="judge_heartbeat_at", started_field="judge_started_at",
                    finished_field="judge_finished_at", error_field="judge_error",
                    reap_advice="Its answers so far are kept; run the judge on what is missing.")
        )  # fmt: skip
        job_kind_register(
            JobKind(model="monitoring.EvalRound", noun="eval round",
                    queue_of=_generation_queue, status_field="generation_status",
                    worker_field="generation_worker", heartbeat_field="generation_heartbeat_at",
                    started_field="generation_started_at",
                    finished_field="generation_finished_at", on_reaped=_generation_reaped,
                    reap_updates=(("status", "failed"),),
                    reap_advice="Create a new round once the worker is back.")
        )  # fmt: skip
