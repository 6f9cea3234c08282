"""Claim + submit round trips through the real stack: gunicorn, Django, PostgreSQL, N annotators.

Each simulated annotator logs in, then loops: GET the labelling page (which claims the next pair),
POST a verdict (which stores the judgement and redirects), with no think time. Prints one JSON object:
round-trip latency percentiles (ms), round trips per second, and an integrity check of the database
afterwards (no comparison over its overlap, no annotator twice on one comparison).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/concord_bench \\
        .venv/bin/python bench/bench_labelling.py [--annotators 50] [--seconds 30] [--workers 4]

The database named in DATABASE_URL is emptied and rebuilt (migrate + flush) first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "bench-password-1"  # noqa: S105 - throwaway accounts in a throwaway database
ACTION = re.compile(r'<form method="post" action="([^"]+)" id="verdict"')
CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def _manage(*args: str, env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True)


def _create_database(url: str) -> None:
    """CREATE DATABASE for the URL's database when it does not exist yet."""
    import environ
    import psycopg

    config = environ.Env.db_url_config(url)
    with psycopg.connect(
        host=config["HOST"] or "127.0.0.1", port=config["PORT"] or 5432,
        user=config["USER"] or "postgres", password=config["PASSWORD"] or None,
        dbname="postgres", autocommit=True,
    ) as conn:  # fmt: skip
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [config["NAME"]])
        if exists.fetchone() is None:
            conn.execute(f'CREATE DATABASE "{config["NAME"]}"')


def _prepare(env: dict[str, str], annotators: int, comparisons: int) -> None:
    _create_database(env["DATABASE_URL"])
    _manage("migrate", "--no-input", "-v0", env=env)
    _manage("flush", "--no-input", "-v0", env=env)
    code = f"""
import django, os
django.setup()
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import User, Group
from annotation.models import Project, Prompt, Response, Comparison
p = Project.objects.create(name="Bench", slug="bench", overlap=3, gold_every=0, repeat_every=0)
prompts = Prompt.objects.bulk_create(
    [Prompt(project=p, text=f"prompt {{i}}", content_hash=f"{{i:064d}}") for i in range({comparisons})])
responses = Response.objects.bulk_create(
    [Response(prompt=q, text=f"{{side}} {{q.pk}}", content_hash=f"{{side}}{{q.pk:063d}}")
     for q in prompts for side in "ab"])
Comparison.objects.bulk_create([
    Comparison(project=p, prompt=prompts[i], response_a=responses[2 * i],
               response_b=responses[2 * i + 1], content_hash=f"{{i:064d}}")
    for i in range({comparisons})])
group = Group.objects.get(name="Annotator")
pw = make_password("{PASSWORD}")
users = User.objects.bulk_create([User(username=f"ann{{i}}", password=pw) for i in range({annotators})])
group.user_set.add(*users)
p.members.add(*users)
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute("ANALYZE")
"""
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _annotator(base: str, name: str, stop: float, latencies: list[float], errors: list[str]):
    session = requests.Session()
    page = session.get(f"{base}/accounts/login/", timeout=30)
    token = CSRF.search(page.text).group(1)
    session.post(
        f"{base}/accounts/login/",
        data={"username": name, "password": PASSWORD, "csrfmiddlewaretoken": token},
        headers={"Referer": f"{base}/accounts/login/"},
        timeout=30,
    )
    while time.perf_counter() < stop:
        started = time.perf_counter()
        page = session.get(f"{base}/annotation/p/bench/label/", timeout=30)
        action = ACTION.search(page.text)
        if page.status_code != 200 or action is None:
            if "Nothing left to label" not in page.text:
                errors.append(f"GET {page.status_code}")
            return
        token = CSRF.search(page.text).group(1)
        answer = session.post(
            base + action.group(1),
            data={"pick": "left", "strength": "1", "elapsed_ms": "1000",
                  "csrfmiddlewaretoken": token},
            headers={"Referer": f"{base}/annotation/p/bench/label/"},
            allow_redirects=False,
            timeout=30,
        )  # fmt: skip
        if answer.status_code != 302:
            errors.append(f"POST {answer.status_code}")
            continue
        latencies.append((time.perf_counter() - started) * 1000)


def _integrity(env: dict[str, str]) -> dict[str, int]:
    code = """
import django, json
django.setup()
from django.db.models import Count
from annotation.models import Comparison, Judgement
over = Comparison.objects.annotate(n=Count("judgements")).filter(n__gt=3).count()
dup = (Judgement.objects.values("comparison", "annotator").annotate(n=Count("id"))
       .filter(n__gt=1).count())
print(json.dumps({"judgements": Judgement.objects.count(), "over_assigned": over,
                  "duplicate_judgements": dup}))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--annotators", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--workers", type=int, default=4, help="gunicorn worker processes")
    parser.add_argument("--comparisons", type=int, default=20_000)
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("set DATABASE_URL to a PostgreSQL database that may be emptied")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "PYTHONPATH": str(ROOT)}
    _prepare(env, args.annotators, args.comparisons)

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "config.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", str(args.workers), "--threads", "4", "--log-level", "warning"],
        cwd=ROOT, env=env,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                requests.get(f"{base}/accounts/login/", timeout=5)
                break
            except (requests.ConnectionError, requests.Timeout):
                time.sleep(0.2)
        latencies: list[float] = []
        errors: list[str] = []
        stop = time.perf_counter() + args.seconds
        threads = [
            threading.Thread(target=_annotator, args=(base, f"ann{i}", stop, latencies, errors))
            for i in range(args.annotators)
        ]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - started
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    ordered = sorted(latencies)

    def pct(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1) if ordered else 0.0

    print(
        json.dumps(
            {
                "benchmark": "claim+submit round trip (GET label page, POST verdict)",
                "annotators": args.annotators,
                "gunicorn_workers": args.workers,
                "seconds": round(wall, 1),
                "round_trips": len(ordered),
                "round_trips_per_s": round(len(ordered) / wall, 1),
                "latency_ms": {
                    "p50": pct(0.50),
                    "p95": pct(0.95),
                    "p99": pct(0.99),
                    "mean": round(statistics.fmean(ordered), 1) if ordered else 0.0,
                },
                "errors": len(errors),
                "database": _integrity(env),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
