"""Where one import's time goes on PostgreSQL's COPY path: seconds per SQL statement (summed over
the rounds), the COMMIT (the deferred foreign-key checks) and the rest (Python's reading and
checking, as far as it does not overlap with the server's work).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/concord_bench_import \\
        .venv/bin/python bench/bench_import_statements.py [--rows 100000] [--judgements 3] [--explain]

The database (which must exist, migrated) is emptied (flush) first. ``--explain`` also prints each
large statement's ``EXPLAIN (ANALYZE)``, run in a savepoint rolled back before the statement itself
runs (so the import does that work twice: read the plans, not the total). Prints one JSON object
with the CPU's model and SIMD flags and the load average beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--judgements", type=int, default=3)
    parser.add_argument("--explain", action="store_true")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("set DATABASE_URL to a migrated PostgreSQL database that may be emptied")
    import django

    django.setup()
    from bench_import import _cpu, _rows
    from django.core.management import call_command
    from django.db import connection, transaction

    from annotation.services.importing import comparisons_import, project_get_or_create

    seconds: dict[str, float] = {}

    def timed(execute: Callable, sql: str, params: object, many: bool, context: dict) -> object:
        key = " ".join(sql.split())[:72]
        if args.explain and sql.lstrip().startswith(("WITH", "INSERT INTO annotation")):
            with context["cursor"].cursor.connection.cursor() as cursor:
                cursor.execute("SAVEPOINT bench_explain")
                cursor.execute("EXPLAIN (ANALYZE) " + sql, params)
                print("\n".join(row[0] for row in cursor.fetchall()), file=sys.stderr)
                cursor.execute("ROLLBACK TO SAVEPOINT bench_explain")
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            seconds[key] = seconds.get(key, 0.0) + time.perf_counter() - started

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rows.jsonl"
        with path.open("w") as out:
            for row in _rows(args.rows, args.judgements):
                out.write(json.dumps(row) + "\n")
        call_command("flush", interactive=False, verbosity=0)
        project = project_get_or_create(slug="bench-statements")[0]
        started = time.perf_counter()
        with connection.execute_wrapper(timed), transaction.atomic():
            result = comparisons_import(project=project, lines=path)
            committing = time.perf_counter()
        ended = time.perf_counter()
    total = ended - started
    statements = dict(sorted(seconds.items(), key=lambda item: -item[1]))
    print(
        json.dumps(
            {
                "benchmark": "one import on the COPY path: seconds per statement and the commit",
                "cpu": _cpu(),
                "load_average": os.getloadavg(),
                "rows": result.rows,
                "seconds": round(total, 1),
                "rows_per_s": round(result.rows / total),
                "commit_s": round(ended - committing, 2),
                "statements_s": round(sum(statements.values()), 1),
                "rest_s": round(total - sum(statements.values()) - (ended - committing), 1),
                "by_statement_s": {k: round(v, 2) for k, v in statements.items() if v >= 0.05},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
