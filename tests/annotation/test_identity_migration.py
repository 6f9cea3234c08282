"""Migration 0004 re-keys comparisons stored under the old content-only rule, so that re-importing
their files finds them (by id, or by content and model names) instead of duplicating them."""

import json

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from annotation.models import Comparison, Response
from annotation.parsing import content_hash
from annotation.services.importing import comparisons_import, project_get_or_create

pytestmark = pytest.mark.django_db

BEFORE = [("annotation", "0003_clustering")]
AFTER = [("annotation", "0004_comparison_identity_by_external_id")]
LATEST = None  # every app's last migration


def _migrate(target):
    """Migrate the test database to ``target``; returns the models as they were there (later
    migrations add columns, so rows written on the old schema use the historical models)."""
    # Rows written before in this test's transaction leave deferred foreign-key checks pending, and
    # PostgreSQL refuses to ALTER a table with pending trigger events (unapplying 0005 alters the
    # project table): run those checks now.
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    if target is None:
        target = executor.loader.graph.leaf_nodes()
    executor.migrate(target)
    return executor.loader.project_state(target).apps


def _old_comparison(old, project, prompt_text, a, b, *, external_id="", models=("", "")):
    """A comparison as the old importer stored it: every key a hash of content only. ``old``: the
    historical models of the schema before migration 0004."""
    prompt = old.get_model("annotation", "Prompt").objects.create(
        project_id=project.pk, text=prompt_text, content_hash=content_hash(prompt_text)
    )
    response = old.get_model("annotation", "Response")
    ra = response.objects.create(
        prompt=prompt, text=a, model_name=models[0], content_hash=content_hash(a)
    )
    rb = response.objects.create(
        prompt=prompt, text=b, model_name=models[1], content_hash=content_hash(b)
    )
    return old.get_model("annotation", "Comparison").objects.create(
        project_id=project.pk, prompt=prompt, response_a=ra, response_b=rb,
        external_id=external_id, content_hash=content_hash([prompt_text, a, b]),
    )  # fmt: skip


def test_reimport_after_the_migration_finds_old_rows():
    project = project_get_or_create(slug="old")[0]
    old = _migrate(BEFORE)
    _old_comparison(old, project, "Q1?", "x", "y", external_id="item-1")
    _old_comparison(old, project, "Q2?", "u", "v", models=("m1", "m2"))
    _old_comparison(old, project, "Q3?", "s", "t")
    _migrate(AFTER)
    _migrate(LATEST)  # re-imported by today's importer, on today's schema
    rows = [
        {"id": "item-1", "prompt": "Q1?", "response_a": "x", "response_b": "y"},
        {"prompt": "Q2?", "response_a": "u", "response_b": "v", "model_a": "m1", "model_b": "m2"},
        {"prompt": "Q3?", "response_a": "s", "response_b": "t"},
    ]
    result = comparisons_import(project=project, lines=[json.dumps(r) for r in rows])
    assert (result.comparisons_created, result.comparisons_existing) == (0, 3)
    assert Comparison.objects.count() == 3 and Response.objects.count() == 6
