"""Fault: PostgreSQL restarts while annotators are labelling.

A few simulated annotators label through gunicorn (short think times); after a few seconds the
database is stopped the hard way (``pg_ctl stop -m immediate``: every backend killed, crash
recovery at the next start), kept down for a few seconds, and started again. Checked:

- every request that failed during the outage got a readable page (503 "Back in a moment", or
  the 500 page), never a traceback;
- the annotator's submission that failed is sent again after the recovery, and is stored;
- nothing is half-written: every judgement has its completed assignment and the other way round,
  each comparison's ``taken`` counter equals its active leases plus judgements, every
  acknowledged submission is stored exactly once.

The database is a private PostgreSQL cluster (initdb in a temporary folder, a free loopback port),
so the machine's own server, which the test suites use, is never interrupted. Run as root (the
cluster runs as the ``postgres`` user) or as a user that may run initdb.

    CELERY_BROKER_URL=redis://127.0.0.1:6379/12 \\
        .venv/bin/python bench/fault_postgres_restart.py [--annotators 8] [--down 3]

Prints PASS or FAIL, then one JSON object; exits non-zero on FAIL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stack
from load_labelling import ACTION, ASSIGNMENT, CSRF, annotator_session

LOG_RECORD = re.compile(
    r"^\d{4}-\d\d-\d\d [\d:,]+ (?:ERROR|CRITICAL) [\w.]+: ([^:\n]+)", re.MULTILINE
)
EXCEPTION_LINE = re.compile(r"^([\w.]+(?:Error|Exception)):", re.MULTILINE)


def _logged_errors(log: str) -> dict[str, int]:
    """Django's error records in the server log, as "<what it said> / <the exception that ended
    the traceback>": during the outage, all should be the database being away."""
    records = Counter()
    starts = [m.start() for m in LOG_RECORD.finditer(log)] + [len(log)]
    for start, end in itertools.pairwise(starts):
        record = log[start:end]
        raised = EXCEPTION_LINE.findall(record)
        records[f"{LOG_RECORD.match(record)[1]} / {raised[-1] if raised else '-'}"] += 1
    return dict(records)


def _pg_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        sys.exit("PostgreSQL's server binaries (initdb, pg_ctl) were not found")
    return found[-1].parent


def _as_postgres(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@dataclass
class Cluster:
    folder: Path
    port: int
    bin: Path = field(default_factory=_pg_bin)

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def ctl(self, *args: str) -> None:
        subprocess.run(
            _as_postgres([str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", *args]),
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1"
        self.ctl("-l", str(self.folder / "postgres.log"), "-o", options, "start")

    def stop(self, mode: str) -> None:
        self.ctl("-m", mode, "stop")


@contextlib.contextmanager
def private_cluster() -> Iterator[Cluster]:
    folder = Path(tempfile.mkdtemp(prefix="concord-fault-pg-"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    cluster = Cluster(folder, stack.free_port())
    try:
        subprocess.run(
            _as_postgres([str(cluster.bin / "initdb"), "-D", str(cluster.data), "-A", "trust",
                          "-U", "postgres", "--no-sync"]),
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        cluster.start()
        yield cluster
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            cluster.stop("fast")
        shutil.rmtree(folder, ignore_errors=True)


@dataclass
class Outcome:
    acknowledged: set[int] = field(default_factory=set)
    statuses: Counter = field(default_factory=Counter)
    failed_pages: Counter = field(default_factory=Counter)  # what the failed requests showed
    resubmitted_after_failure: int = 0
    resubmitted_stored: int = 0


def _classify(status: int, body: str) -> str:
    if "Traceback" in body or "Exception Value" in body:
        return f"{status} traceback"
    if status == 503 and "Back in a moment" in body:
        return "503 readable"
    if status == 500 and "Something went wrong" in body:
        return "500 readable"
    return f"{status} other"


async def _annotator(
    base: str, key: str, rng: random.Random, deadline: float, outcome: Outcome
) -> None:
    label = base + stack.LABEL_PATH
    async with annotator_session(base, key) as http:
        while time.monotonic() < deadline:
            try:
                async with http.get(label, allow_redirects=False) as page:
                    text = await page.text()
            except aiohttp.ClientError as exc:
                outcome.failed_pages[f"GET {type(exc).__name__}"] += 1
                await asyncio.sleep(0.5)
                continue
            outcome.statuses[f"GET {page.status}"] += 1
            action = ACTION.search(text)
            if page.status != 200 or action is None:
                outcome.failed_pages["GET " + _classify(page.status, text)] += 1
                await asyncio.sleep(0.5)
                continue
            await asyncio.sleep(rng.uniform(0.1, 0.4))
            form = {"pick": "left", "strength": "1", "csrfmiddlewaretoken": CSRF.search(text)[1]}
            failed = False
            while True:  # the annotator presses the key again until the answer is stored
                try:
                    async with http.post(
                        base + action[1], data=form, allow_redirects=False,
                        headers={"Referer": label},
                    ) as answer:  # fmt: skip
                        body = await answer.text()
                    status = answer.status
                except aiohttp.ClientError as exc:
                    status, body = 0, type(exc).__name__
                outcome.statuses[f"POST {status}"] += 1
                if status == 302:
                    outcome.acknowledged.add(int(ASSIGNMENT.search(action[1])[1]))
                    outcome.resubmitted_stored += failed
                    break
                outcome.failed_pages["POST " + _classify(status, body)] += 1
                outcome.resubmitted_after_failure += not failed
                failed = True
                await asyncio.sleep(0.5)


async def _run(base: str, keys: list[str], seconds: float, outcome: Outcome) -> None:
    deadline = time.monotonic() + seconds
    await asyncio.gather(
        *(_annotator(base, key, random.Random(i), deadline, outcome)  # noqa: S311 - seeded
          for i, key in enumerate(keys))
    )  # fmt: skip


async def _outage(cluster: Cluster, after: float, down: float) -> dict[str, float]:
    await asyncio.sleep(after)
    started = time.monotonic()
    await asyncio.to_thread(cluster.stop, "immediate")
    await asyncio.sleep(down)
    await asyncio.to_thread(cluster.start)
    return {"outage_s": round(time.monotonic() - started, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--annotators", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20, help="labelling time in all")
    parser.add_argument("--down-after", type=float, default=6, help="seconds before the stop")
    parser.add_argument("--down", type=float, default=3, help="seconds the database stays down")
    args = parser.parse_args()
    outcome = Outcome()
    with private_cluster() as cluster:
        env = stack.server_env(
            DATABASE_URL=f"postgres://postgres@127.0.0.1:{cluster.port}/concord_fault"
        )
        keys = stack.prepare(env, annotators=args.annotators, comparisons=500)
        server_log = cluster.folder / "gunicorn.log"
        with stack.gunicorn(env, workers=2, threads=2, log=server_log) as server:

            async def scenario() -> dict[str, float]:
                outage = asyncio.create_task(_outage(cluster, args.down_after, args.down))
                await _run(server.base, keys, args.seconds, outcome)
                return await outage

            timing = asyncio.run(scenario())
        database = stack.integrity(env, outcome.acknowledged)
        logged = _logged_errors(server_log.read_text())
    tracebacks = sum(n for page, n in outcome.failed_pages.items() if "traceback" in page)
    unreadable = sum(n for page, n in outcome.failed_pages.items() if page.endswith("other"))
    checks = {
        "requests failed during the outage": sum(outcome.failed_pages.values()) > 0,
        "no traceback shown": tracebacks == 0,
        "every failed page readable (503/500 page)": unreadable == 0,
        "every failed submission stored when sent again": (
            outcome.resubmitted_stored == outcome.resubmitted_after_failure
        ),
        "every acknowledged submission stored once": (
            database["acknowledged_missing"] == 0 and database["duplicate_judgements"] == 0
        ),
        "nothing half-written": (
            database["judgements_without_completed_assignment"] == 0
            and database["completed_assignments_without_judgement"] == 0
            and database["taken_mismatch"] == 0
            and database["over_assigned"] == 0
        ),
    }
    verdict = "PASS" if all(checks.values()) else "FAIL"
    print(f"{verdict}: PostgreSQL stopped (immediate) {timing['outage_s']} s during labelling")
    for name, ok in checks.items():
        print(f"  {'ok  ' if ok else 'FAIL'} {name}")
    print(
        json.dumps(
            {
                "annotators": args.annotators,
                **timing,
                "statuses": dict(sorted(outcome.statuses.items())),
                "failed_requests": dict(outcome.failed_pages),
                "server_log": logged,
                "submissions_failed_then_resent": outcome.resubmitted_after_failure,
                "of_which_stored": outcome.resubmitted_stored,
                "database": database,
                "verdict": verdict,
            },
            indent=2,
        )
    )
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
