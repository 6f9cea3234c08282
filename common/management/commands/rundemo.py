"""python manage.py rundemo [--addr 127.0.0.1:8000]: the web server and a Celery worker together."""

import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from config import queues


class Command(BaseCommand):
    help = (
        "Serve Concord with a Celery worker on both queues (default and gpu) until Ctrl-C. "
        "For the demo and local work; production runs gunicorn and workers separately."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--addr", default="127.0.0.1:8000", help="address:port to serve on")

    def handle(self, *args, addr: str, **options) -> None:
        worker_cmd = [
            sys.executable, "-m", "celery", "-A", "config", "worker",
            "--queues", ",".join(queues.ALL), "--concurrency", "1",
            # A fresh process per task: training and generation free their memory when done.
            "--max-tasks-per-child", "1", "--loglevel", "INFO",
            # The periodic reaper (dead training runs) runs in the same process for the demo.
            "--beat", "--schedule", str(settings.VAR_DIR / "celerybeat-schedule"),
        ]  # fmt: skip
        web_cmd = [sys.executable, "manage.py", "runserver", addr, "--noreload"]
        cwd = str(settings.BASE_DIR)
        worker = subprocess.Popen(worker_cmd, cwd=cwd)
        web = subprocess.Popen(web_cmd, cwd=cwd)
        self.stdout.write(f"Concord is serving on http://{addr}/ with a worker (Ctrl-C stops both)")
        stop = False

        def request_stop(signum, frame) -> None:
            nonlocal stop
            stop = True

        signal.signal(signal.SIGTERM, request_stop)
        try:
            while not stop and web.poll() is None and worker.poll() is None:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            for process in (web, worker):
                if process.poll() is None:
                    process.terminate()
            for process in (web, worker):
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
        failed = [
            name
            for name, p in (("web", web), ("worker", worker))
            if p.returncode not in (0, -15, None)
        ]
        if failed and not stop:
            raise SystemExit(f"{' and '.join(failed)} stopped unexpectedly")
