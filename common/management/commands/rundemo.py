"""python manage.py rundemo [--addr 127.0.0.1:8000]: the web server and two Celery workers together,
one on the default queue (imports, clustering, reports, endpoint judges; the periodic reaper) and one
on the gpu queue (training, generation, local judges), so quick jobs never wait behind training."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

# How long the web server may take to answer before the command gives up on it, in seconds.
STARTUP_TIMEOUT_S = 60.0


def split_addr(addr: str) -> tuple[str, int]:
    """``"127.0.0.1:8000"`` -> ``("127.0.0.1", 8000)``; a bare port means 127.0.0.1."""
    host, _, port = addr.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        raise CommandError(f"--addr must be HOST:PORT or PORT, got {addr!r}") from None
    if not 0 < number < 65536:
        raise CommandError(f"--addr: port must be 1-65535, got {number}")
    return host or "127.0.0.1", number


def port_free(host: str, port: int) -> bool:
    """True when nothing listens on host:port (so runserver can bind it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as runserver binds
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def worker_commands(schedule: Path) -> dict[str, list[str]]:
    """The demo's two workers by name (``default``, ``gpu``): one process each, a queue each.

    Each takes one task at a time in a fresh process, so a task's memory (a model, a parsed upload)
    is freed when it ends (forking the next one costs a fraction of a second); the default worker
    also runs the periodic reaper (``--beat``, its state in ``schedule``). Each has its own node
    name, so the broker keeps their control queues apart. The filesystem broker stores a message as
    a file named after its queue and a worker takes (renames away) only its own queue's files, so
    the two never take each other's messages.
    """
    common = [sys.executable, "-m", "celery", "-A", "config", "worker", "--concurrency", "1",
              "--max-tasks-per-child", "1", "--prefetch-multiplier", "1", "--loglevel", "INFO",
              # No broadcast chatter between the two: the demo uses no remote control.
              "--without-gossip", "--without-mingle"]  # fmt: skip
    return {
        "default": [
            *common, "--hostname", "default@%h", "--queues", settings.CELERY_TASK_DEFAULT_QUEUE,
            "--beat", "--schedule", str(schedule),
        ],
        "gpu": [
            *common, "--hostname", "gpu@%h", "--queues", settings.CONCORD_GPU_QUEUE,
        ],
    }  # fmt: skip


class Command(BaseCommand):
    help = (
        "Serve Concord with two Celery workers, one on the default queue and one on the gpu queue, "
        "until Ctrl-C. For the demo and local work; production runs gunicorn and workers separately."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--addr",
            default=os.environ.get("CONCORD_DEMO_ADDR", "127.0.0.1:8000"),
            help="HOST:PORT (or PORT) to serve on; `make demo PORT=8001` sets the port",
        )

    def handle(self, *args, addr: str, **options) -> None:
        host, port = split_addr(addr)
        if not port_free(host, port):
            raise CommandError(
                f"port {port} on {host} is already in use (another server, or a demo still "
                f"running). Stop it, or choose another port: make demo PORT={port + 1} "
                f"(or python manage.py rundemo --addr {host}:{port + 1})."
            )
        web_cmd = [sys.executable, "manage.py", "runserver", f"{host}:{port}", "--noreload"]
        cwd = str(settings.BASE_DIR)
        # Own sessions: Ctrl-C reaches this command only, which stops the children in order
        # (no tracebacks or "warm shutdown" banners from them).
        children = {
            f"{name} worker": subprocess.Popen(command, cwd=cwd, start_new_session=True)
            for name, command in worker_commands(settings.VAR_DIR / "celerybeat-schedule").items()
        }
        web = subprocess.Popen(web_cmd, cwd=cwd, start_new_session=True)
        children = {"web server": web, **children}
        stop = False

        def request_stop(signum, frame) -> None:
            nonlocal stop
            stop = True

        def all_alive() -> bool:
            return all(process.poll() is None for process in children.values())

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        try:
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            while not stop and web.poll() is None and not answers(host, port):
                if time.monotonic() > deadline:
                    raise CommandError(f"the web server did not answer on {host}:{port}")
                time.sleep(0.2)
            if not stop and web.poll() is None:
                self.stdout.write(
                    f"Concord is serving on http://{host}:{port}/ with a default-queue worker and "
                    "a gpu-queue worker (Ctrl-C stops all three)"
                )
            while not stop and all_alive():
                time.sleep(0.5)
        finally:
            for process in children.values():
                if process.poll() is None:
                    process.terminate()
            for process in children.values():
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        if stop:
            self.stdout.write("Stopped the web server and the two workers.")
            return
        failed = [name for name, process in children.items() if process.returncode]
        raise CommandError(f"the {' and the '.join(failed or ['demo'])} stopped unexpectedly")
