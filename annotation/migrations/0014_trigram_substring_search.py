"""Substring search (issue 30): ``pg_trgm`` and its GIN indexes on prompt and response texts, which
serve ``text ILIKE '%piece%'`` (the item browser's ``*substring*`` terms,
``annotation.selectors.search``). PostgreSQL only: SQLite searches with contains.

``pg_trgm`` is a trusted extension (PostgreSQL 13+): the database's owner may create it.
"""

from django.db import migrations

CREATE = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE INDEX IF NOT EXISTS prompt_text_trigram ON annotation_prompt "
    "USING gin (text gin_trgm_ops)",
    "CREATE INDEX IF NOT EXISTS response_text_trigram ON annotation_response "
    "USING gin (text gin_trgm_ops)",
]
DROP = [
    "DROP INDEX IF EXISTS response_text_trigram",
    "DROP INDEX IF EXISTS prompt_text_trigram",
]


def create_trigram(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in CREATE:
        schema_editor.execute(statement)


def drop_trigram(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in DROP:  # the extension stays: other databases' objects may use it
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("annotation", "0013_stored_consensus")]

    operations = [migrations.RunPython(create_trigram, drop_trigram)]
