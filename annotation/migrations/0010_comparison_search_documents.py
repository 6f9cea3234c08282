"""Per-comparison search documents (issue 30): one row per comparison holding the English
``tsvector`` of its prompt and of each response, one GIN index over the three, kept by triggers.

The item browser used GIN expression indexes on prompts and responses (0006), which made a search
build sets of matching prompt and response ids and scan comparisons against them (1.2 s for a common
word at 1,000,000 comparisons). Here a comparison's documents sit in one row keyed by its id, so the
search is one index lookup or one probe per comparison walked. Kept by the database, not by Python:

- a statement-level ``AFTER INSERT`` trigger on comparisons (its transition table holds every row
  of the statement, so the import's ``INSERT ... SELECT`` of 100,000 comparisons is one
  ``INSERT ... SELECT`` here);
- row-level triggers when a comparison's prompt or responses change, or a prompt's or response's
  text changes (rare: texts are kept as imported).

The table is a Django model (``ComparisonSearch``) so deletes cascade and flush empties it; the
triggers, the index and the backfill exist on PostgreSQL only (SQLite, the demo's database, keeps
the table empty and searches with contains). The 0006 expression indexes are dropped: nothing
reads them now, and every import paid for them.
"""

import django.contrib.postgres.search
import django.db.models.deletion
from django.db import migrations, models

DOCUMENTS = """
    SELECT c.id AS comparison_id,
           to_tsvector('english'::regconfig, p.text) AS prompt_document,
           to_tsvector('english'::regconfig, ra.text) AS a_document,
           to_tsvector('english'::regconfig, rb.text) AS b_document
    FROM {source} c
    JOIN annotation_prompt p ON p.id = c.prompt_id
    JOIN annotation_response ra ON ra.id = c.response_a_id
    JOIN annotation_response rb ON rb.id = c.response_b_id
"""
UPSERT = (
    "INSERT INTO annotation_comparisonsearch (comparison_id, prompt_document, a_document, "
    "b_document) {documents} ON CONFLICT (comparison_id) DO UPDATE SET "
    "prompt_document = EXCLUDED.prompt_document, a_document = EXCLUDED.a_document, "
    "b_document = EXCLUDED.b_document"
)

CREATE = [
    "CREATE INDEX comparisonsearch_documents ON annotation_comparisonsearch "
    "USING gin (prompt_document, a_document, b_document)",
    f"""
    CREATE FUNCTION annotation_comparison_search_inserted() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        {UPSERT.format(documents=DOCUMENTS.format(source="inserted_comparisons"))};
        RETURN NULL;
    END $$
    """,
    "CREATE TRIGGER comparison_search_inserted AFTER INSERT ON annotation_comparison "
    "REFERENCING NEW TABLE AS inserted_comparisons FOR EACH STATEMENT "
    "EXECUTE FUNCTION annotation_comparison_search_inserted()",
    f"""
    CREATE FUNCTION annotation_comparison_search_changed() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_TABLE_NAME = 'annotation_comparison' THEN
            {UPSERT.format(documents=DOCUMENTS.format(source="annotation_comparison") + " WHERE c.id = NEW.id")};
        ELSIF TG_TABLE_NAME = 'annotation_prompt' THEN
            {UPSERT.format(documents=DOCUMENTS.format(source="annotation_comparison") + " WHERE c.prompt_id = NEW.id")};
        ELSE
            {UPSERT.format(documents=DOCUMENTS.format(source="annotation_comparison") + " WHERE c.response_a_id = NEW.id OR c.response_b_id = NEW.id")};
        END IF;
        RETURN NULL;
    END $$
    """,
    "CREATE TRIGGER comparison_search_changed AFTER UPDATE OF prompt_id, response_a_id, "
    "response_b_id ON annotation_comparison FOR EACH ROW "
    "EXECUTE FUNCTION annotation_comparison_search_changed()",
    "CREATE TRIGGER comparison_search_prompt_changed AFTER UPDATE OF text ON annotation_prompt "
    "FOR EACH ROW WHEN (OLD.text IS DISTINCT FROM NEW.text) "
    "EXECUTE FUNCTION annotation_comparison_search_changed()",
    "CREATE TRIGGER comparison_search_response_changed AFTER UPDATE OF text ON "
    "annotation_response FOR EACH ROW WHEN (OLD.text IS DISTINCT FROM NEW.text) "
    "EXECUTE FUNCTION annotation_comparison_search_changed()",
    UPSERT.format(documents=DOCUMENTS.format(source="annotation_comparison")),  # the backfill
    "DROP INDEX IF EXISTS prompt_text_search",
    "DROP INDEX IF EXISTS response_text_search",
]

DROP = [
    "DROP TRIGGER IF EXISTS comparison_search_response_changed ON annotation_response",
    "DROP TRIGGER IF EXISTS comparison_search_prompt_changed ON annotation_prompt",
    "DROP TRIGGER IF EXISTS comparison_search_changed ON annotation_comparison",
    "DROP TRIGGER IF EXISTS comparison_search_inserted ON annotation_comparison",
    "DROP FUNCTION IF EXISTS annotation_comparison_search_changed()",
    "DROP FUNCTION IF EXISTS annotation_comparison_search_inserted()",
    "DROP INDEX IF EXISTS comparisonsearch_documents",
    "CREATE INDEX IF NOT EXISTS prompt_text_search ON annotation_prompt "
    "USING gin (to_tsvector('english'::regconfig, text))",
    "CREATE INDEX IF NOT EXISTS response_text_search ON annotation_response "
    "USING gin (to_tsvector('english'::regconfig, text))",
]


def create_search(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in CREATE:
        schema_editor.execute(statement)


def drop_search(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in DROP:
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("annotation", "0009_active_learning_queue_and_curve")]

    operations = [
        migrations.CreateModel(
            name="ComparisonSearch",
            fields=[
                (
                    "comparison",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="search",
                        serialize=False,
                        to="annotation.comparison",
                    ),
                ),
                ("prompt_document", django.contrib.postgres.search.SearchVectorField(null=True)),
                ("a_document", django.contrib.postgres.search.SearchVectorField(null=True)),
                ("b_document", django.contrib.postgres.search.SearchVectorField(null=True)),
            ],
        ),
        migrations.RunPython(create_search, drop_search),
    ]
