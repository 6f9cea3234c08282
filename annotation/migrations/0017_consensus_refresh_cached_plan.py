"""The stored consensus's per-judgement refresh with a cached plan (issue 30, found by
bench/load_labelling.py).

``annotation_consensus_refresh(ids)`` (0013) is a SQL-language function: PostgreSQL parses and
plans its two statements (a prune and a ~60-line upsert) on every call. For one labelling
judgement that planning cost 6-25 ms of database CPU against under 1 ms of execution, which took
the database's CPU per judgement from 9 to 30 ms and saturated two cores at 200 annotators.

``annotation_consensus_refresh_few(ids)`` runs the same statements from PL/pgSQL with a generic
plan (``plan_cache_mode = force_generic_plan``): planned once per connection (Django keeps them
60 s), then about 1-2 ms a call. The triggers call it for statements that touch at most
``FEW`` comparisons (a judgement, an adjudication, a small edit); a bulk import's one statement
over thousands keeps the SQL function, whose plan fits the array it is given.
"""

# The SQL is built from constants only (this file's and migration 0013's).
# ruff: noqa: S608
import importlib

from django.conf import settings
from django.db import migrations

initial = importlib.import_module("annotation.migrations.0013_stored_consensus")

FEW = 64
SOURCES = (
    ("new", "SELECT comparison_id FROM new_judgements"),
    ("old", "SELECT comparison_id FROM old_judgements"),
    (
        "both",
        "SELECT comparison_id FROM old_judgements UNION SELECT comparison_id FROM new_judgements",
    ),
)


def _trigger_function(name: str, source: str, body: str) -> str:
    return (
        f"CREATE OR REPLACE FUNCTION annotation_judgement_consensus_{name}() RETURNS trigger "
        f"LANGUAGE plpgsql AS $$ {body.format(source=source)} $$"
    )


CACHED = (
    "DECLARE ids bigint[] := ARRAY(SELECT DISTINCT t.comparison_id FROM ({source}) t); "  # nosec B608
    f"BEGIN IF cardinality(ids) <= {FEW} THEN PERFORM annotation_consensus_refresh_few(ids); "
    "ELSE PERFORM annotation_consensus_refresh(ids); END IF; RETURN NULL; END"
)
UNCACHED = (
    "BEGIN PERFORM annotation_consensus_refresh("
    "ARRAY(SELECT DISTINCT t.comparison_id FROM ({source}) t)); RETURN NULL; END"
)


def create_cached(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    user = apps.get_model(settings.AUTH_USER_MODEL)
    machines = initial.MACHINES.format(groups=user.groups.through._meta.db_table)
    by_ids = initial._refresh("j.comparison_id = ANY(ids)", "s.comparison_id = ANY(ids)", machines)
    schema_editor.execute(
        "CREATE FUNCTION annotation_consensus_refresh_few(ids bigint[]) RETURNS void "
        f"LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$ BEGIN {by_ids} END $$"
    )
    for name, source in SOURCES:
        schema_editor.execute(_trigger_function(name, source, CACHED))


def drop_cached(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for name, source in SOURCES:
        schema_editor.execute(_trigger_function(name, source, UNCACHED))
    schema_editor.execute("DROP FUNCTION IF EXISTS annotation_consensus_refresh_few(bigint[])")


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0016_stored_consensus_project_index"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [migrations.RunPython(create_cached, drop_cached)]
