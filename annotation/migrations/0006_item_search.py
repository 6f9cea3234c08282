"""Full-text search for the item browser (PostgreSQL only; SQLite searches with a plain contains).

GIN expression indexes on ``to_tsvector('english', text)`` of prompts and responses. Expression
indexes, not a stored tsvector column on the comparison: a comparison's searchable text lives in three
rows of two other tables (its prompt and both responses), which a generated column cannot reach, and
prompts and responses are shared by many comparisons, so each text is indexed once. The item selector
writes the same expression (``annotation.selectors.items.SEARCH_VECTOR_SQL``), which is what lets the
planner use these indexes. Created with plain SQL, so Django's model state (and makemigrations) does
not see them.
"""

from django.db import migrations

INDEXES = (
    ("annotation_prompt", "prompt_text_search"),
    ("annotation_response", "response_text_search"),
)


def create_indexes(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, name in INDEXES:
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON {table} "
            "USING gin (to_tsvector('english'::regconfig, text))"
        )


def drop_indexes(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for _table, name in INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [("annotation", "0005_project_members_archive_events")]

    operations = [migrations.RunPython(create_indexes, drop_indexes)]
