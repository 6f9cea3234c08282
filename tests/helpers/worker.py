"""A Celery worker subprocess on a queue of the test's own, with the settings it shares with the test
process (``stack``), and waiting for a run to reach a state (``wait_for_run``)."""

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.db import connection

from tests.helpers.tiny_models import tiny_llama

ROOT = Path(__file__).resolve().parents[2]


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


def wait_for_run(run, condition, timeout=180.0):
    """Refresh ``run`` until ``condition(run)`` holds (AssertionError after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if condition(run):
            return run
        time.sleep(0.2)
    raise AssertionError(f"timed out; run is {run.status} at step {run.step}: {run.error[-500:]}")
