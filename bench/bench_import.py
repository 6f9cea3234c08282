"""Import a large comparison file through the real importer into PostgreSQL: rows per second and peak
memory, for plain JSONL, gzip-compressed JSONL and Parquet, to show that every container streams (the
two-pass import never holds the file in memory).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/concord_bench_import \\
        .venv/bin/python bench/bench_import.py [--rows 100000] [--judgements 3] [--only jsonl,gzip]

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


def _rows(rows: int, judgements: int) -> Iterator[dict]:
    for i in range(rows):
        yield {
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


def _write(folder: Path, container: str, rows: int, judgements: int) -> Path:
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
        for row in _rows(rows, judgements):
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


def _one(path: Path) -> None:
    """Child process: flush the database, import ``path`` once, print its own figures."""
    import django

    django.setup()
    from django.core.management import call_command

    call_command("flush", interactive=False, verbosity=0)
    from annotation.services.importing import comparisons_import, project_get_or_create

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    project, _ = project_get_or_create(slug="bench-import")
    started = time.perf_counter()
    result = comparisons_import(project=project, lines=path)
    seconds = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "format": result.format,
                "container": result.container,
                "rows": result.rows,
                "file_mb": round(path.stat().st_size / 1e6, 1),
                "comparisons_created": result.comparisons_created,
                "judgements_created": result.judgements_created,
                "seconds": round(seconds, 1),
                "rows_per_s": round(result.rows / seconds),
                "peak_rss_mb": round(peak_mb),
                "rss_before_import_mb": round(rss_before),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--judgements", type=int, default=3)
    parser.add_argument("--only", default=",".join(CONTAINERS), help="containers to measure")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # child: one import
    parser.add_argument("--write", nargs=2, help=argparse.SUPPRESS)  # child: CONTAINER FOLDER
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("set DATABASE_URL to a PostgreSQL database that may be emptied")
    if args.one:
        _one(args.one)
        return
    if args.write:
        container, target = args.write
        _write(Path(target), container, args.rows, args.judgements)
        return
    # The parent imports neither Django nor pyarrow: each child's peak memory starts from a small
    # process (Linux keeps ru_maxrss across exec).
    from stack import create_database

    create_database(os.environ["DATABASE_URL"])
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "migrate", "-v0"], check=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for container in args.only.split(","):
            if container not in CONTAINERS:
                sys.exit(f"--only: unknown container {container!r}; expected {CONTAINERS}")
            subprocess.run(
                [sys.executable, __file__, "--rows", str(args.rows), "--judgements",
                 str(args.judgements), "--write", container, tmp],
                check=True,
            )  # fmt: skip
            path = next(Path(tmp).iterdir())
            child = subprocess.run(
                [sys.executable, __file__, "--one", str(path)],
                check=True,
                capture_output=True,
                text=True,
            )
            results.append(json.loads(child.stdout.strip().splitlines()[-1]))
            path.unlink()
    plain = next((r for r in results if r["container"] == "jsonl"), None)
    for result in results:
        if plain is not None:
            result["rows_per_s_vs_jsonl"] = round(result["rows_per_s"] / plain["rows_per_s"], 2)
            result["peak_rss_vs_jsonl"] = round(result["peak_rss_mb"] / plain["peak_rss_mb"], 2)
    print(
        json.dumps(
            {
                "benchmark": "streaming import (validate pass + bulk write pass), per container",
                "cpu": _cpu(),
                "judgements_per_row": args.judgements,
                "imports": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
