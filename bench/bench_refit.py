"""The stored consensus's full Dawid-Skene refit (issue 30): seconds per phase, the refit before
this change beside the new one, on one database in one run.

Builds, in a database of its own (default ``concord_bench_refit``; created, migrated, kept for
``--reuse``, dropped with ``--drop``), the item browser bench's project scaled to ``--comparisons``
(``bench_item_browser.load``: comparisons / 4 prompts x 4 responses, 30 annotators, the first fifth
of the comparisons judged by 3 annotators and a further fifteenth by one; at 1,000,000 comparisons
that is the 666,666 judgements on 266,666 comparisons of the earlier 240 s figure), without
assignments or search indexes (the refit reads neither).

Each side runs ``consensus_refit`` in a fresh process from its own checkout (``--before PATH``,
e.g. ``git archive <commit> | tar -x -C PATH``), on the schema of its own migrations (the build
migrates with the first side's; each side migrates forward before it runs), twice:

- ``first_fit``: no stored fit (it is deleted, and the rows set back to what the triggers hold
  before any fit: uniform posteriors, margin 0; not timed), then ``consensus_refit(force=True)``;
- ``refit``: at once again with that fit stored and the judgements unchanged (the new code starts
  the EM from the stored fit; the old one starts from the majority vote every time).

The phases are timed by wrapping the service module's functions (whichever the side has): the
judgements' fingerprint, the read (``project_judgements`` / ``project_votes``), the EM
(``table_dawid_skene`` / ``dawid_skene``), storing the fit (``_write_fit``) and rewriting the rows
(``_rewrite_rows``). After each call the side saves the stored rows' posteriors; the JSON gives the
largest difference between the sides' first fits (same estimator: should be ~1e-12) and between
each side's refit and its first fit. CPU flags and the load average are printed with each side.

Run: .venv/bin/python bench/bench_refit.py [--database-url URL] [--comparisons N] [--reuse]
     [--before PATH] [--drop]
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

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SLUG = "bench-items"

# What each side's process runs (from its checkout): reset, first fit, refit; phases timed.
WORKER = """
import functools, json, sys, time
import numpy as np
import django
django.setup()
from django.db import connection
from annotation import agreement
from annotation.models import AnnotatorConfusion, ConsensusFit, Project, StoredConsensus
from annotation.services import consensus as service

phases = {}
def timed(owner, name, phase):
    if not hasattr(owner, name):
        return
    inner = getattr(owner, name)
    @functools.wraps(inner)
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            phases[phase] = phases.get(phase, 0.0) + time.perf_counter() - started
    setattr(owner, name, wrapper)
timed(service, "judgements_fingerprint", "fingerprint_s")
timed(service, "project_judgements", "read_s")
timed(service, "project_votes", "read_s")
timed(service.agreement, "table_dawid_skene", "em_s")
timed(service.agreement, "dawid_skene", "em_s")
timed(service, "_write_fit", "store_fit_s")
timed(service, "_rewrite_rows", "rows_s")

project = Project.objects.get(slug=sys.argv[2])
out = {}
for run in ("first_fit", "refit"):
    if run == "first_fit":  # the state before any fit, as the triggers leave it (not timed)
        ConsensusFit.objects.filter(project=project).delete()
        AnnotatorConfusion.objects.filter(project=project).delete()
        StoredConsensus.objects.filter(project=project).update(
            p_a=0.25, p_b=0.25, p_tie=0.25, p_both_bad=0.25, ds_choice="", ds_margin=0.0)
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE annotation_storedconsensus")
    phases.clear()
    started = time.perf_counter()
    result = service.consensus_refit(project=project, force=True)
    total = time.perf_counter() - started
    rows = np.array(StoredConsensus.objects.filter(project=project).order_by("comparison_id")
                    .values_list("comparison_id", "p_a", "p_b", "p_tie", "p_both_bad", "ds_margin"))
    np.save(f"{sys.argv[1]}/{run}.npy", rows)
    out[run] = {"total_s": round(total, 2), **{k: round(v, 2) for k, v in phases.items()},
                "iterations": result.iterations, "judgements": result.n_judgements,
                "rows": result.n_rows}
print(json.dumps(out))
"""


def _side(tree: Path, url: str, scratch: Path) -> dict:
    """One side's run in a fresh process from ``tree``; its JSON, with the load average."""
    scratch.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "config.settings",
           "PYTHONPATH": str(tree), "DJANGO_DEBUG": "false"}  # fmt: skip
    load = os.getloadavg()[0]
    finished = subprocess.run(
        [sys.executable, "-c", WORKER, str(scratch), SLUG],
        cwd=tree, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if finished.returncode:
        return {"error": finished.stderr[-3000:], "load_average_1m": round(load, 2)}
    result = json.loads(finished.stdout.strip().splitlines()[-1])
    result["load_average_1m"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    return result


def _difference(a: Path, b: Path) -> float | None:
    """Largest difference of the stored posteriors and margins of two saved runs (None: the rows
    are not the same comparisons)."""
    left, right = np.load(a), np.load(b)
    if left.shape != right.shape or not np.array_equal(left[:, 0], right[:, 0]):
        return None
    return float(np.abs(left[:, 1:] - right[:, 1:]).max())


def _migrate(tree: Path, url: str) -> float:
    """Migrate the database with ``tree``'s migrations (each side runs on its own schema)."""
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "config.settings",
           "PYTHONPATH": str(tree)}  # fmt: skip
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--verbosity", "0"], cwd=tree, env=env, check=True
    )
    return round(time.perf_counter() - started, 1)


def _build(url: str, comparisons: int, tree: Path) -> dict:
    """The project, on the schema of ``tree`` (the first side to run)."""
    sys.path.insert(0, str(ROOT / "bench"))
    sys.path.insert(0, str(ROOT))
    import bench_item_browser as builder

    builder._ensure_database(url, fresh=True)
    migrate_s = _migrate(tree, url)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()

    builder.N_PROMPTS = comparisons // builder.PER_PROMPT
    started = time.perf_counter()
    steps = builder.load(
        judged=comparisons // 5,
        skip=("assignments", "search_documents", "search_index", "trigram_indexes"),
    )
    return {"migrate_s": migrate_s, "load_s": round(time.perf_counter() - started, 1),
            "steps_s": steps}  # fmt: skip


def _drop(url: str) -> None:
    import psycopg

    if "django" in sys.modules:  # the build's connection
        from django.db import connections

        connections.close_all()

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("DROP DATABASE {}").format(psycopg.sql.Identifier(name)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-url", default="postgres://postgres@127.0.0.1:5432/concord_bench_refit"
    )
    parser.add_argument("--comparisons", type=int, default=1_000_000)
    parser.add_argument("--reuse", action="store_true", help="measure a kept database again")
    parser.add_argument("--before", type=Path, default=None, help="checkout of the refit before")
    parser.add_argument("--drop", action="store_true", help="drop the database at the end")
    parser.add_argument(
        "--scratch", type=Path, default=Path(tempfile.gettempdir()) / "concord-bench-refit"
    )
    args = parser.parse_args()
    report: dict = {"comparisons": args.comparisons, "cpu_count": os.cpu_count()}
    with open("/proc/cpuinfo") as cpuinfo:
        flags = next(line for line in cpuinfo if line.startswith("flags")).split()
    report["cpu_flags"] = sorted({"avx", "avx2", "avx512f", "fma", "sse4_2"} & set(flags))
    report["precision"] = "float64 (NumPy EM, PostgreSQL float8 rows)"
    sides = [("before", args.before)] if args.before is not None else []
    sides.append(("after", ROOT))
    if not args.reuse:
        report["build"] = _build(args.database_url, args.comparisons, sides[0][1])
        print(json.dumps(report["build"]), file=sys.stderr, flush=True)
    for name, tree in sides:
        report[f"migrate_{name}_s"] = _migrate(tree, args.database_url)  # its own schema
        report[name] = _side(tree, args.database_url, args.scratch / name)
        print(json.dumps({name: report[name]}), file=sys.stderr, flush=True)
    after = args.scratch / "after"
    report["difference"] = {"after_refit_vs_after_first_fit": _difference(
        after / "refit.npy", after / "first_fit.npy")}  # fmt: skip
    if args.before is not None:
        before = args.scratch / "before"
        report["difference"]["first_fit_after_vs_before"] = _difference(
            after / "first_fit.npy", before / "first_fit.npy"
        )
        report["difference"]["before_refit_vs_before_first_fit"] = _difference(
            before / "refit.npy", before / "first_fit.npy"
        )
    if args.drop:
        _drop(args.database_url)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
