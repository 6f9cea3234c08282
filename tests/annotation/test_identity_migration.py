"""Migration 0004 re-keys comparisons stored under the old content-only rule, so that re-importing
their files finds them (by id, or by content and model names) instead of duplicating them."""

import json

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from annotation.models import Comparison, Response
from annotation.parsing import content_hash
from annotation.services.importing import comparisons_import, project_get_or_create
from tests.factories import PromptFactory

pytestmark = pytest.mark.django_db

BEFORE = [("annotation", "0003_clustering")]
AFTER = [("annotation", "0004_comparison_identity_by_external_id")]


def _migrate(target):
    # Rows written before in this test's transaction leave deferred foreign-key checks pending, and
    # PostgreSQL refuses to ALTER a table with pending trigger events (unapplying 0005 alters the
    # project table): run those checks now.
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)


def _old_comparison(project, prompt_text, a, b, *, external_id="", models=("", "")):
    """A comparison as the old importer stored it: every key a hash of content only."""
    prompt = PromptFactory(
        project=project, text=prompt_text, content_hash=content_hash(prompt_text)
    )
    ra = Response.objects.create(
        prompt=prompt, text=a, model_name=models[0], content_hash=content_hash(a)
    )
    rb = Response.objects.create(
        prompt=prompt, text=b, model_name=models[1], content_hash=content_hash(b)
    )
    return Comparison.objects.create(
        project=project, prompt=prompt, response_a=ra, response_b=rb, external_id=external_id,
        content_hash=content_hash([prompt_text, a, b]),
    )  # fmt: skip


def test_reimport_after_the_migration_finds_old_rows():
    project = project_get_or_create(slug="old")[0]
    _migrate(BEFORE)
    _old_comparison(project, "Q1?", "x", "y", external_id="item-1")
    _old_comparison(project, "Q2?", "u", "v", models=("m1", "m2"))
    _old_comparison(project, "Q3?", "s", "t")
    _migrate(AFTER)
    rows = [
        {"id": "item-1", "prompt": "Q1?", "response_a": "x", "response_b": "y"},
        {"prompt": "Q2?", "response_a": "u", "response_b": "v", "model_a": "m1", "model_b": "m2"},
        {"prompt": "Q3?", "response_a": "s", "response_b": "t"},
    ]
    result = comparisons_import(project=project, lines=[json.dumps(r) for r in rows])
    assert (result.comparisons_created, result.comparisons_existing) == (0, 3)
    assert Comparison.objects.count() == 3 and Response.objects.count() == 6
