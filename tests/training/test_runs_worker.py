"""Training runs through a real Celery worker subprocess (Redis broker, PostgreSQL): launched from
the admin action, finished with metrics and checkpoints; cancelled; killed with SIGKILL mid-run and
resumed from its last checkpoint; a duplicated task message runs nothing twice."""

import os
import time
from pathlib import Path

import pytest
from django.urls import reverse

from tests.factories import snapshot_of_pairs, training_run
from tests.helpers.clients import logged_in
from tests.helpers.worker import Worker, wait_for_run
from training import services
from training.models import Checkpoint, MetricPoint, TrainingRun
from training.tasks import run_training_task

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.services,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


@pytest.fixture
def worker(stack):
    w = Worker(stack)
    w.start()
    yield w
    w.stop()


@pytest.fixture
def snapshot(stack):
    return snapshot_of_pairs(slug="worker-runs")


def _run(snapshot, kind="dpo", **config):
    base = {"max_steps": 6, "batch_size": 2, "max_length": 64, "checkpoint_every": 2,
            "learning_rate": 1e-3, "epochs": 50}  # fmt: skip
    return training_run(snapshot=snapshot, kind=kind, name="worker run", config={**base, **config})


@pytest.mark.parametrize("kind", ["dpo", "simpo", "orpo", "kto"])
def test_admin_launch_runs_to_the_end_on_the_worker(kind, snapshot, worker, ml_engineer):
    """Each pair kind (DPO, the reference-free SimPO and ORPO, and KTO on the snapshot's pairs
    split into desirable and undesirable examples) runs on the worker."""
    run = _run(snapshot, kind)
    logged_in(ml_engineer).post(
        reverse("admin:training_trainingrun_changelist"),
        {"action": "launch", "_selected_action": [run.pk]},
    )
    wait_for_run(run, lambda r: r.status in TrainingRun.FINISHED)
    assert run.status == "succeeded", run.error
    assert run.step == run.total_steps == 6
    assert MetricPoint.objects.filter(run=run, name="loss").count() >= 6
    assert list(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [2, 4, 6]
    assert run.worker and run.worker.split(":")[1] != str(os.getpid())


def test_a_grpo_run_with_verifiable_rewards_runs_on_the_worker(snapshot, worker):
    """GRPO scored by a verifiable reward alone (no reward-model run, no reference at kl_coef 0)
    runs on the worker from the snapshot's prompts: every step logs its reward component, and
    the checkpoints come at their interval."""
    config = {"group_size": 2, "max_new_tokens": 4, "kl_coef": 0.0, "eval_prompts": 0,
              "rewards": ['length_penalty {"target": 20}'], "max_steps": 4}  # fmt: skip
    run = _run(snapshot, "grpo", **config)
    services.run_launch(run=run, user=None)
    wait_for_run(run, lambda r: r.status in TrainingRun.FINISHED)
    assert run.status == "succeeded", run.error
    assert run.step == run.total_steps == 4
    assert MetricPoint.objects.filter(run=run, name="reward/length_penalty_mean").count() == 4
    assert list(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [2, 4]
    assert run.summary["reference_model"] is False


def test_cancel_reaches_the_running_loop_within_seconds(snapshot, worker):
    run = _run(snapshot, max_steps=100_000, checkpoint_every=0)
    services.run_launch(run=run, user=None)
    wait_for_run(run, lambda r: r.status == "running" and r.step > 0)
    asked = time.monotonic()
    services.run_cancel(run=run, user=None)
    wait_for_run(run, lambda r: r.status in TrainingRun.FINISHED, timeout=60)
    assert run.status == "cancelled"
    assert time.monotonic() - asked < 15
    assert run.checkpoints.exists()


def test_sigkill_mid_run_then_resume_repeats_at_most_one_interval(snapshot, stack):
    first = Worker(stack)
    first.start()
    try:
        run = _run(snapshot, max_steps=60, epochs=15, checkpoint_every=5)
        services.run_launch(run=run, user=None)
        wait_for_run(run, lambda r: r.checkpoints.filter(step__gte=10).exists())
    finally:
        first.kill()
    run.refresh_from_db()
    assert run.status == "running"  # nobody said otherwise: the heartbeat just stops
    logged_before_kill = max(
        MetricPoint.objects.filter(run=run, name="loss").values_list("step", flat=True)
    )
    time.sleep(0.5)
    assert services.runs_reap_stale(stale_after_s=0) == [run.pk]
    run.refresh_from_db()
    assert run.status == "failed" and "resume" in run.error
    services.run_resume(run=run, user=None)
    # Resuming also records a checkpoint written just before the kill but not yet recorded.
    last = run.checkpoints.order_by("-step").first().step
    resumed = run.events.get(action="resumed")
    second = Worker(stack)
    second.start()
    try:
        wait_for_run(run, lambda r: r.status in TrainingRun.FINISHED, timeout=300)
    finally:
        second.stop()
    assert run.status == "succeeded", run.error
    assert run.step == run.total_steps == 60 and run.attempts == 2
    assert resumed.detail["from_step"] == last
    # The second attempt starts right after the last checkpoint: the steps done twice are those
    # logged after it before the kill, never more than one checkpoint interval.
    again = MetricPoint.objects.filter(run=run, name="loss", created_at__gt=resumed.created_at)
    assert min(again.values_list("step", flat=True)) == last + 1
    assert 0 <= logged_before_kill - last <= 5


def test_duplicate_task_message_runs_nothing_twice(snapshot, worker, stack):
    run = _run(snapshot)
    TrainingRun.objects.filter(pk=run.pk).update(status="queued")
    for _ in range(2):
        run_training_task.apply_async(args=[run.pk], queue=stack["CONCORD_GPU_QUEUE"])
    wait_for_run(run, lambda r: r.status in TrainingRun.FINISHED)
    time.sleep(3)  # give the second message time to be taken and found claimed
    run.refresh_from_db()
    assert run.status == "succeeded" and run.attempts == 1
    assert run.events.filter(action="started").count() == 1
