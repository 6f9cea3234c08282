"""The item browser on a project of 1,000,000 comparisons in PostgreSQL: page times through Django.

Builds, in a database of its own (default ``concord_bench_items`` on the local server; created,
migrated, and dropped at the end unless ``--keep``), a project of 250,000 prompts with 4 responses
each (6 model names), 1,000,000 comparisons (4 per prompt; every 500th gold), judgements on the
first ``--judged`` comparisons (3 annotators each out of 30; a further slice with one judgement),
done assignments for half of the judgements (labelled here; the rest count as imported) and 1,000
active leases. Everything is written by ``INSERT ... SELECT generate_series`` in SQL, not the ORM;
the search documents (migration 0010's trigger off during the load) are written in one statement
after it, and their GIN index and the substring search's trigram indexes (0013) built then; the
stored consensus (0012) likewise, by its backfill function (its trigger off during the load).

Then times, through Django's test Client (view, selector, template, as a lead's browser gets it),
as the superuser: the first page; 50 random deep pages reached by a keyset cursor (sorted by id and
by queue position); and filters (status, agreement, gold, annotator, model pair, origin, cluster,
a rare and a common search word, rare and common substrings, the Dawid-Skene margin read from the
stored consensus after its first fit), each a few times. Prints one JSON object
with p50/p95 per case (ms), the load timings (s), the CPU flags and the load average.

Run: .venv/bin/python bench/bench_item_browser.py [--database-url URL] [--keep] [--repeat 5]
"""

# The SQL below is built from this file's own constants and integer ids, never from input; the
# random generator picks pages to time.
# ruff: noqa: S608, S311

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLUG = "bench-items"
N_PROMPTS = 250_000
PER_PROMPT = 4  # responses per prompt, and comparisons per prompt
N_ANNOTATORS = 30
TOPICS = [
    "volcanoes", "gardening", "taxes", "python", "poetry", "chess", "cooking", "astronomy",
    "football", "banking", "medicine", "history", "physics", "music", "travel", "law",
    "painting", "weather", "robots", "economics", "farming", "geology", "cinema", "fashion",
]  # fmt: skip
RARE_WORD = "quasar"  # in 1 prompt out of 5,000
MODELS = ["llama-3-8b", "qwen2-7b", "mistral-7b", "gemma-2-9b", "phi-3-mini", "olmo-7b"]


def _ensure_database(url: str, *, fresh: bool) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    admin_url = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        ident = psycopg.sql.Identifier(name)
        if fresh:
            conn.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {}").format(ident))
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(ident))


def _drop_database(url: str) -> None:
    import psycopg
    from django.db import connections

    connections.close_all()
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("DROP DATABASE {}").format(psycopg.sql.Identifier(name)))


def _sql_array(words: list[str]) -> str:
    return "ARRAY[" + ", ".join(f"'{w}'" for w in words) + "]"


def load(*, judged: int, skip: tuple[str, ...] = ()) -> dict[str, float]:
    """Write the project with SQL; returns seconds per step. ``skip``: steps left out (names of
    the ``steps`` below; e.g. the export bench needs no assignments or search indexes)."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from annotation.models import Project

    user_model = get_user_model()
    user_model.objects.create_superuser("bench-lead", "lead@example.org", "bench")
    annotators = user_model.objects.bulk_create(
        [user_model(username=f"ann{i}") for i in range(N_ANNOTATORS)]
    )
    first_annotator = min(a.pk for a in annotators)
    project = Project.objects.create(name="Item browser bench", slug=SLUG, overlap=3)
    topics, models = _sql_array(TOPICS), _sql_array(MODELS)
    n_topics, n_models = len(TOPICS), len(MODELS)
    n_comparisons = N_PROMPTS * PER_PROMPT
    steps = {
        # the search documents are written in one pass after the load, as the migration's backfill
        "search_off": "ALTER TABLE annotation_comparison DISABLE TRIGGER comparison_search_inserted; "
        "DROP INDEX comparisonsearch_documents; DROP INDEX prompt_text_trigram; "
        "DROP INDEX response_text_trigram",
        "prompts": f"""
            INSERT INTO annotation_prompt (project_id, text, content_hash, metadata, cluster, created_at)
            SELECT {project.pk},
                   'Question ' || i || ': tell me about ' || ({topics})[1 + i % {n_topics}]
                   || ' and ' || ({topics})[1 + (i * 7) % {n_topics}]
                   || CASE WHEN i % 5000 = 0 THEN ' near a {RARE_WORD}' ELSE '' END
                   || ', in a few sentences please.',
                   md5('p' || i), '{{}}', i % 12, now()
            FROM generate_series(1, {N_PROMPTS}) i""",
        "responses": f"""
            INSERT INTO annotation_response (prompt_id, text, model_name, content_hash, created_at)
            SELECT p.id,
                   'Answer ' || k || ' on ' || ({topics})[1 + (p.id + k) % {n_topics}]
                   || ': it depends on the details, and here they are at some length.',
                   ({models})[1 + (p.id + k) % {n_models}], md5('r' || p.id || '-' || k), now()
            FROM annotation_prompt p, generate_series(1, {PER_PROMPT}) k
            WHERE p.project_id = {project.pk}""",
        "comparisons": f"""
            INSERT INTO annotation_comparison (project_id, prompt_id, response_a_id, response_b_id,
                gold, external_id, content_hash, metadata, queue_position, taken, served, created_at)
            SELECT {project.pk}, r.prompt_id, r.ids[pair[1]], r.ids[pair[2]],
                   CASE WHEN (r.prompt_id * 4 + n) % 500 = 0 THEN 'a' ELSE '' END,
                   'bench-' || r.prompt_id || '-' || n, md5('c' || r.prompt_id || '-' || n), '{{}}',
                   r.prompt_id * 4 + n, 0, 0, now()
            FROM (SELECT prompt_id, array_agg(id ORDER BY id) ids FROM annotation_response
                  GROUP BY prompt_id) r,
                 LATERAL (VALUES (1, ARRAY[1, 2]), (2, ARRAY[3, 4]), (3, ARRAY[1, 3]),
                                 (4, ARRAY[2, 4])) AS v(n, pair)""",
        # the stored consensus (0012) is written in one pass after the judgements, as its backfill
        "consensus_off": "ALTER TABLE annotation_judgement DISABLE TRIGGER "
        "judgement_consensus_inserted",
        "judgements": f"""
            INSERT INTO annotation_judgement (comparison_id, annotator_id, choice, strength, rationale,
                shown_left, elapsed_ms, suggested_choice, created_at, updated_at)
            SELECT c.id, {first_annotator} + (c.id + k) % {N_ANNOTATORS},
                   (ARRAY['a', 'b', 'a', 'tie', 'b', 'a', 'both_bad'])[1 + (c.id * 3 + k * k) % 7],
                   1 + (c.id + k) % 3, '', CASE WHEN k % 2 = 0 THEN 'a' ELSE 'b' END,
                   2000 + (c.id * k) % 30000, '', now(), now()
            FROM (SELECT id FROM annotation_comparison WHERE project_id = {project.pk}
                  ORDER BY id LIMIT {judged}) c, generate_series(0, 2) k
            UNION ALL
            SELECT c.id, {first_annotator} + c.id % {N_ANNOTATORS}, 'b', 1, '', 'a', 5000, '', now(),
                   now()
            FROM (SELECT id FROM annotation_comparison WHERE project_id = {project.pk}
                  ORDER BY id OFFSET {judged} LIMIT {judged // 3}) c""",
        "assignments": f"""
            INSERT INTO annotation_assignment (comparison_id, annotator_id, kind, status, shown_left,
                claimed_at, expires_at, finished_at)
            SELECT j.comparison_id, j.annotator_id, 'normal', 'done', j.shown_left, now(), now(),
                   now()
            FROM annotation_judgement j WHERE j.comparison_id % 2 = 0
            UNION ALL
            SELECT c.id, {first_annotator}, 'normal', 'active', 'a', now(),
                   now() + interval '1 day', NULL
            FROM (SELECT id FROM annotation_comparison WHERE project_id = {project.pk}
                  ORDER BY id DESC LIMIT 1000) c""",
        "taken": f"""
            UPDATE annotation_comparison c SET taken = n FROM (
                SELECT comparison_id, count(*) n FROM annotation_judgement GROUP BY comparison_id
            ) j WHERE j.comparison_id = c.id AND c.project_id = {project.pk}""",
        "consensus_rows": f"SELECT annotation_consensus_refresh_project({project.pk}); "
        "ALTER TABLE annotation_judgement ENABLE TRIGGER judgement_consensus_inserted",
        "search_documents": f"""
            INSERT INTO annotation_comparisonsearch (comparison_id, prompt_document, a_document,
                b_document)
            SELECT c.id, to_tsvector('english'::regconfig, p.text),
                   to_tsvector('english'::regconfig, ra.text),
                   to_tsvector('english'::regconfig, rb.text)
            FROM annotation_comparison c JOIN annotation_prompt p ON p.id = c.prompt_id
            JOIN annotation_response ra ON ra.id = c.response_a_id
            JOIN annotation_response rb ON rb.id = c.response_b_id
            WHERE c.project_id = {project.pk}""",
        "search_index": "CREATE INDEX comparisonsearch_documents ON annotation_comparisonsearch "
        "USING gin (prompt_document, a_document, b_document); "
        "ALTER TABLE annotation_comparison ENABLE TRIGGER comparison_search_inserted",
        "trigram_indexes": "CREATE INDEX prompt_text_trigram ON annotation_prompt "
        "USING gin (text gin_trgm_ops); CREATE INDEX response_text_trigram ON annotation_response "
        "USING gin (text gin_trgm_ops)",
        "analyze": "ANALYZE",
    }
    seconds = {}
    with connection.cursor() as cursor:
        for name, sql in steps.items():
            if name in skip:
                continue
            started = time.perf_counter()
            for statement in sql.split(";"):
                cursor.execute(statement)
            seconds[name] = round(time.perf_counter() - started, 1)
            print(f"  {name}: {seconds[name]} s", file=sys.stderr, flush=True)
    assert Project.objects.get(slug=SLUG).comparisons.count() == n_comparisons
    return seconds


def _percentiles(samples: list[float]) -> dict[str, float]:
    import numpy as np

    values = np.asarray(samples) * 1000
    return {
        "n": len(samples),
        "p50_ms": round(float(np.percentile(values, 50)), 1),
        "p95_ms": round(float(np.percentile(values, 95)), 1),
        "max_ms": round(float(values.max()), 1),
    }


def measure(
    *, repeat: int, deep_pages: int, seed: int = 0, cases: list[str] | None = None
) -> dict[str, dict]:
    """Time the pages through the test Client; returns {case: percentiles}. ``cases``: only these
    filter cases (names of ``filters`` below), without the paging, Dawid-Skene and item cases."""
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.urls import reverse

    from annotation.models import Comparison, Project
    from annotation.selectors.items import cursor_encode
    from annotation.services.consensus import consensus_refit

    project = Project.objects.get(slug=SLUG)
    client = Client(raise_request_exception=True)
    client.force_login(get_user_model().objects.get(username="bench-lead"))
    url = reverse("annotation:items", args=[SLUG])

    def timed(params: dict[str, str], n: int) -> list[float]:
        samples = []
        for _ in range(n):
            started = time.perf_counter()
            response = client.get(url, params)
            samples.append(time.perf_counter() - started)
            assert response.status_code == 200, (params, response.status_code)
        return samples

    rng = random.Random(seed)
    ids = list(Comparison.objects.filter(project=project).values_list("id", "queue_position"))
    picks = [ids[rng.randrange(len(ids))] for _ in range(deep_pages)]
    timed({}, 2)  # warm the caches of the first request (templates, session, plans)
    results = {"first_page": _percentiles(timed({}, repeat * 4))}
    results["deep_pages_by_id"] = _percentiles(
        [s for pk, _ in picks for s in timed({"after": cursor_encode(pk, pk)}, 1)]
    )
    results["deep_pages_by_queue_desc"] = _percentiles(
        [
            s
            for pk, queue in picks
            for s in timed({"order": "-queue", "before": cursor_encode(queue, pk)}, 1)
        ]
    )
    middle = ids[len(ids) // 2][0]
    filters = {
        "status_complete": {"status": "complete"},
        "status_open": {"status": "open"},
        "agreement_split": {"agreement": "split"},
        "gold": {"gold": "yes"},
        "annotator": {"annotator": "ann7"},
        "model_pair": {"model": f"{MODELS[1]} vs {MODELS[2]}"},
        "origin_imported": {"origin": "imported"},
        "cluster": {"cluster": "3"},
        "search_common": {"q": "volcanoes"},
        "search_rare": {"q": RARE_WORD},
        "search_common_deep": {"q": "volcanoes", "after": cursor_encode(middle, middle)},
        "substring_common": {"q": "*olcano*"},
        "substring_rare": {"q": f"*{RARE_WORD[1:-1]}*"},
        "words_and_substring": {"q": f"volcanoes *{RARE_WORD[1:-1]}*"},
        "agreement_unanimous": {"agreement": "unanimous"},
        "split_majority_margin_0": {"margin_max": "0"},
    }
    for name, params in filters.items():
        if not cases or name in cases:
            results[name] = _percentiles(timed(params, repeat))
    if cases:
        return results
    started = time.perf_counter()
    consensus_refit(project=project, force=True)  # the stored consensus's first Dawid-Skene fit
    results["dawid_skene_first_computation_s"] = round(time.perf_counter() - started, 1)
    results["margin_0.9_to_1"] = _percentiles(timed({"margin_min": "0.9"}, repeat))
    results["margin_0.3_to_0.6"] = _percentiles(
        timed({"margin_min": "0.3", "margin_max": "0.6"}, repeat)
    )
    item_url = reverse("annotation:item", args=[SLUG, middle])
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        assert client.get(item_url).status_code == 200
        samples.append(time.perf_counter() - started)
    results["item_page"] = _percentiles(samples)
    return results


def _cpu_flags() -> list[str]:
    wanted = {"avx", "avx2", "avx512f", "avx512bw", "avx512_vnni", "fma", "sse4_2", "amx_tile"}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return sorted(wanted & set(line.split(":", 1)[1].split()))
    return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-url", default="postgres://postgres@127.0.0.1:5432/concord_bench_items"
    )
    parser.add_argument("--judged", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--deep-pages", type=int, default=50)
    parser.add_argument("--keep", action="store_true", help="keep the bench database")
    parser.add_argument("--reuse", action="store_true", help="measure a kept database again")
    parser.add_argument(
        "--cases", default="", help="comma-separated filter cases to time (default: all)"
    )
    args = parser.parse_args()

    _ensure_database(args.database_url, fresh=not args.reuse)
    os.environ["DATABASE_URL"] = args.database_url
    os.environ["CACHE_URL"] = "locmemcache://"  # the Dawid-Skene result stays in this process
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command
    from django.test.utils import setup_test_environment

    setup_test_environment()  # the test Client's host, as in the test suite
    report: dict = {"cpu_count": os.cpu_count(), "cpu_flags": _cpu_flags()}
    try:
        started = time.perf_counter()
        call_command("migrate", verbosity=0)  # with --reuse: what a kept database lacks, timed
        report["migrate_s"] = round(time.perf_counter() - started, 1)
        if not args.reuse:
            started = time.perf_counter()
            report["load_s"] = load(judged=args.judged)
            report["load_total_s"] = round(time.perf_counter() - started, 1)
        report["load_average_before"] = os.getloadavg()
        cases = [c for c in args.cases.split(",") if c]
        report["pages"] = measure(repeat=args.repeat, deep_pages=args.deep_pages, cases=cases)
        report["load_average_after"] = os.getloadavg()
    finally:
        if not args.keep:
            _drop_database(args.database_url)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
