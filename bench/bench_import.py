"""Import a large comparison file through the real importer into PostgreSQL: rows per second and peak
memory, for plain JSONL, gzip-compressed JSONL and Parquet, to show that every container streams (the
import never holds the file in memory), on PostgreSQL's COPY path beside the ORM's row path (SQLite's,
and PostgreSQL's before issue 30) measured on a smaller sample in the same run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/concord_bench_import \\
        .venv/bin/python bench/bench_import.py [--rows 1000000] [--rows-path 20000] [--judgements 3] \\
        [--only jsonl,parquet] [--bad-percent 1]

``--rows-path 0`` leaves the row path out. ``--bad-percent P`` adds a refusal check: a JSONL file of
``--bad-rows`` rows (default 100,000) with P % bad rows, imported all-or-nothing (refused whole: time to
refuse and the error count) and with --skip-invalid (the rest imported).

The database named in DATABASE_URL is emptied (flush) before each import. Each import runs in a fresh
Python process, so each peak memory (ru_maxrss) is its own. Prints one JSON object with the CPU's model
and SIMD flags beside the figures. Run it with DJANGO_DEBUG=false: with DEBUG on, Django keeps the text
of recent queries (the bulk inserts are large), which inflates the peak memory measured here.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
CONTAINERS = ("jsonl", "gzip", "parquet")
SIMD_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "amx_tile")


def _rows(rows: int, judgements: int, bad_every: int = 0) -> Iterator[dict]:
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
        if bad_every and i % bad_every == bad_every - 1:
            row["judgements"] = [{"annotator": "annotator0", "choice": "maybe"}]  # not a choice
        yield row


def _write(folder: Path, container: str, rows: int, judgements: int, bad_every: int = 0) -> Path:
    if container == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = folder / "big.parquet"
        writer = None
        batch: list[dict] = []
        for row in _rows(rows, judgements):
            batch.append(row)
            if len(batch) == 10_000:
                table = pa.Table.from_pylist(batch)
                writer = writer or pq.ParquetWriter(path, table.schema)
                writer.write_table(table)
                batch = []
        if batch:
            table = pa.Table.from_pylist(batch)
            writer = writer or pq.ParquetWriter(path, table.schema)
            writer.write_table(table)
        writer.close()
        return path
    path = folder / ("big.jsonl.gz" if container == "gzip" else "big.jsonl")
    opener = gzip.open if container == "gzip" else open
    with opener(path, "wt", encoding="utf-8") as out:
        for row in _rows(rows, judgements, bad_every):
            out.write(json.dumps(row) + "\n")
    return path


def _cpu() -> dict:
    model, flags = "", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not model:
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return {
        "model": model,
        "cores": os.cpu_count(),
        "simd_flags": [f for f in SIMD_FLAGS if f in flags],
    }


def _one(path: Path, write_path: str, skip_invalid: bool) -> None:
    """Child process: flush the database, import ``path`` once on ``write_path`` ("copy" or
    "rows"), print its own figures."""
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    settings.CONCORD_IMPORT_BULK = write_path == "copy"
    call_command("flush", interactive=False, verbosity=0)
    from annotation.models import Comparison
    from annotation.parsing import ImportValidationError
    from annotation.services.importing import (
        ImportOptions,
        bulk_import_enabled,
        comparisons_import,
        project_get_or_create,
    )

    assert bulk_import_enabled() == (write_path == "copy")
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    project, _ = project_get_or_create(slug="bench-import")
    started = time.perf_counter()
    figures: dict = {"path": write_path, "skip_invalid": skip_invalid}
    try:
        result = comparisons_import(
            project=project, lines=path, options=ImportOptions(skip_invalid=skip_invalid)
        )
    except ImportValidationError as exc:
        seconds = time.perf_counter() - started
        figures.update(
            refused=True,
            errors_listed=len(exc.errors),
            error_count=exc.total,
            comparisons_in_database=Comparison.objects.count(),
            seconds=round(seconds, 1),
        )
    else:
        seconds = time.perf_counter() - started
        figures.update(
            format=result.format,
            container=result.container,
            rows=result.rows,
            rows_rejected=result.rows_rejected,
            comparisons_created=result.comparisons_created,
            judgements_created=result.judgements_created,
            seconds=round(seconds, 1),
            rows_per_s=round(result.rows / seconds),
        )
    figures.update(
        file_mb=round(path.stat().st_size / 1e6, 1),
        peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        rss_before_import_mb=round(rss_before),
    )
    print(json.dumps(figures))


def _child(*args: str) -> dict:
    """Run this script with ``args`` in a fresh process; its last line of output, parsed (and
    echoed to stderr at once, so a long run's finished imports survive an interruption)."""
    child = subprocess.run(
        [sys.executable, __file__, *args], check=True, capture_output=True, text=True
    )
    lines = child.stdout.strip().splitlines()
    if lines:
        print(lines[-1], file=sys.stderr, flush=True)
    return json.loads(lines[-1]) if lines else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows for the COPY path")
    parser.add_argument(
        "--rows-path", type=int, default=20_000, help="rows for the ORM's row path (0: skip it)"
    )
    parser.add_argument("--judgements", type=int, default=3)
    parser.add_argument("--only", default=",".join(CONTAINERS), help="containers to measure")
    parser.add_argument("--bad-percent", type=float, default=0.0)
    parser.add_argument("--bad-rows", type=int, default=100_000)
    parser.add_argument(
        "--paths",
        default="copy,rows",
        help="write paths to measure (copy: --rows, rows: --rows-path)",
    )
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # child: one import
    parser.add_argument("--path", default="copy", help=argparse.SUPPRESS)  # child: copy or rows
    parser.add_argument("--skip-invalid", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bad-every", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--write", nargs=2, help=argparse.SUPPRESS)  # child: CONTAINER FOLDER
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("set DATABASE_URL to a PostgreSQL database that may be emptied")
    if args.one:
        _one(args.one, args.path, args.skip_invalid)
        return
    if args.write:
        container, target = args.write
        _write(Path(target), container, args.rows, args.judgements, args.bad_every)
        return
    # The parent imports neither Django nor pyarrow: each child's peak memory starts from a small
    # process (Linux keeps ru_maxrss across exec).
    from stack import create_database

    create_database(os.environ["DATABASE_URL"])
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "migrate", "-v0"], check=True)
    results = []
    sizes = {"copy": args.rows, "rows": args.rows_path}
    runs = [(p, sizes[p]) for p in args.paths.split(",") if sizes.get(p)]
    with tempfile.TemporaryDirectory() as tmp:
        for container in args.only.split(","):
            if container not in CONTAINERS:
                sys.exit(f"--only: unknown container {container!r}; expected {CONTAINERS}")
            for write_path, rows in runs:
                folder = Path(tmp) / f"{container}-{write_path}"
                folder.mkdir()
                _child("--rows", str(rows), "--judgements", str(args.judgements),
                       "--write", container, str(folder))  # fmt: skip
                path = next(folder.iterdir())
                results.append(_child("--one", str(path), "--path", write_path))
                path.unlink()
        refusal = []
        if args.bad_percent:
            folder = Path(tmp) / "bad"
            folder.mkdir()
            bad_every = max(1, round(100 / args.bad_percent))
            _child("--rows", str(args.bad_rows), "--judgements", str(args.judgements),
                   "--write", "jsonl", str(folder), "--bad-every", str(bad_every))  # fmt: skip
            path = next(folder.iterdir())
            refusal.append(_child("--one", str(path), "--path", "copy"))
            refusal.append(_child("--one", str(path), "--path", "copy", "--skip-invalid"))
    for result in results:
        same = [r for r in results if r["container"] == result["container"]]
        rows_path = next((r for r in same if r["path"] == "rows"), None)
        if rows_path is not None and result["path"] == "copy":
            result["rows_per_s_vs_rows_path"] = round(
                result["rows_per_s"] / rows_path["rows_per_s"], 1
            )
    print(
        json.dumps(
            {
                "benchmark": "streaming import: COPY path vs the ORM's row path, per container",
                "cpu": _cpu(),
                "load_average": os.getloadavg(),
                "judgements_per_row": args.judgements,
                "imports": results,
                "refusal": refusal,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
