"""`python manage.py agreement --project SLUG --json` on 1,000,000 judgements stored in PostgreSQL.

Loads the synthetic project of bench_agreement.py (100 annotators, 3 per comparison, 333,334
comparisons) into a database of its own (default ``concord_bench_agreement`` on the local server, created and
migrated if missing; nobody's working data is touched) with COPY, then times:

- the command itself, as users run it: a fresh ``manage.py agreement --project bench-1m --json``
  process (Python and Django start-up included), best of ``--repeat``;
- inside one process: reading every array the report needs (judgements, comparisons, response
  lengths, clusters, repeats: one bytea per column, what the command does), for scale the plain
  ``values_list`` of just five raw judgement columns, and the whole in-process report.

Prints one JSON object. Loading takes a minute or two the first time; ``--reload`` loads again.
Run: .venv/bin/python bench/bench_agreement_db.py [--database-url URL] [--repeat 3] [--reload]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLUG = "bench-1m"


def _ensure_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    admin_url = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))


def _copy_rows(model, rows, fields: list[str]) -> None:
    """COPY rows (tuples in `fields` order, other columns from the field defaults) into the table."""
    from django.db import connection
    from django.utils import timezone
    from psycopg.types.json import Jsonb

    now = timezone.now()
    concrete = [f for f in model._meta.concrete_fields if not f.primary_key]
    given = {name: i for i, name in enumerate(fields)}
    defaults = []
    for f in concrete:
        if f.attname in given:
            defaults.append(None)
        elif getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
            defaults.append(now)
        elif f.has_default():
            value = f.get_default()
            defaults.append(Jsonb(value) if isinstance(value, dict | list) else value)
        elif f.null:
            defaults.append(None)
        else:
            defaults.append("")
    columns = ", ".join(f'"{f.column}"' for f in concrete)
    order = [given.get(f.attname) for f in concrete]
    with connection.cursor() as cursor:
        statement = f'COPY "{model._meta.db_table}" ({columns}) FROM STDIN'
        with cursor.cursor.copy(statement) as copy:
            for row in rows:
                copy.write_row(
                    [d if i is None else row[i] for i, d in zip(order, defaults, strict=True)]
                )


def load(table) -> None:
    """Write the synthetic project into the database (replacing an earlier copy of it)."""
    import numpy as np
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from annotation.agreement import CHOICES
    from annotation.models import Comparison, Judgement, Project, Prompt, Response

    users = get_user_model()
    with transaction.atomic():
        Project.objects.filter(slug=SLUG).delete()
        project = Project.objects.create(slug=SLUG, name="Benchmark: 1M judgements", overlap=3)
        names = [f"bench-annotator-{i:03d}" for i in range(table.n_annotators)]
        for name in names:
            users.objects.get_or_create(username=name, defaults={"is_active": False})
        user_ids = dict(users.objects.filter(username__in=names).values_list("username", "pk"))
        annotator_pk = np.array([user_ids[name] for name in names])
        n = table.n_items
        digest = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(n)]
        _copy_rows(Prompt, ((project.pk, f"Prompt {i}?", digest[i]) for i in range(n)),
                   ["project_id", "text", "content_hash"])  # fmt: skip
        prompt_ids = list(
            Prompt.objects.filter(project=project).order_by("id").values_list("id", flat=True)
        )
        responses = (
            (prompt_ids[i], "x" * int(length // 10), "bench", f"{side}{digest[i][:62]}")
            for i in range(n)
            for side, length in (("a", table.length_a[i]), ("b", table.length_b[i]))
        )
        _copy_rows(Response, responses, ["prompt_id", "text", "model_name", "content_hash"])
        response_ids = list(
            Response.objects.filter(prompt__project=project)
            .order_by("id")
            .values_list("id", flat=True)
        )
        gold = ["" if g < 0 else CHOICES[g] for g in table.gold]
        _copy_rows(
            Comparison,
            ((project.pk, prompt_ids[i], response_ids[2 * i], response_ids[2 * i + 1], gold[i],
              f"bench-{i}", digest[i], i) for i in range(n)),
            ["project_id", "prompt_id", "response_a_id", "response_b_id", "gold", "external_id",
             "content_hash", "queue_position"],
        )  # fmt: skip
        comparison_ids = np.array(
            Comparison.objects.filter(project=project).order_by("id").values_list("id", flat=True)
        )
        side = np.array(["a", "b"])
        _copy_rows(
            Judgement,
            zip(comparison_ids[table.item].tolist(), annotator_pk[table.annotator].tolist(),
                [CHOICES[c] for c in table.choice], side[table.shown_left].tolist(),
                table.elapsed_ms.astype(int).tolist(), strict=True),
            ["comparison_id", "annotator_id", "choice", "shown_left", "elapsed_ms"],
        )  # fmt: skip
    with transaction.get_connection().cursor() as cursor:
        cursor.execute("ANALYZE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-url", default="postgres://postgres@127.0.0.1:5432/concord_bench_agreement"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--reload", action="store_true")
    args = parser.parse_args()
    os.environ["DATABASE_URL"] = args.database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
    _ensure_database(args.database_url)

    import django

    django.setup()
    from bench_agreement import synthetic_project
    from django.core.management import call_command

    from annotation.models import Judgement, Project
    from annotation.selectors import agreement as agreement_selectors
    from annotation.services import agreement as agreement_services

    call_command("migrate", verbosity=0)
    project = Project.objects.filter(slug=SLUG).first()
    load_s = None
    if args.reload or project is None or project.comparisons.count() != 333_334:
        start = time.perf_counter()
        load(synthetic_project())
        load_s = round(time.perf_counter() - start, 1)
        project = Project.objects.get(slug=SLUG)
    n_judgements = Judgement.objects.filter(comparison__project=project).count()

    command = [sys.executable, str(ROOT / "manage.py"), "agreement", "--project", SLUG, "--json"]
    command_s, output = float("inf"), ""
    for _ in range(args.repeat):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=True, env=os.environ)
        command_s = min(command_s, time.perf_counter() - start)
        output = done.stdout
    summary = json.loads(output)

    start = time.perf_counter()
    data = agreement_selectors.project_judgements(project=project)
    read_copy_s = time.perf_counter() - start
    start = time.perf_counter()
    rows = list(
        Judgement.objects.filter(comparison__project=project)
        .order_by()
        .values_list("comparison_id", "annotator_id", "choice", "shown_left", "elapsed_ms")
    )
    read_values_list_s = time.perf_counter() - start
    del rows
    start = time.perf_counter()
    agreement_services.project_agreement(project=project)
    in_process_s = time.perf_counter() - start
    start = time.perf_counter()
    python_start = subprocess.run(
        [sys.executable, "-c", "import django, numpy, scipy.stats"], check=True, env=os.environ
    )
    startup_s = time.perf_counter() - start
    del python_start, data
    print(
        json.dumps(
            {
                "benchmark": "manage.py agreement --json on PostgreSQL",
                "judgements": n_judgements,
                "comparisons": summary["n_items"],
                "annotators": summary["n_annotators"],
                "load_s": load_s,
                "command_s": round(command_s, 2),
                "in_process_report_s": round(in_process_s, 2),
                "read_all_arrays_s": round(read_copy_s, 2),
                "values_list_5_judgement_columns_s": round(read_values_list_s, 2),
                "python_imports_s": round(startup_s, 2),
                "fleiss_kappa": summary["fleiss_kappa"],
                "krippendorff_alpha": summary["krippendorff_alpha"],
                "output_bytes": len(output),
                "cpu_count": os.cpu_count(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
