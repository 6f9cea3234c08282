"""Import a large comparison JSONL file through the real importer into PostgreSQL: rows per second and
peak memory, to show the two-pass streaming import does not hold the file in memory.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/concord_bench_import \\
        .venv/bin/python bench/bench_import.py [--rows 100000] [--judgements 3]

The database named in DATABASE_URL is emptied (flush) first. Prints one JSON object. Run it with
DJANGO_DEBUG=false: with DEBUG on, Django keeps the text of recent queries (the bulk inserts are large),
which inflates the peak memory measured here.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def _write(path: Path, rows: int, judgements: int) -> None:
    with path.open("w") as out:
        for i in range(rows):
            row = {
                "id": f"row-{i}",
                "prompt": f"Question number {i}: what is {i} plus {i + 1}?",
                "response_a": f"It is {2 * i + 1}. " + "Here is why. " * 20,
                "response_b": f"It is {2 * i}. " + "Trust me. " * 15,
                "model_a": "model-a",
                "model_b": "model-b",
                "judgements": [
                    {"annotator": f"annotator{(i + k) % 50}", "choice": "ab"[(i + k) % 2]}
                    for k in range(judgements)
                ],
            }
            out.write(json.dumps(row) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--judgements", type=int, default=3)
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("set DATABASE_URL to a PostgreSQL database that may be emptied")
    from stack import create_database

    create_database(os.environ["DATABASE_URL"])
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    from annotation.services import comparisons_import, project_get_or_create

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.jsonl"
        _write(path, args.rows, args.judgements)
        size_mb = path.stat().st_size / 1e6
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        project, _ = project_get_or_create(slug="bench-import")
        started = time.perf_counter()
        result = comparisons_import(project=project, lines=path)
        seconds = time.perf_counter() - started
        again_started = time.perf_counter()
        again = comparisons_import(project=project, lines=path)
        again_seconds = time.perf_counter() - again_started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "benchmark": "streaming JSONL import (validate pass + bulk write pass)",
                "rows": result.rows,
                "file_mb": round(size_mb, 1),
                "judgements_created": result.judgements_created,
                "seconds": round(seconds, 1),
                "rows_per_s": round(result.rows / seconds),
                "reimport_seconds": round(again_seconds, 1),
                "reimport_created": again.comparisons_created,
                "peak_rss_mb": round(peak_mb),
                "rss_before_import_mb": round(rss_before),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
