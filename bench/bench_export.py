"""Export of a project of 1,000,000 judged comparisons to the Hugging Face format: seconds and peak
memory, the streamed export (issue 30) beside the export before it, on the same database.

Builds, in a database of its own (default ``concord_bench_export``; created, migrated and kept for
``--reuse``), the item browser bench's project (``bench_item_browser.load``: 250,000 prompts x 4
responses, 1,000,000 comparisons) with every comparison judged by 3 of 30 annotators (3,000,000
judgements), without the assignments and search indexes (the export reads neither). Then, each in
a fresh process of its own (its peak RSS is its own): ``dataset_export``
(majority consensus: pairs.jsonl and judgements.jsonl) and ``hf_export_write`` (Parquet train/test
splits and the dataset card), timed apart. ``--before PATH`` runs the same two calls from another
checkout (e.g. ``git worktree add /tmp/before <commit>``) against the same database, for the
side-by-side figure (with ``--stored-report``, both ways: cold and with the report stored).
Prints one JSON object: seconds per phase, pairs, peak RSS, CPU flags and the load average.

``--stored-report`` adds the worker's agreement refresh (timed in its own process) and the export
again with that report stored, whose dataset card then reads it instead of every judgement.

Run: .venv/bin/python bench/bench_export.py [--database-url URL] [--comparisons N] [--reuse]
     [--before PATH] [--stored-report]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLUG = "bench-items"

# What each side's process runs (from the checkout it is given): export, then the HF folder.
WORKER = """
import json, os, resource, sys, tempfile, time
from pathlib import Path
import django
django.setup()
from django.conf import settings
from annotation.models import Project
from annotation.services.exporting import dataset_export
from annotation.services.hf_export import hf_export_write
settings.EXPORT_DIR = Path(sys.argv[1])
project = Project.objects.get(slug=sys.argv[2])
if sys.argv[3] == "cold":  # no stored dashboard report: the card computes its own figures
    from django.core.cache import cache
    cache.delete(f"concord:agreement:dashboard:{project.pk}")
started = time.perf_counter()
export = dataset_export(project=project)
exported = time.perf_counter()
out = Path(tempfile.mkdtemp(dir=sys.argv[1]))
written = hf_export_write(export=export, out=out / "hf")
done = time.perf_counter()
print(json.dumps({
    "pairs": export.n_pairs, "judgements": export.n_judgements, "hf_rows": written.rows,
    "export_s": round(exported - started, 1), "hf_s": round(done - exported, 1),
    "total_s": round(done - started, 1),
    "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
}))
"""

# The worker's agreement refresh (what stores the dashboard's report the card then reads).
REFRESH = """
import json, resource, sys, time
import django
django.setup()
from annotation.models import Project
from annotation.services.agreement import dashboard_refresh
started = time.perf_counter()
dashboard_refresh(project=Project.objects.get(slug=sys.argv[2]))
print(json.dumps({
    "refresh_s": round(time.perf_counter() - started, 1),
    "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
}))
"""


def _side(tree: Path, url: str, scratch: Path, *, mode: str = "cold", script: str = WORKER) -> dict:
    """One side's run in a fresh process from ``tree``; its JSON line, with the load average.
    ``mode``: "cold" (the dashboard's stored report removed first) or "stored" (kept)."""
    scratch.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "config.settings",
           "PYTHONPATH": str(tree), "DJANGO_DEBUG": "false"}  # fmt: skip
    load = os.getloadavg()[0]
    started = time.perf_counter()
    finished = subprocess.run(
        [sys.executable, "-c", script, str(scratch), SLUG, mode],
        cwd=tree, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if finished.returncode:
        return {"error": finished.stderr[-2000:], "load_average_1m": round(load, 2)}
    result = json.loads(finished.stdout.strip().splitlines()[-1])
    result["process_s"] = round(time.perf_counter() - started, 1)
    result["load_average_1m"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    return result


def _build(url: str, comparisons: int) -> dict:
    sys.path.insert(0, str(ROOT / "bench"))
    sys.path.insert(0, str(ROOT))
    import bench_item_browser as builder

    builder._ensure_database(url, fresh=True)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command

    builder.N_PROMPTS = comparisons // builder.PER_PROMPT
    started = time.perf_counter()
    call_command("migrate", verbosity=0)
    # no leases, assignments or search indexes: the export reads none of them
    steps = builder.load(
        judged=comparisons,
        skip=("assignments", "search_documents", "search_index", "trigram_indexes"),
    )
    return {"build_s": round(time.perf_counter() - started, 1), "steps_s": steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-url", default="postgres://postgres@127.0.0.1:5432/concord_bench_export"
    )
    parser.add_argument("--comparisons", type=int, default=1_000_000)
    parser.add_argument("--reuse", action="store_true", help="measure a kept database again")
    parser.add_argument("--before", type=Path, default=None, help="checkout of the export before")
    parser.add_argument(
        "--scratch", type=Path, default=Path(tempfile.gettempdir()) / "concord-bench-export"
    )
    parser.add_argument(
        "--stored-report",
        action="store_true",
        help="also export with the dashboard's agreement report stored (refreshed first, timed)",
    )
    args = parser.parse_args()
    report: dict = {"cpu_count": os.cpu_count()}
    with open("/proc/cpuinfo") as cpuinfo:
        flags = next(line for line in cpuinfo if line.startswith("flags")).split()
    report["cpu_flags"] = sorted({"avx2", "avx512f", "avx512_bf16", "amx_bf16"} & set(flags))
    if not args.reuse:
        report["build"] = _build(args.database_url, args.comparisons)
        print(json.dumps(report["build"]), file=sys.stderr, flush=True)
    report["streamed"] = _side(ROOT, args.database_url, args.scratch / "streamed")
    print(json.dumps(report["streamed"]), file=sys.stderr, flush=True)
    if args.stored_report:
        # As after the worker's refresh of the dashboard (debounced after judgements change):
        # the card reads the stored report instead of every judgement.
        report["dashboard_refresh"] = _side(
            ROOT, args.database_url, args.scratch / "refresh", mode="stored", script=REFRESH
        )
        report["streamed_stored_report"] = _side(
            ROOT, args.database_url, args.scratch / "stored", mode="stored"
        )
        print(json.dumps(report["streamed_stored_report"]), file=sys.stderr, flush=True)
    if args.before is not None:
        if args.stored_report:  # the report stored above is still current (the cold side drops it)
            report["before_stored_report"] = _side(
                args.before, args.database_url, args.scratch / "before-stored", mode="stored"
            )
        report["before"] = _side(args.before, args.database_url, args.scratch / "before")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
