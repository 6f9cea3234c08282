"""Labelling under load through the real stack (gunicorn, Django, PostgreSQL on loopback).

Each simulated annotator loops: GET the labelling page (which claims a pair), think 3-8 s (seeded),
POST the verdict; 5% of the posts are sent a second time, as a browser does when the first response
was lost, and must not store a second judgement. ``--stress`` drops the think time to find the
ceiling in submissions per second (50 annotators, 30 s by default).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/concord_bench \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/12 \\
        .venv/bin/python bench/load_labelling.py [--annotators 200] [--duration 300] [--stress]

The database named in DATABASE_URL is emptied and rebuilt (migrate + flush) first. The annotators are
asyncio tasks on one aiohttp event loop, so the load generator takes a small share of the machine's
cores. Prints one JSON object: claim (GET) and submit (POST) latency percentiles in ms, submissions
per second, HTTP 5xx and other failures, and the database afterwards: every acknowledged submission
(a redirect) stored exactly once, nothing over the overlap, no duplicates.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
from yarl import URL

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stack

ACTION = re.compile(r'<form method="post" action="([^"]+)" id="verdict"')
CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
ASSIGNMENT = re.compile(r"/(\d+)/?$")


@dataclass
class Tally:
    """What the annotators saw, shared by all the tasks (one event loop: no locks needed)."""

    claim_ms: list[float] = field(default_factory=list)
    submit_ms: list[float] = field(default_factory=list)
    acknowledged: set[int] = field(default_factory=set)
    submissions: int = 0
    retries: int = 0
    statuses: Counter = field(default_factory=Counter)
    failures: Counter = field(default_factory=Counter)
    ran_out: int = 0


def annotator_session(base: str, session_key: str) -> aiohttp.ClientSession:
    """An HTTP session logged in as the annotator whose Django session key is given."""
    jar = aiohttp.CookieJar(unsafe=True)  # unsafe: keep cookies of an IP address (127.0.0.1)
    jar.update_cookies({"sessionid": session_key}, URL(base))
    return aiohttp.ClientSession(cookie_jar=jar, timeout=aiohttp.ClientTimeout(total=60))


async def _annotator(
    base: str, session_key: str, rng: random.Random, think: tuple[float, float],
    retry_fraction: float, deadline: float, tally: Tally,
) -> None:  # fmt: skip
    label = base + stack.LABEL_PATH
    async with annotator_session(base, session_key) as http:
        await asyncio.sleep(rng.uniform(0, think[1]))  # arrivals spread over one think time
        while time.monotonic() < deadline:
            started = time.perf_counter()
            try:
                async with http.get(label, allow_redirects=False) as page:
                    text = await page.text()
            except (aiohttp.ClientError, TimeoutError) as exc:
                tally.failures[f"GET {type(exc).__name__}"] += 1
                await asyncio.sleep(1)
                continue
            tally.statuses[f"GET {page.status}"] += 1
            action = ACTION.search(text)
            if page.status != 200 or action is None:
                if "Nothing left to label" in text:
                    tally.ran_out += 1
                    return
                await asyncio.sleep(1)
                continue
            tally.claim_ms.append((time.perf_counter() - started) * 1000)
            pause = rng.uniform(*think)
            await asyncio.sleep(pause)
            form = {
                "pick": rng.choice(("left", "right")),
                "strength": str(rng.randint(1, 3)),
                "elapsed_ms": str(int(pause * 1000)),
                "csrfmiddlewaretoken": CSRF.search(text).group(1),
            }
            sends = 2 if rng.random() < retry_fraction else 1
            tally.retries += sends - 1
            for _ in range(sends):
                started = time.perf_counter()
                try:
                    async with http.post(
                        base + action.group(1), data=form, allow_redirects=False,
                        headers={"Referer": label},
                    ) as answer:  # fmt: skip
                        await answer.read()
                except (aiohttp.ClientError, TimeoutError) as exc:
                    tally.failures[f"POST {type(exc).__name__}"] += 1
                    continue
                tally.statuses[f"POST {answer.status}"] += 1
                if answer.status == 302:
                    tally.submit_ms.append((time.perf_counter() - started) * 1000)
                    tally.submissions += 1
                    tally.acknowledged.add(int(ASSIGNMENT.search(action.group(1)).group(1)))


async def _warm_up(base: str, keys: list[str]) -> None:
    """A few page loads in every gunicorn worker before the clock starts (first-request imports,
    template compilation, database connections), as a server that has been up a while has had."""

    async def load(key: str) -> None:
        async with annotator_session(base, key) as http:
            for _ in range(3):
                async with http.get(base + stack.LABEL_PATH) as page:
                    await page.read()

    await asyncio.gather(*(load(key) for key in keys))


async def _run(base: str, keys: list[str], args: argparse.Namespace, tally: Tally) -> float:
    think = (0.0, 0.0) if args.stress else (args.think_min, args.think_max)
    started = time.monotonic()
    deadline = started + args.duration
    await asyncio.gather(
        *(
            _annotator(base, key, random.Random(args.seed * 100_003 + i),  # noqa: S311 - seeded
                       think, args.retry_fraction, deadline, tally)
            for i, key in enumerate(keys)
        )
    )  # fmt: skip
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stress", action="store_true", help="no think time: the ceiling")
    parser.add_argument("--annotators", type=int, help="default 200 (--stress: 50)")
    parser.add_argument("--duration", type=float, help="seconds; default 300 (--stress: 30)")
    parser.add_argument("--think-min", type=float, default=3.0, help="seconds")
    parser.add_argument("--think-max", type=float, default=8.0, help="seconds")
    parser.add_argument("--retry-fraction", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=4, help="gunicorn worker processes")
    parser.add_argument("--threads", type=int, default=4, help="threads per gunicorn worker")
    parser.add_argument("--comparisons", type=int, default=20_000)
    args = parser.parse_args()
    args.annotators = args.annotators or (50 if args.stress else 200)
    args.duration = args.duration or (30.0 if args.stress else 300.0)
    stack.require_postgres()
    env = stack.server_env()
    keys = stack.prepare(env, annotators=args.annotators, comparisons=args.comparisons)
    tally = Tally()
    load_before = os.getloadavg()
    with stack.gunicorn(env, workers=args.workers, threads=args.threads) as server:
        asyncio.run(_warm_up(server.base, keys[: args.workers * args.threads]))
        web = stack.CpuMeter(server.worker_pids())
        database = stack.CpuMeter(stack.database_backend_pids(env))
        own_before = time.process_time()

        async def measured() -> float:
            async def sample() -> None:
                while True:
                    await asyncio.sleep(1)
                    web.sample(server.worker_pids())
                    database.sample(await asyncio.to_thread(stack.database_backend_pids, env))

            sampler = asyncio.create_task(sample())
            wall = await _run(server.base, keys, args, tally)
            sampler.cancel()
            return wall

        wall = asyncio.run(measured())
        web.sample(server.worker_pids())
        database.sample(stack.database_backend_pids(env))
        cpu = {
            "web": web.seconds(),
            "database": database.seconds(),
            "load_generator": time.process_time() - own_before,
        }
    load_after = os.getloadavg()
    cycles = max(1, len(tally.acknowledged))
    server_errors = sum(n for status, n in tally.statuses.items() if status.split()[1] >= "500")
    print(
        json.dumps(
            {
                "benchmark": "labelling " + ("stress (no think time)" if args.stress else "load"),
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "machine": {"cpus": os.cpu_count(), "load_average_before": load_before,
                            "load_average_after": load_after},
                "annotators": args.annotators,
                "think_s": [0, 0] if args.stress else [args.think_min, args.think_max],
                "retry_fraction": args.retry_fraction,
                "gunicorn": {"workers": args.workers, "threads": args.threads},
                "seconds": round(wall, 1),
                "claims": len(tally.claim_ms),
                "judgements_acknowledged": len(tally.acknowledged),
                "judgements_per_s": round(len(tally.acknowledged) / wall, 1),
                "posts_acknowledged": tally.submissions,
                "resubmissions": tally.retries,
                "claim_ms": stack.percentiles(tally.claim_ms),
                "submit_ms": stack.percentiles(tally.submit_ms),
                "cpu_ms_per_judgement": {k: round(v * 1000 / cycles, 1) for k, v in cpu.items()},
                "cpu_cores_busy": {k: round(v / wall, 2) for k, v in cpu.items()},
                "http_5xx": server_errors,
                "statuses": dict(sorted(tally.statuses.items())),
                "failures": dict(tally.failures),
                "annotators_out_of_pairs": tally.ran_out,
                "database": stack.integrity(env, tally.acknowledged),
            },
            indent=2,
        )
    )  # fmt: skip
    if not tally.claim_ms:  # e.g. every GET redirected to the login page: nothing was measured
        sys.exit(f"no claim succeeded (statuses {dict(tally.statuses)}): nothing was measured")


if __name__ == "__main__":
    main()
