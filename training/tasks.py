"""Celery tasks of training. ``run_training_task`` goes to the gpu queue (one task at a time, a
fresh process each, late ack). The reaper of dead runs is the one job lifecycle's
(``common.tasks.jobs_reap_stale``). Tasks fetch ids and call services."""

from celery import shared_task

from training import continuous_services


@shared_task(name="training.tasks.run_training_task", acks_late=True, reject_on_worker_lost=True)
def run_training_task(run_id: int) -> str:
    """Run a queued training run; a duplicate or redelivered message finds it claimed and does nothing."""
    from training.worker import run_execute

    status = run_execute(run_id=run_id)
    continuous_services.retrain_finished_hook(run_id=run_id)
    return status


@shared_task(name="training.tasks.continuous_rm_check_all")
def continuous_rm_check_all() -> dict[str, str]:
    """Start the continuous reward-model retrains that are due (periodic: the debounce)."""
    return continuous_services.continuous_rm_check_all()


@shared_task(name="training.tasks.continuous_rm_after_run", acks_late=True)
def continuous_rm_after_run(run_id: int) -> str:
    """A continuous retrain ended: learning-curve point, queue scores, the follow-up."""
    return continuous_services.continuous_rm_after_run(run_id=run_id)
