"""The agreement dashboard's refresh on 1,000,000 comparisons: a full read vs the incremental
refresh (issue 30) after 100 new judgements and after 100 edits, seconds and peak memory.

Builds, in a database of its own (default ``concord_bench_refresh``; created, migrated and kept
for ``--reuse``), the export bench's project (``bench_export._build``: 1,000,000 comparisons, each
judged by 3 of 30 annotators, 3,000,000 judgements). Then, each in a fresh process (its peak RSS is
its own), the worker's ``dashboard_refresh``:

1. full: every row read (``incremental=False``), which keeps the rows for the next refresh;
2. incremental, nothing changed;
3. incremental after 100 new judgements (one statement, as an import writes them);
4. incremental after 100 edits (choice changed, ``updated_at`` stamped, as the labelling screen's
   edit does);
5. full again on the same rows, whose figures must be the incremental refresh's (a digest of the
   payload without its time and read note: "same_figures").

``--before PATH`` first runs the refresh of another checkout (e.g. ``git archive <commit>``
unpacked) on the same database, whose figures must be the full read's ("same_figures_as_before").
The judgements added are deleted and the edits undone at the end (the kept rows then no longer
match: the next run's first incremental refresh reads everything). Prints one JSON object with
each step's seconds, peak RSS and how the rows were read, the CPU flags and the load average
before and after each step.

Run: .venv/bin/python bench/bench_agreement_refresh.py [--database-url URL] [--reuse] [--before PATH]
"""

# The SQL below is built from integer ids this file reads, never from input.
# ruff: noqa: S608

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLUG = "bench-items"
N_CHANGED = 100

# One refresh in a fresh process: seconds, peak RSS, how the rows were read and a digest of the
# figures (the payload without its time and read note).
REFRESH = """
import hashlib, json, resource, sys, time
import django
django.setup()
from annotation.models import Project
from annotation.services.agreement import dashboard_refresh
project = Project.objects.get(slug=sys.argv[1])
started = time.perf_counter()
if sys.argv[2] == "before":  # a checkout from before the incremental refresh
    payload = dashboard_refresh(project=project)
else:
    payload = dashboard_refresh(project=project, incremental=sys.argv[2] == "incremental")
seconds = time.perf_counter() - started
figures = {k: v for k, v in payload.items() if k not in ("computed_at", "read")}
print(json.dumps({
    "refresh_s": round(seconds, 2),
    "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    "read": payload.get("read"),
    "digest": hashlib.sha256(json.dumps(figures, sort_keys=True).encode()).hexdigest()[:16],
}))
"""


def _refresh(url: str, how: str, tree: Path = ROOT) -> dict:
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "config.settings",
           "PYTHONPATH": str(tree), "DJANGO_DEBUG": "false"}  # fmt: skip
    load = os.getloadavg()[0]
    finished = subprocess.run(
        [sys.executable, "-c", REFRESH, SLUG, how],
        cwd=tree, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if finished.returncode:
        return {"error": finished.stderr[-2000:], "load_average_1m": round(load, 2)}
    result = json.loads(finished.stdout.strip().splitlines()[-1])
    result["load_average_1m"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    print(json.dumps(result), file=sys.stderr, flush=True)
    return result


def _connect(url: str):
    import psycopg

    return psycopg.connect(url, autocommit=True)


def _add_judgements(url: str) -> list[int]:
    """100 judgements by an annotator who had not judged those comparisons (one statement);
    returns their ids."""
    with _connect(url) as conn:
        (first,) = conn.execute(
            "SELECT min(id) FROM auth_user WHERE username LIKE 'ann%'"
        ).fetchone()
        picked = conn.execute(
            "SELECT c.id FROM annotation_comparison c JOIN annotation_project p ON p.id = "
            f"c.project_id WHERE p.slug = '{SLUG}' ORDER BY c.id LIMIT {N_CHANGED}"
        ).fetchall()
        values = ", ".join(
            f"({c}, {first + (c + 10) % 30}, 'tie', 1, '', 'a', 4000, '', now(), now())"
            for (c,) in picked
        )
        rows = conn.execute(
            "INSERT INTO annotation_judgement (comparison_id, annotator_id, choice, strength, "
            "rationale, shown_left, elapsed_ms, suggested_choice, created_at, updated_at) "
            f"VALUES {values} RETURNING id"
        ).fetchall()
    return [r[0] for r in rows]


def _edit_judgements(
    url: str, *, undo: list[tuple[int, str]] | None = None
) -> list[tuple[int, str]]:
    """Change the choice of 100 judgements spread over the project (stamping ``updated_at``);
    returns (id, old choice) to undo it. With ``undo``: put those choices back."""
    with _connect(url) as conn:
        if undo is None:
            (n,) = conn.execute("SELECT count(*) FROM annotation_judgement").fetchone()
            step = max(1, n // N_CHANGED - 1)  # spread over the whole table
            undo = conn.execute(
                f"SELECT id, choice FROM annotation_judgement WHERE id % {step} = 7 ORDER BY id "
                f"LIMIT {N_CHANGED}"
            ).fetchall()
            new = {"a": "b", "b": "a", "tie": "a", "both_bad": "tie"}
            changes = [(i, new[c]) for i, c in undo]
        else:
            changes = undo
        for judgement_id, choice in changes:
            conn.execute(
                "UPDATE annotation_judgement SET choice = %s, updated_at = now() WHERE id = %s",
                [choice, judgement_id],
            )
    return undo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-url", default="postgres://postgres@127.0.0.1:5432/concord_bench_refresh"
    )
    parser.add_argument("--comparisons", type=int, default=1_000_000)
    parser.add_argument("--reuse", action="store_true", help="measure a kept database again")
    parser.add_argument(
        "--before", type=Path, default=None, help="checkout from before: its refresh, first"
    )
    args = parser.parse_args()
    url = args.database_url
    report: dict = {"cpu_count": os.cpu_count()}
    with open("/proc/cpuinfo") as cpuinfo:
        flags = next(line for line in cpuinfo if line.startswith("flags")).split()
    report["cpu_flags"] = sorted({"avx2", "avx512f", "avx512_bf16", "amx_bf16"} & set(flags))
    if not args.reuse:
        sys.path.insert(0, str(ROOT / "bench"))
        import bench_export

        report["build"] = bench_export._build(url, args.comparisons)
    if args.before is not None:
        report["before"] = _refresh(url, "before", args.before)
    report["full"] = _refresh(url, "full")
    if args.before is not None:
        report["same_figures_as_before"] = report["before"].get("digest") == report["full"].get(
            "digest"
        )
    report["incremental_unchanged"] = _refresh(url, "incremental")
    added = _add_judgements(url)
    time.sleep(1)
    report["incremental_100_new"] = _refresh(url, "incremental")
    undo = _edit_judgements(url)
    report["incremental_100_edits"] = _refresh(url, "incremental")
    report["full_after"] = _refresh(url, "full")
    report["same_figures"] = report["incremental_100_edits"].get("digest") == report[
        "full_after"
    ].get("digest")
    _edit_judgements(url, undo=undo)
    with _connect(url) as conn:
        conn.execute(f"DELETE FROM annotation_judgement WHERE id IN ({', '.join(map(str, added))})")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
