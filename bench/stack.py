"""The real serving stack for the labelling load, stress and fault scripts: a PostgreSQL database
rebuilt with a bench project, gunicorn serving Django on loopback, and the integrity check of what
was stored afterwards.

Scripts run from the repository root put ``bench/`` on ``sys.path`` and ``import stack``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT_SLUG = "bench"
LABEL_PATH = f"/annotation/p/{PROJECT_SLUG}/label/"
OVERLAP = 3


def server_env(**extra: str) -> dict[str, str]:
    """The environment of the bench processes: this one's, DEBUG off (as in production: no query
    log, no debug pages), Django settings on the path."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "PYTHONPATH": str(ROOT),
        "DJANGO_DEBUG": "false",
        "LOG_LEVEL": "WARNING",
    }
    env.update(extra)
    return env


def require_postgres() -> None:
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("set DATABASE_URL to a PostgreSQL database that may be emptied")


def create_database(url: str) -> None:
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


def _django(code: str, env: dict[str, str]) -> object:
    """Run ``code`` in a fresh Django process; it ends by printing one JSON value, returned here."""
    done = subprocess.run(
        [sys.executable, "-c", "import django\ndjango.setup()\n" + code],
        cwd=ROOT, env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def prepare(env: dict[str, str], *, annotators: int, comparisons: int) -> list[str]:
    """Empty and migrate the database; create the bench project (``comparisons`` pairs, overlap 3)
    and ``annotators`` annotator accounts, each already logged in. Returns their session keys.

    Sessions are written directly (as the test client's force_login does): logging 200 accounts in
    through the login form would spend minutes of the machine's two cores on password hashing.
    """
    create_database(env["DATABASE_URL"])
    for command in (["migrate", "--no-input", "-v0"], ["flush", "--no-input", "-v0"]):
        subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env, check=True)
    code = f"""
import json
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import Group, User
from importlib import import_module
from django.conf import settings
SessionStore = import_module(settings.SESSION_ENGINE).SessionStore
from django.db import connection
from annotation.models import Comparison, Project, Prompt, Response
p = Project.objects.create(name="Bench", slug="{PROJECT_SLUG}", overlap={OVERLAP}, gold_every=0,
                           repeat_every=0)
prompts = Prompt.objects.bulk_create(
    [Prompt(project=p, text=f"prompt {{i}}", content_hash=f"{{i:064d}}") for i in range({comparisons})])
responses = Response.objects.bulk_create(
    [Response(prompt=q, text=f"{{side}} {{q.pk}}", content_hash=f"{{side}}{{q.pk:063d}}")
     for q in prompts for side in "ab"])
Comparison.objects.bulk_create([
    Comparison(project=p, prompt=prompts[i], response_a=responses[2 * i],
               response_b=responses[2 * i + 1], content_hash=f"{{i:064d}}", queue_position=i)
    for i in range({comparisons})])
users = User.objects.bulk_create(
    [User(username=f"ann{{i}}", password="!") for i in range({annotators})])
Group.objects.get(name="Annotator").user_set.add(*users)
p.members.add(*users)
keys = []
for user in users:
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]  # the login form's backend
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    keys.append(session.session_key)
with connection.cursor() as cursor:
    # what autovacuum does in the minutes after a large import: measured after it, not during it
    cursor.execute("VACUUM ANALYZE")
print(json.dumps(keys))
"""
    return _django(code, env)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_serving(base: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            url = f"{base}/accounts/login/"
            urllib.request.urlopen(url, timeout=5).close()  # noqa: S310 - our own http URL
            return
        except (urllib.error.URLError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@dataclass
class Server:
    base: str
    process: subprocess.Popen

    def worker_pids(self) -> list[int]:
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return [int(pid) for pid in children.read_text().split()] if children.exists() else []


@contextlib.contextmanager
def gunicorn(
    env: dict[str, str], *, workers: int, threads: int, log: Path | None = None
) -> Iterator[Server]:
    """gunicorn serving Django on a free loopback port, stopped at the end; its output (Django's
    error log included) goes to ``log`` when given."""
    port = free_port()
    output = log.open("w") if log else None
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "config.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", str(workers), "--threads", str(threads), "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT if output else None,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(base)
        yield Server(base, server)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        if output:
            output.close()


def integrity(env: dict[str, str], acknowledged: set[int] | None = None) -> dict[str, int]:
    """What the database holds after a run: no comparison over its overlap, no annotator twice on a
    comparison, every judgement's assignment completed and, given the assignment ids whose submission
    was acknowledged (a redirect), every one of them stored exactly once."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(sorted(acknowledged or ()), handle)
    code = f"""
import json
from django.db.models import Count, Exists, F, OuterRef, Subquery
from django.db.models.functions import Coalesce
from annotation.models import Assignment, Comparison, Judgement
acknowledged = set(json.load(open({handle.name!r})))
over = Comparison.objects.annotate(n=Count("judgements")).filter(n__gt={OVERLAP}).count()
dup = (Judgement.objects.values("comparison", "annotator").annotate(n=Count("id"))
       .filter(n__gt=1).count())
done = Assignment.objects.filter(status=Assignment.Status.DONE, kind=Assignment.Kind.NORMAL)
judged = Judgement.objects.filter(
    comparison=OuterRef("comparison"), annotator=OuterRef("annotator"))
done_ids = set(done.values_list("pk", flat=True))
stored_ids = set(done.filter(Exists(judged)).values_list("pk", flat=True))
completed = Assignment.objects.filter(
    status=Assignment.Status.DONE, comparison=OuterRef("comparison"),
    annotator=OuterRef("annotator"))
# taken = active leases + judgements, for every pair outside the gold items
leases = Assignment.objects.filter(comparison=OuterRef("pk"), kind=Assignment.Kind.NORMAL,
                                   status=Assignment.Status.ACTIVE).values("comparison")
stored = Judgement.objects.filter(comparison=OuterRef("pk")).values("comparison")
mismatch = Comparison.objects.filter(gold="").annotate(
    leases=Coalesce(Subquery(leases.annotate(n=Count("pk")).values("n")), 0),
    stored=Coalesce(Subquery(stored.annotate(n=Count("pk")).values("n")), 0),
).exclude(taken=F("leases") + F("stored")).count()
result = {{
    "judgements": Judgement.objects.count(),
    "taken_mismatch": mismatch,
    "over_assigned": over,
    "duplicate_judgements": dup,
    "judgements_without_completed_assignment": Judgement.objects.exclude(
        Exists(completed)).count(),
    "completed_assignments_without_judgement": len(done_ids - stored_ids),
}}
if acknowledged:
    result.update({{
        "acknowledged": len(acknowledged),
        "acknowledged_stored": len(acknowledged & stored_ids),
        "acknowledged_missing": len(acknowledged - stored_ids),
        "stored_not_acknowledged": len(stored_ids - acknowledged),
    }})
print(json.dumps(result))
"""
    try:
        return _django(code, env)
    finally:
        os.unlink(handle.name)


def _cpu_of(pid: int) -> float | None:
    """User + system CPU seconds the process has used so far; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


class CpuMeter:
    """CPU used by a changing set of processes (database backends come and go as connections are
    recycled): sample often; each process counts from its first sample, or from zero when it
    started after the first one."""

    def __init__(self, pids: list[int]) -> None:
        self.first = {pid: cpu for pid in pids if (cpu := _cpu_of(pid)) is not None}
        self.last = dict(self.first)

    def sample(self, pids: list[int]) -> None:
        for pid in pids:
            if (cpu := _cpu_of(pid)) is not None:
                self.first.setdefault(pid, 0.0)
                self.last[pid] = cpu

    def seconds(self) -> float:
        return sum(self.last[pid] - self.first[pid] for pid in self.last)


def database_backend_pids(env: dict[str, str]) -> list[int]:
    """The PostgreSQL server processes serving connections to the bench database."""
    import environ
    import psycopg

    config = environ.Env.db_url_config(env["DATABASE_URL"])
    with psycopg.connect(
        host=config["HOST"] or "127.0.0.1", port=config["PORT"] or 5432,
        user=config["USER"] or "postgres", dbname="postgres", autocommit=True,
    ) as conn:  # fmt: skip
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", [config["NAME"]]
        ).fetchall()
    return [pid for (pid,) in rows]


def percentiles(values: list[float]) -> dict[str, float]:
    """p50/p95/p99/max of ``values`` (milliseconds), nearest-rank, rounded to 0.1."""
    ordered = sorted(values)
    if not ordered:
        return {"n": 0}

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {"n": len(ordered), "p50": at(0.50), "p95": at(0.95), "p99": at(0.99),
            "max": round(ordered[-1], 1)}  # fmt: skip
