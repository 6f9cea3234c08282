"""A judge job on a real Celery worker subprocess (Redis broker, PostgreSQL): launched from the
judges page, run on the gpu queue to the end; a duplicated message answers nothing twice."""

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

from monitoring.judge_services import judge_create
from monitoring.models import Judge, JudgeOutput
from monitoring.tasks import judge_run
from tests.conftest import logged_in

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def gpu_worker(settings, tmp_path):
    """A gpu-queue worker on a queue of this test's own: one process, a fresh child per task."""
    if connection.vendor != "postgresql" or not settings.CELERY_BROKER_URL.startswith("redis"):
        pytest.skip("needs PostgreSQL and Redis (make test sets them)")
    settings.CONCORD_GPU_QUEUE = f"gpu-judge-test-{uuid.uuid4().hex[:8]}"
    db = connection.settings_dict
    env = {
        **os.environ,
        "CONCORD_GPU_QUEUE": settings.CONCORD_GPU_QUEUE,
        "CONCORD_VAR_DIR": str(tmp_path),
        "DATABASE_URL": f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:"
        f"{db['PORT'] or 5432}/{db['NAME']}",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "--queues",
         settings.CONCORD_GPU_QUEUE, "--concurrency", "1", "--max-tasks-per-child", "1",
         "--prefetch-multiplier", "1", "--without-gossip", "--without-mingle",
         "--loglevel", "WARNING"],
        cwd=ROOT, env=env, start_new_session=True,
    )  # fmt: skip
    yield settings.CONCORD_GPU_QUEUE
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def _wait_finished(judge: Judge, timeout: float = 180.0) -> Judge:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        judge.refresh_from_db()
        if judge.status in ("succeeded", "failed"):
            return judge
        time.sleep(0.3)
    raise AssertionError(f"timed out: judge is {judge.status}, {judge.done}/{judge.total}")


def test_judge_launched_from_the_page_runs_on_the_gpu_worker(
    judged_project, reward_run, ml_engineer, gpu_worker
):
    response = logged_in(ml_engineer).post(
        reverse("monitoring:judges", args=["judged"]),
        {"name": "rm", "kind": "reward_model", "reward_run": reward_run.pk, "max_new_tokens": 1,
         "template": "x"},
    )  # fmt: skip
    assert response.status_code == 302
    judge = _wait_finished(Judge.objects.get())
    assert judge.status == "succeeded", judge.error
    assert (judge.done, judge.total) == (12, 12)
    assert judge.started_at and judge.finished_at and judge.tie_band is not None
    assert judge.annotator.judgements.count() == 6


def test_duplicate_messages_answer_each_order_once(judged_project, reward_run, gpu_worker):
    judge = judge_create(
        project=judged_project, name="rm", kind="reward_model", created_by=None,
        reward_run=reward_run, tie_band=0.0,
    )  # fmt: skip
    Judge.objects.filter(pk=judge.pk).update(status="queued")
    for _ in range(2):
        judge_run.apply_async(args=[judge.pk], queue=gpu_worker)
    judge = _wait_finished(judge)
    time.sleep(3)  # give the second message time to be taken and found finished
    judge.refresh_from_db()
    assert judge.status == "succeeded", judge.error
    assert JudgeOutput.objects.filter(judge=judge).count() == 12
