"""Celery tasks of training. ``run_training_task`` goes to the gpu queue (one task at a time, a
fresh process each, late ack). The reaper of dead runs is the one job lifecycle's
(``common.tasks.jobs_reap_stale``). Tasks fetch ids and call services."""

from celery import shared_task


@shared_task(name="training.tasks.run_training_task", acks_late=True, reject_on_worker_lost=True)
def run_training_task(run_id: int) -> str:
    """Run a queued training run; a duplicate or redelivered message finds it claimed and does nothing."""
    from training.worker import run_execute

    return run_execute(run_id=run_id)
