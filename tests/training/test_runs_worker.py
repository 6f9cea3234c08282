"""Training runs through a real Celery worker subprocess (Redis broker, PostgreSQL): launched from
the admin action, finished with metrics and checkpoints; cancelled; killed with SIGKILL mid-run and
resumed from its last checkpoint; a duplicated task message runs nothing twice."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.db import connection
from django.urls import reverse

from annotation.services.exporting import dataset_export
from annotation.services.importing import comparisons_import, project_get_or_create
from tests.conftest import logged_in
from tests.training.conftest import PAIRS, tiny_llama
from training import services
from training.models import Checkpoint, MetricPoint, TrainingRun
from training.tasks import run_training_task

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def stack(tmp_path, tiny_tokenizer_dir, settings):
    """Settings shared by this process and the worker: a tiny model under the SmolLM2 name, folders
    in tmp, a queue of this test's own, a fast heartbeat."""
    if connection.vendor != "postgresql" or not settings.CELERY_BROKER_URL.startswith("redis"):
        pytest.skip("needs PostgreSQL and Redis (make test sets them)")
    tiny_llama(tmp_path / "models" / "smollm2-135m-instruct", tiny_tokenizer_dir)
    values = {
        "CONCORD_MODELS_DIR": tmp_path / "models",
        "CONCORD_RUNS_DIR": tmp_path / "runs",
        "CONCORD_VAR_DIR": tmp_path,
        "CONCORD_GPU_QUEUE": f"gpu-test-{uuid.uuid4().hex[:8]}",
        "CONCORD_HEARTBEAT_EVERY_S": 0.2,
    }
    settings.CONCORD_MODELS_DIR = values["CONCORD_MODELS_DIR"]
    settings.CONCORD_RUNS_DIR = values["CONCORD_RUNS_DIR"]
    settings.VAR_DIR = tmp_path
    settings.EXPORT_DIR = tmp_path / "exports"
    settings.CONCORD_GPU_QUEUE = values["CONCORD_GPU_QUEUE"]
    env = {**os.environ, **{k: str(v) for k, v in values.items()}}
    env["DATABASE_URL"] = (
        f"postgres://{connection.settings_dict['USER'] or 'postgres'}@"
        f"{connection.settings_dict['HOST'] or '127.0.0.1'}:{connection.settings_dict['PORT'] or 5432}/"
        f"{connection.settings_dict['NAME']}"
    )
    return env


class Worker:
    """A gpu-queue worker as production runs it: one process, a fresh child per task, late ack."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", "worker",
             "--queues", self.env["CONCORD_GPU_QUEUE"], "--concurrency", "1",
             "--max-tasks-per-child", "1", "--prefetch-multiplier", "1",
             "--without-gossip", "--without-mingle", "--loglevel", "WARNING"],
            cwd=ROOT, env=self.env, start_new_session=True,
        )  # fmt: skip

    def kill(self) -> None:
        """SIGKILL the whole worker (main process and its child): no clean shutdown at all."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def worker(stack):
    w = Worker(stack)
    w.start()
    yield w
    w.stop()


@pytest.fixture
def snapshot(stack):
    project, _ = project_get_or_create(slug="worker-runs")
    rows = [
        {"prompt": p, "response_a": c, "response_b": r,
         "judgements": [{"annotator": "u1", "choice": "a", "strength": 2}]}
        for p, c, r in PAIRS
    ]  # fmt: skip
    comparisons_import(project=project, lines=[json.dumps(r) for r in rows])
    return services.snapshot_for(export=dataset_export(project=project))


def _run(snapshot, **config):
    base = {"max_steps": 6, "batch_size": 2, "max_length": 64, "checkpoint_every": 2,
            "learning_rate": 1e-3, "epochs": 50}  # fmt: skip
    return services.run_create(
        name="worker run", kind="dpo", base_model="smollm2-135m-instruct", snapshot=snapshot,
        config={**base, **config},
    )  # fmt: skip


def _wait(run, condition, timeout=180.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if condition(run):
            return run
        time.sleep(0.2)
    raise AssertionError(f"timed out; run is {run.status} at step {run.step}: {run.error[-500:]}")


def test_admin_launch_runs_to_the_end_on_the_worker(snapshot, worker, ml_engineer):
    run = _run(snapshot)
    logged_in(ml_engineer).post(
        reverse("admin:training_trainingrun_changelist"),
        {"action": "launch", "_selected_action": [run.pk]},
    )
    _wait(run, lambda r: r.status in TrainingRun.FINISHED)
    assert run.status == "succeeded", run.error
    assert run.step == run.total_steps == 6
    assert MetricPoint.objects.filter(run=run, name="loss").count() >= 6
    assert list(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [2, 4, 6]
    assert run.worker and run.worker.split(":")[1] != str(os.getpid())


def test_cancel_reaches_the_running_loop_within_seconds(snapshot, worker):
    run = _run(snapshot, max_steps=100_000, checkpoint_every=0)
    services.run_launch(run=run, user=None)
    _wait(run, lambda r: r.status == "running" and r.step > 0)
    asked = time.monotonic()
    services.run_cancel(run=run, user=None)
    _wait(run, lambda r: r.status in TrainingRun.FINISHED, timeout=60)
    assert run.status == "cancelled"
    assert time.monotonic() - asked < 15
    assert run.checkpoints.exists()


def test_sigkill_mid_run_then_resume_repeats_at_most_one_interval(snapshot, stack):
    first = Worker(stack)
    first.start()
    try:
        run = _run(snapshot, max_steps=60, epochs=15, checkpoint_every=5)
        services.run_launch(run=run, user=None)
        _wait(run, lambda r: r.checkpoints.filter(step__gte=10).exists())
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
        _wait(run, lambda r: r.status in TrainingRun.FINISHED, timeout=300)
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
    _wait(run, lambda r: r.status in TrainingRun.FINISHED)
    time.sleep(3)  # give the second message time to be taken and found claimed
    run.refresh_from_db()
    assert run.status == "succeeded" and run.attempts == 1
    assert run.events.filter(action="started").count() == 1
