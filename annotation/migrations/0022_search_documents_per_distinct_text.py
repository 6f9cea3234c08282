"""The insert trigger of the per-comparison search documents (0010), cheaper on a large import
(issue 30): each distinct prompt's and response's ``to_tsvector`` is computed once per statement,
not once per comparison that shows it (a prompt with four responses is in six pairs, each response
in three), and the texts are read by primary key, one probe per distinct id.

The documents stored are the same: ``to_tsvector('english', text)`` of the same texts, only not
recomputed. The old function joined the statement's comparisons with the prompt and response
tables, which the planner could do by hashing the whole of both (their statistics taken when the
tables were small); here the work depends on the rows inserted only. PostgreSQL only, like 0010;
the reverse restores 0010's function.
"""

from django.db import migrations

UPSERT_TAIL = (
    "ON CONFLICT (comparison_id) DO UPDATE SET prompt_document = EXCLUDED.prompt_document, "
    "a_document = EXCLUDED.a_document, b_document = EXCLUDED.b_document"
)

PER_DISTINCT_TEXT = f"""
    CREATE OR REPLACE FUNCTION annotation_comparison_search_inserted() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        WITH prompts AS MATERIALIZED (
            SELECT t.id, to_tsvector('english'::regconfig, t.text) AS document
            FROM (SELECT DISTINCT prompt_id FROM inserted_comparisons) i
            CROSS JOIN LATERAL (SELECT p.id, p.text FROM annotation_prompt p
                                WHERE p.id = i.prompt_id LIMIT 1) t
        ), responses AS MATERIALIZED (
            SELECT t.id, to_tsvector('english'::regconfig, t.text) AS document
            FROM (SELECT response_a_id AS id FROM inserted_comparisons
                  UNION SELECT response_b_id FROM inserted_comparisons) i
            CROSS JOIN LATERAL (SELECT r.id, r.text FROM annotation_response r
                                WHERE r.id = i.id LIMIT 1) t
        )
        INSERT INTO annotation_comparisonsearch (comparison_id, prompt_document, a_document,
            b_document)
        SELECT c.id, p.document, ra.document, rb.document
        FROM inserted_comparisons c
        JOIN prompts p ON p.id = c.prompt_id
        JOIN responses ra ON ra.id = c.response_a_id
        JOIN responses rb ON rb.id = c.response_b_id
        {UPSERT_TAIL};
        RETURN NULL;
    END $$
"""  # noqa: S608 - constant text only  # nosec B608

PER_COMPARISON = f"""
    CREATE OR REPLACE FUNCTION annotation_comparison_search_inserted() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO annotation_comparisonsearch (comparison_id, prompt_document, a_document,
            b_document)
        SELECT c.id AS comparison_id,
               to_tsvector('english'::regconfig, p.text) AS prompt_document,
               to_tsvector('english'::regconfig, ra.text) AS a_document,
               to_tsvector('english'::regconfig, rb.text) AS b_document
        FROM inserted_comparisons c
        JOIN annotation_prompt p ON p.id = c.prompt_id
        JOIN annotation_response ra ON ra.id = c.response_a_id
        JOIN annotation_response rb ON rb.id = c.response_b_id
        {UPSERT_TAIL};
        RETURN NULL;
    END $$
"""  # noqa: S608 - constant text only  # nosec B608


def per_distinct_text(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PER_DISTINCT_TEXT)


def per_comparison(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PER_COMPARISON)


class Migration(migrations.Migration):
    dependencies = [("annotation", "0021_importjob_cancel_requested")]

    operations = [migrations.RunPython(per_distinct_text, per_comparison)]
