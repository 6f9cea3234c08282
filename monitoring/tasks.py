"""Celery tasks of monitoring. ``generate_round_responses`` goes to the gpu queue (the
``monitoring.tasks.generate_*`` route), or to the default queue when the round generates through a
serving endpoint; ``judge_run`` and ``judge_round`` to the queue their service names (the gpu queue
for a local model, the default queue for an endpoint judge). Tasks fetch ids and call services."""

from celery import shared_task


@shared_task(
    name="monitoring.tasks.generate_round_responses", acks_late=True, reject_on_worker_lost=True
)
def generate_round_responses(round_id: int) -> str:
    """Generate the checkpoint's and the baseline's responses of an eval round; returns its status.
    A redelivered message finds the generation job running or finished (the one job lifecycle's
    claim) and does nothing."""
    from monitoring.services.eval_rounds import round_generate

    return round_generate(round_id=round_id).status


@shared_task(name="monitoring.tasks.judge_run", acks_late=True, reject_on_worker_lost=True)
def judge_run(judge_id: int) -> str:
    """Run a model judge's job (sent by ``judge_launch``); returns its status. A redelivered
    message finds the job running or finished and does nothing; a relaunch answers only what is
    still missing."""
    from monitoring.services.judges import judge_run as run

    return run(judge_id=judge_id).status


@shared_task(name="monitoring.tasks.judge_round", acks_late=True, reject_on_worker_lost=True)
def judge_round(round_id: int) -> str:
    """Run an eval round's judge over every item in both orders (sent by ``round_judge_launch``);
    returns the job's status. A redelivered message finds the job running or finished and does
    nothing; a relaunch answers only what is missing."""
    from monitoring.services.round_judges import round_judge_run

    return round_judge_run(round_id=round_id).judge_status


@shared_task(name="monitoring.tasks.stopping_panel_refresh")
def stopping_panel_refresh(run_id: int) -> dict[str, int | str]:
    """Recompute a run's stopping-panel figures and store them (sent, debounced, by
    ``stopping_panel_refresh_schedule``); a run deleted since is skipped."""
    from monitoring.services.stopping_panel import stopping_panel_refresh as refresh
    from training.models import TrainingRun

    run = TrainingRun.objects.filter(pk=run_id).first()
    if run is None:
        return {"run": run_id, "status": "gone"}
    figures = refresh(run=run)
    return {"run": run_id, "status": "done", "computed_at": figures.computed_at.isoformat()}
