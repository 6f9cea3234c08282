"""A real Celery worker (a subprocess on the Redis broker) picks up and runs a task."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from common.tasks import worker_ping

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.services


@pytest.fixture
def worker_queue():
    """A worker subprocess consuming a queue of its own (no stale messages from other runs)."""
    if not settings.CELERY_BROKER_URL.startswith(("redis://", "amqp://")):
        pytest.skip("needs CELERY_BROKER_URL pointing at Redis or RabbitMQ (make test sets it)")
    queue = f"smoke-{uuid.uuid4().hex[:8]}"
    process = subprocess.Popen(
        [
            sys.executable, "-m", "celery", "-A", "config", "worker", "--queues", queue,
            "--concurrency", "1", "--pool", "prefork", "--without-gossip", "--without-mingle",
            "--loglevel", "WARNING",
        ],
        cwd=ROOT,
        env=os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    yield queue
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()


def test_worker_subprocess_executes_task(worker_queue):
    """The result comes from another process: the worker's pid, not ours."""
    token = uuid.uuid4().hex
    result = worker_ping.apply_async(args=[token], queue=worker_queue)
    answer = result.get(timeout=90)
    assert answer["token"] == token
    assert answer["pid"] != os.getpid()


def test_training_tasks_route_to_the_gpu_queue():
    """Training and generation go to the gpu queue; everything else to default."""
    app = worker_ping.app
    router = app.amqp.router
    assert router.route({}, "training.tasks.run_training")["queue"].name == "gpu"
    assert router.route({}, "monitoring.tasks.generate_responses")["queue"].name == "gpu"
    assert router.route({}, "common.tasks.worker_ping")["queue"].name == "default"
    assert app.conf.task_acks_late and app.conf.worker_prefetch_multiplier == 1
