"""python manage.py rundemo [--addr 127.0.0.1:8000]: the web server and a Celery worker together."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from config import queues

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


class Command(BaseCommand):
    help = (
        "Serve Concord with a Celery worker on both queues (default and gpu) until Ctrl-C. "
        "For the demo and local work; production runs gunicorn and workers separately."
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
        worker_cmd = [
            sys.executable, "-m", "celery", "-A", "config", "worker",
            "--queues", ",".join(queues.ALL), "--concurrency", "1",
            # A fresh process per task: training and generation free their memory when done.
            "--max-tasks-per-child", "1", "--loglevel", "INFO",
            # The periodic reaper (dead training runs) runs in the same process for the demo.
            "--beat", "--schedule", str(settings.VAR_DIR / "celerybeat-schedule"),
        ]  # fmt: skip
        web_cmd = [sys.executable, "manage.py", "runserver", f"{host}:{port}", "--noreload"]
        cwd = str(settings.BASE_DIR)
        # Own sessions: Ctrl-C reaches this command only, which stops both children in order
        # (no tracebacks or "warm shutdown" banners from them).
        worker = subprocess.Popen(worker_cmd, cwd=cwd, start_new_session=True)
        web = subprocess.Popen(web_cmd, cwd=cwd, start_new_session=True)
        stop = False

        def request_stop(signum, frame) -> None:
            nonlocal stop
            stop = True

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
                    f"Concord is serving on http://{host}:{port}/ with a worker (Ctrl-C stops both)"
                )
            while not stop and web.poll() is None and worker.poll() is None:
                time.sleep(0.5)
        finally:
            for process in (web, worker):
                if process.poll() is None:
                    process.terminate()
            for process in (web, worker):
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        if stop:
            self.stdout.write("Stopped the web server and the worker.")
            return
        failed = [name for name, p in (("web server", web), ("worker", worker)) if p.returncode]
        raise CommandError(f"the {' and the '.join(failed or ['demo'])} stopped unexpectedly")
