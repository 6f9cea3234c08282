"""Fault: the broker restarts while jobs are queued. Does every job still run, and only once?

For each broker configuration: queue N tasks on the project's real Celery app (late
acknowledgement, as configured in settings) while no worker runs, kill the broker (SIGKILL, as a
crash or an OOM kill would) and start it again, then start a worker and check that every task ran
exactly once.

The broker is a private redis-server on a free loopback port, so the machine's own Redis (which
the test suites use) is never interrupted. The script always uses it, whatever the environment
says: an exported ``CELERY_BROKER_URL`` (as for the test suite) would otherwise win over a
configured broker in Celery, and the tasks would go to that Redis. Configurations:

- ``none``: ``--save "" --appendonly no``, as this machine's Redis runs: nothing is on disk, so a
  restart empties every queue. Expected to FAIL; shown to make the point.
- ``aof``: ``--appendonly yes`` (appendfsync everysec, Redis's default). Every write reaches the
  append-only file through the OS at once: a killed server loses nothing; a machine that loses
  power loses at most the last second.

    .venv/bin/python bench/fault_broker_restart.py [--tasks 20] [--configs none aof]

Prints one PASS/FAIL line per configuration, then one JSON object; exits non-zero when a durable
configuration (aof) loses a task or runs one twice.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stack

DURABLE = {"none": False, "aof": True}
CONFIG_ARGS = {
    "none": ["--save", "", "--appendonly", "no"],
    "aof": ["--save", "", "--appendonly", "yes", "--appendfsync", "everysec"],
}


def _start_redis(port: int, folder: Path, config: str) -> subprocess.Popen:
    import redis

    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
         "--logfile", str(folder / "redis.log"), *CONFIG_ARGS[config]],
    )  # fmt: skip
    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            return server
        except redis.ConnectionError:
            time.sleep(0.05)
    raise RuntimeError(f"redis-server on port {port} did not start; see {folder / 'redis.log'}")


def private_broker_url(port: int) -> str:
    """The URL of the script's own redis-server on ``port`` (database 0)."""
    return f"redis://127.0.0.1:{port}/0"


# Variables through which Celery or the settings would choose another broker or result store.
_BROKER_VARIABLES = (
    "CELERY_BROKER_URL",
    "CELERY_BROKER_READ_URL",
    "CELERY_BROKER_WRITE_URL",
    "CELERY_RESULT_BACKEND",
    "CACHE_URL",
)


def private_broker_env(url: str, **extra: str) -> dict[str, str]:
    """The worker's environment: the bench environment with every broker, result and cache
    variable set to the private broker ``url`` (Celery reads ``CELERY_BROKER_URL`` from the
    environment before its configuration, so whatever was exported must be replaced)."""
    env = stack.server_env(**extra)
    for name in _BROKER_VARIABLES:
        env.pop(name, None)
    env["CELERY_BROKER_URL"] = url
    env["CELERY_RESULT_BACKEND"] = url
    return env


def send_to_private_broker(url: str, queue: str, tokens: list[str], record: Path) -> int:
    """Send one ``record_execution`` task per token to ``queue`` on the broker at ``url``, through a
    connection opened on that URL (not the app's configured broker, which the environment can
    override), and return how many messages the queue then holds."""
    import redis
    from celery import Celery

    # The project's Celery settings (late ack, routes, serializers); no result store.
    app = Celery("concord")
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.conf.result_backend = None
    try:
        with app.connection_for_write(url) as connection:
            for token in tokens:
                app.send_task(
                    "bench.fault_tasks.record_execution",
                    args=[token, str(record)],
                    queue=queue,
                    connection=connection,
                    ignore_result=True,
                )
    finally:
        app.close()
    return redis.Redis.from_url(url).llen(queue)


def _executions(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def broker_trial(config: str, tasks: int, port: int) -> dict[str, object]:
    """One trial on a private redis-server on ``port`` started with ``config``: queue ``tasks``
    tasks, SIGKILL and restart the broker, run a worker, count what ran. Returns the counts and
    the verdict (PASS: every task queued, none lost, none run twice)."""
    import redis

    queue = f"fault-{uuid.uuid4().hex[:8]}"
    url = private_broker_url(port)
    with tempfile.TemporaryDirectory() as tmp:
        folder, record = Path(tmp), Path(tmp) / "executions.txt"
        server = _start_redis(port, folder, config)
        worker = None
        worker_log = (folder / "worker.log").open("w")
        try:
            tokens = [f"task-{i}" for i in range(tasks)]
            queued = send_to_private_broker(url, queue, tokens, record)
            server.kill()  # SIGKILL: no chance to save anything more
            server.wait()
            started = time.monotonic()
            server = _start_redis(port, folder, config)
            restart_s = time.monotonic() - started
            after_restart = redis.Redis(port=port).llen(queue)
            worker = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "config", "worker", "--include",
                 "fault_tasks", "--queues", queue, "--concurrency", "2", "--without-gossip",
                 "--without-mingle", "--loglevel", "WARNING"],
                cwd=stack.ROOT,
                stdout=worker_log,
                stderr=subprocess.STDOUT,
                env=private_broker_env(
                    url, PYTHONPATH=f"{stack.ROOT}{os.pathsep}{stack.ROOT / 'bench'}"
                ),
            )  # fmt: skip
            deadline = time.monotonic() + (60 if after_restart else 15)
            while time.monotonic() < deadline and len(set(_executions(record))) < tasks:
                time.sleep(0.2)
            time.sleep(3)  # a duplicate delivery would show up now
            ran = _executions(record)
        finally:
            if worker is not None:
                worker.terminate()
                worker.wait(timeout=30)
            worker_log.close()
            server.kill()
            server.wait()
            log = (folder / "worker.log").read_text()
            if "ERROR" in log or "Traceback" in log:
                sys.stderr.write(log)
    lost = sorted(set(tokens) - set(ran))
    twice = sorted({t for t in ran if ran.count(t) > 1})
    return {
        "config": config,
        "tasks": tasks,
        "in_queue_before_restart": queued,
        "in_queue_after_restart": after_restart,
        "broker_restart_s": round(restart_s, 2),
        "ran": len(set(ran)),
        "lost": len(lost),
        "ran_twice": len(twice),
        "verdict": "PASS" if not lost and not twice and queued == tasks else "FAIL",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument(
        "--configs", nargs="+", choices=sorted(CONFIG_ARGS), default=["none", "aof"]
    )
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(stack.ROOT))
    port = stack.free_port()
    results = [broker_trial(config, args.tasks, port) for config in args.configs]
    for result in results:
        expectation = "" if DURABLE[result["config"]] else " (expected: nothing on disk)"
        print(
            f"{result['config']}: {result['verdict']}{expectation} - {result['tasks']} queued, "
            f"{result['in_queue_after_restart']} still queued after the restart, "
            f"{result['ran']} ran, {result['lost']} lost, {result['ran_twice']} ran twice"
        )
    print(json.dumps(results, indent=2))
    durable_failed = [r for r in results if DURABLE[r["config"]] and r["verdict"] != "PASS"]
    return 1 if durable_failed else 0


if __name__ == "__main__":
    sys.exit(main())
