"""The PostgreSQL write path of the import: rows streamed with COPY into staging tables, then written
with a few set-based ``INSERT ... SELECT`` statements.

``annotation.services.importing`` reads and checks the source once and hands the valid rows here in
chunks (``staging_copy``); nothing is held in memory but one chunk. The staging tables are temporary
and dropped at commit, so an import that fails (a bad row found late, an error in a statement) rolls
back with its transaction and leaves nothing behind. Once a range of lines is staged,
``staged_write`` writes its prompts, responses, comparisons and judgements and ``staging_clear``
empties the tables for the next range (the file is written while it is read, and each statement's
work stays bounded), with the same rules as the row-by-row path: prompts and
responses found by their content hash, comparisons by their key (``comparison_hash``: the id, or the
content), new comparisons at the end of the hand-out queue in file order, a judgement per
(comparison, annotator) at most, each imported judgement taking one overlap slot.

Only the annotator accounts go through the ORM (a handful of names; the importing service makes
them). Everything here is PostgreSQL; SQLite keeps the row-by-row path.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import connection

from annotation.parsing import ImportedComparison, ImportValidationError, LineError

STAGE_ROWS = "concord_stage_row"
STAGE_JUDGEMENTS = "concord_stage_judgement"
ROW_COLUMNS = (
    "line",
    "comparison_hash",
    "prompt_hash",
    "prompt_text",
    "messages",
    "response_a",
    "model_a",
    "hash_a",
    "response_b",
    "model_b",
    "hash_b",
    "gold",
    "external_id",
    "metadata",
    "answer",
    "first",
)
JUDGEMENT_COLUMNS = (
    "line",
    "position",
    "comparison_hash",
    "annotator",
    "choice",
    "strength",
    "rationale",
    "shown_left",
    "elapsed_ms",
)


_STATISTICS = {STAGE_ROWS: ROW_COLUMNS, STAGE_JUDGEMENTS: JUDGEMENT_COLUMNS}
_PLANNED = frozenset(
    ("line", "comparison_hash", "prompt_hash", "hash_a", "hash_b", "answer", "first", "annotator")
)


def bulk_supported() -> bool:
    """Whether the default database can take the COPY path (PostgreSQL)."""
    return connection.vendor == "postgresql"


def staging_create() -> None:
    """Create the two staging tables of this transaction (dropped at its commit or rollback)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TEMP TABLE {STAGE_ROWS} (line integer NOT NULL, comparison_hash text NOT NULL, "
            "prompt_hash text NOT NULL, prompt_text text NOT NULL, messages jsonb, "
            "response_a text NOT NULL, model_a text NOT NULL, hash_a text NOT NULL, "
            "response_b text NOT NULL, model_b text NOT NULL, hash_b text NOT NULL, "
            "gold text NOT NULL, external_id text NOT NULL, metadata jsonb NOT NULL, answer text, "
            "first boolean NOT NULL) "
            "ON COMMIT DROP"
        )
        cursor.execute(
            f"CREATE TEMP TABLE {STAGE_JUDGEMENTS} (line integer NOT NULL, position integer NOT NULL, "
            "comparison_hash text NOT NULL, annotator text NOT NULL, choice text NOT NULL, "
            "strength integer NOT NULL, rationale text NOT NULL, shown_left text NOT NULL, "
            "elapsed_ms integer) ON COMMIT DROP"
        )
        # ANALYZE runs once a round: statistics of the columns the statements join and filter on
        # only (the texts' cost most to gather, and no plan reads them).
        for table, columns in _STATISTICS.items():
            sets = ", ".join(
                f"ALTER COLUMN {name} SET STATISTICS {-1 if name in _PLANNED else 0}"
                for name in columns
            )
            cursor.execute(f"ALTER TABLE {table} {sets}")


def staging_drop() -> None:
    """Drop the staging tables once written: an import inside a longer transaction (a test, or
    two imports in one) must not leave them to the next (ON COMMIT DROP acts only at the end)."""
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {STAGE_ROWS}, {STAGE_JUDGEMENTS}")


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def staging_clear() -> None:
    """Empty the staging tables once their range is written (the next range is staged alone)."""
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {STAGE_ROWS}, {STAGE_JUDGEMENTS}")


def staging_copy(rows: Iterable[tuple[ImportedComparison, bool]]) -> int:
    """COPY one chunk of checked rows (and their judgements) into the staging tables; returns the
    number of rows copied. Each row comes with whether it is its comparison's first in the file
    (``staged_existing`` counts a comparison once). Every hash is Python's, as on the row path."""
    raw = connection.cursor().cursor  # psycopg's own cursor: Django's wrapper has no copy()
    judgements: list[tuple[object, ...]] = []
    n = 0
    with raw.copy(f"COPY {STAGE_ROWS} ({', '.join(ROW_COLUMNS)}) FROM STDIN") as copy:
        for row, first in rows:
            key = row.comparison_hash
            copy.write_row(
                (
                    row.line,
                    key,
                    row.prompt_hash,
                    row.prompt_text,
                    None if row.messages is None else _json(row.messages),
                    row.response_a,
                    row.model_a,
                    row.hash_a,
                    row.response_b,
                    row.model_b,
                    row.hash_b,
                    row.gold,
                    row.external_id,
                    _json(row.metadata),
                    row.answer,
                    first,
                )
            )
            n += 1
            for position, j in enumerate(row.judgements):
                judgements.append(
                    (
                        row.line,
                        position,
                        key,
                        j.annotator,
                        j.choice,
                        j.strength,
                        j.rationale,
                        j.shown_left,
                        j.elapsed_ms,
                    )
                )
    if judgements:
        columns = ", ".join(JUDGEMENT_COLUMNS)
        with raw.copy(f"COPY {STAGE_JUDGEMENTS} ({columns}) FROM STDIN") as copy:
            for values in judgements:
                copy.write_row(values)
    return n


def staging_analyze() -> None:
    """Give the planner the staged range's statistics (autovacuum never analyses a temporary
    table); the statements below read the whole of it."""
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {STAGE_ROWS}")
        cursor.execute(f"ANALYZE {STAGE_JUDGEMENTS}")


def staged_lines() -> tuple[int, int, int]:
    """(rows staged, first line, last line); lines are 0 when nothing was staged."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*), coalesce(min(line), 0), coalesce(max(line), 0) FROM {STAGE_ROWS}"  # noqa: S608 - constant table names; every value is a parameter  # nosec B608
        )
        count, low, high = cursor.fetchone()
    return count, low, high


# The project's rows are looked up by key, one index probe per staged row ("LIMIT 1" subqueries,
# which the planner cannot turn into joins): its estimate of how many rows the project has may be
# stale (tables that grew from nothing in this transaction), and a hash join reads all of them,
# every round, which made the import's time grow with the square of the file.
_EXISTING_COUNT = f"""
    SELECT count(*) FROM (SELECT DISTINCT comparison_hash FROM {STAGE_ROWS} WHERE first) s
    WHERE (SELECT 1 FROM annotation_comparison c
           WHERE c.project_id = %s AND c.content_hash = s.comparison_hash LIMIT 1) IS NOT NULL
"""  # noqa: S608 - constant table names; every value is a parameter  # nosec B608


def staged_existing(*, project_id: int) -> int:
    """How many of the staged comparisons the project already holds, counting only those whose
    first row of the file is staged (so each once, in whichever range), before the range is
    written."""
    with connection.cursor() as cursor:
        cursor.execute(
            _EXISTING_COUNT,
            [project_id],
        )
        (count,) = cursor.fetchone()
    return count


def staged_annotators(*, low: int, high: int) -> list[str]:
    """The annotator names of the staged judgements on lines ``low`` to ``high`` (inclusive)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT annotator FROM {STAGE_JUDGEMENTS} WHERE line BETWEEN %s AND %s",  # noqa: S608 - constant table names; every value is a parameter  # nosec B608
            [low, high],
        )
        return [name for (name,) in cursor.fetchall()]


@dataclass(frozen=True)
class RangeCounts:
    """What one range of staged lines wrote: comparisons created, judgements created or already
    there (the comparisons already there are counted once for the whole file: staged_existing)."""

    rows: int
    comparisons_created: int
    judgements_created: int
    judgements_existing: int


_FIRST_ANSWERS = f"""
    SELECT DISTINCT ON (prompt_hash) prompt_hash, answer, line FROM {STAGE_ROWS}
    WHERE line BETWEEN %(low)s AND %(high)s AND answer IS NOT NULL ORDER BY prompt_hash, line
"""  # noqa: S608 - constant table names; every value is a parameter  # nosec B608

_PROMPTS_INSERT = f"""
    INSERT INTO annotation_prompt (project_id, text, messages, content_hash, metadata, created_at)
    SELECT %(project)s, s.prompt_text, s.messages, s.prompt_hash,
           CASE WHEN a.answer IS NULL THEN '{{}}'::jsonb ELSE jsonb_build_object('answer', a.answer)
           END,
           now()
    FROM (SELECT DISTINCT ON (prompt_hash) prompt_hash, prompt_text, messages, line
          FROM {STAGE_ROWS} WHERE line BETWEEN %(low)s AND %(high)s ORDER BY prompt_hash, line) s
    LEFT JOIN ({_FIRST_ANSWERS}) a USING (prompt_hash)
    ORDER BY s.line
    ON CONFLICT (project_id, content_hash) DO NOTHING
"""  # noqa: S608 - constant table names; every value is a parameter  # nosec B608

# A stored prompt whose answer differs (a concurrent import wrote it since the rows were checked).
_ANSWER_CONFLICT = f"""
    SELECT a.line, a.answer, p.metadata -> 'answer'
    FROM ({_FIRST_ANSWERS}) a
    JOIN annotation_prompt p ON p.project_id = %(project)s AND p.content_hash = a.prompt_hash
    WHERE jsonb_typeof(p.metadata -> 'answer') IS NOT NULL
      AND jsonb_typeof(p.metadata -> 'answer') <> 'null'
      AND (CASE WHEN jsonb_typeof(p.metadata -> 'answer') = 'string'
                THEN p.metadata ->> 'answer' ELSE (p.metadata -> 'answer')::text END) <> a.answer
    ORDER BY a.line LIMIT 1
"""  # noqa: S608 - constant table names; every value is a parameter  # nosec B608

_ANSWERS_FILL = f"""
    UPDATE annotation_prompt p
    SET metadata = (CASE WHEN jsonb_typeof(p.metadata) = 'object' THEN p.metadata
                    ELSE '{{}}'::jsonb END) || jsonb_build_object('answer', a.answer)
    FROM ({_FIRST_ANSWERS}) a
    WHERE p.project_id = %(project)s AND p.content_hash = a.prompt_hash
      AND coalesce(jsonb_typeof(p.metadata -> 'answer'), 'null') = 'null'
"""  # noqa: S608 - constant table names; every value is a parameter  # nosec B608

_RESPONSES_INSERT = f"""
    INSERT INTO annotation_response (prompt_id, text, model_name, content_hash, created_at)
    SELECT DISTINCT ON (p.id, r.hash) p.id, r.text, r.model, r.hash, now()
    FROM (SELECT prompt_hash, response_a AS text, model_a AS model, hash_a AS hash, line, 0 AS side
          FROM {STAGE_ROWS} WHERE line BETWEEN %(low)s AND %(high)s
          UNION ALL
          SELECT prompt_hash, response_b, model_b, hash_b, line, 1
          FROM {STAGE_ROWS} WHERE line BETWEEN %(low)s AND %(high)s) r
    CROSS JOIN LATERAL (SELECT id FROM annotation_prompt
                        WHERE project_id = %(project)s AND content_hash = r.prompt_hash LIMIT 1) p
    ORDER BY p.id, r.hash, r.line, r.side
    ON CONFLICT (prompt_id, content_hash) DO NOTHING
"""  # noqa: S608 - constant table names; every value is a parameter  # nosec B608

# A new comparison's overlap slots taken are its staged judgements (all of which the next statement
# writes: it has none yet, and the file names an annotator once per comparison), set here rather
# than by an UPDATE of every new row afterwards. The staged rows are matched with their votes first,
# apart (MATERIALIZED): the planner's guess of how many rows the joins with the project's tables
# give can be far off (statistics of tables that just grew from nothing), and with the votes joined
# after them it once chose a nested loop over every pair of rows (109 s for 25,000 rows).
_COMPARISONS_INSERT = f"""
    WITH first AS MATERIALIZED (
        SELECT f.*, coalesce(v.n, 0) AS votes
        FROM (SELECT DISTINCT ON (comparison_hash) * FROM {STAGE_ROWS}
              WHERE line BETWEEN %(low)s AND %(high)s ORDER BY comparison_hash, line) f
        LEFT JOIN (SELECT comparison_hash, count(*) AS n FROM {STAGE_JUDGEMENTS}
                   WHERE line BETWEEN %(low)s AND %(high)s GROUP BY comparison_hash) v
          ON v.comparison_hash = f.comparison_hash
    ), fresh AS (
        SELECT f.* FROM first f
        WHERE (SELECT 1 FROM annotation_comparison c WHERE c.project_id = %(project)s
               AND c.content_hash = f.comparison_hash LIMIT 1) IS NULL
    ), top AS (
        SELECT coalesce(max(queue_position), 0) AS top FROM annotation_comparison
        WHERE project_id = %(project)s
    ), inserted AS (
        INSERT INTO annotation_comparison (project_id, prompt_id, response_a_id, response_b_id,
            gold, external_id, content_hash, metadata, queue_position, taken, served, created_at)
        SELECT %(project)s, p.id, ra.id, rb.id, f.gold, f.external_id, f.comparison_hash,
               f.metadata, top.top + row_number() OVER (ORDER BY f.line), f.votes, 0, now()
        FROM fresh f CROSS JOIN top
        CROSS JOIN LATERAL (SELECT id FROM annotation_prompt WHERE project_id = %(project)s
                            AND content_hash = f.prompt_hash LIMIT 1) p
        CROSS JOIN LATERAL (SELECT id FROM annotation_response
                            WHERE prompt_id = p.id AND content_hash = f.hash_a LIMIT 1) ra
        CROSS JOIN LATERAL (SELECT id FROM annotation_response
                            WHERE prompt_id = p.id AND content_hash = f.hash_b LIMIT 1) rb
        ORDER BY f.line
        RETURNING 1
    )
    SELECT count(*) FROM inserted
"""  # noqa: S608 - constant table names; every value is a parameter  # nosec B608

_JUDGEMENTS_INSERT = """
    WITH inserted AS (
        INSERT INTO annotation_judgement (comparison_id, annotator_id, choice, strength, rationale,
            shown_left, elapsed_ms, guidelines_version_id, suggested_choice, created_at, updated_at)
        SELECT c.id, u.{user_pk}, j.choice, j.strength, j.rationale, j.shown_left, j.elapsed_ms,
               NULL, '', now(), now()
        FROM {stage} j
        CROSS JOIN LATERAL (SELECT id FROM annotation_comparison WHERE project_id = %(project)s
                            AND content_hash = j.comparison_hash LIMIT 1) c
        JOIN {users} u ON u.{username} = j.annotator
        WHERE j.line BETWEEN %(low)s AND %(high)s
        ORDER BY j.line, j.position
        ON CONFLICT (comparison_id, annotator_id) DO NOTHING
        RETURNING comparison_id
    ), added AS (
        SELECT comparison_id, count(*) AS n FROM inserted GROUP BY comparison_id
    ), taken AS (
        -- each imported judgement takes one of its comparison's overlap slots: comparisons this
        -- range created (ids above %(before_id)s) were given theirs; older ones get taken + n in
        -- the statement, so concurrent claims' increments are not lost
        UPDATE annotation_comparison c SET taken = c.taken + added.n
        FROM added WHERE c.id = added.comparison_id AND c.id <= %(before_id)s
    )
    SELECT (SELECT count(*) FROM inserted),
           (SELECT count(*) FROM {stage} WHERE line BETWEEN %(low)s AND %(high)s)
"""


def staged_write(*, project_id: int, low: int, high: int, judged: bool = True) -> RangeCounts:
    """Write the staged rows on lines ``low`` to ``high`` (inclusive) into the project: prompts
    (with their reference answers), responses, comparisons, then judgements (their annotators'
    accounts must exist: ``staged_annotators`` names them; ``judged`` False: the range has none, and
    the judgements statement is not run). Raises ImportValidationError when a
    stored prompt has another answer than a row gives it (written since the rows were checked)."""
    params = {"project": project_id, "low": low, "high": high}
    users = get_user_model()
    judgements_sql = _JUDGEMENTS_INSERT.format(
        stage=STAGE_JUDGEMENTS,
        users=connection.ops.quote_name(users._meta.db_table),
        user_pk=connection.ops.quote_name(users._meta.pk.column),
        username=connection.ops.quote_name(users._meta.get_field(users.USERNAME_FIELD).column),
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*) FROM {STAGE_ROWS} WHERE line BETWEEN %(low)s AND %(high)s",  # noqa: S608 - constant table names; every value is a parameter  # nosec B608
            params,
        )
        (rows,) = cursor.fetchone()
        cursor.execute(_PROMPTS_INSERT, params)
        cursor.execute(_ANSWER_CONFLICT, params)
        conflict = cursor.fetchone()
        if conflict is not None:
            line, answer, stored = conflict
            message = (
                f"{answer!r} differs from the answer {stored!r} the project has for this prompt"
            )
            raise ImportValidationError([LineError(line, "answer", message)])
        cursor.execute(_ANSWERS_FILL, params)
        cursor.execute(_RESPONSES_INSERT, params)
        cursor.execute("SELECT coalesce(max(id), 0) FROM annotation_comparison")
        (params["before_id"],) = cursor.fetchone()
        cursor.execute(_COMPARISONS_INSERT, params)
        (created,) = cursor.fetchone()
        judgements_created, staged_judgements = 0, 0
        if judged:
            cursor.execute(judgements_sql, params)
            judgements_created, staged_judgements = cursor.fetchone()
    return RangeCounts(
        rows=rows,
        comparisons_created=created,
        judgements_created=int(judgements_created),
        judgements_existing=staged_judgements - int(judgements_created),
    )
