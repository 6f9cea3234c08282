"""Stored consensus per comparison (issue 30): majority and Dawid-Skene figures in a table with
indexes, kept by the database in the transaction that changes judgements.

Three statement-level triggers on ``annotation_judgement`` (insert, update, delete; their transition
tables hold every row of the statement, so the bulk import's ``INSERT ... SELECT`` of 300,000
judgements is one call) pass the comparisons the statement touched to
``annotation_consensus_refresh(ids)``, which recomputes exactly those rows from people's votes:
counts, majority and its margin, and the Dawid-Skene posterior with the project's last fit held
fixed (``annotation_consensusfit`` priors, ``annotation_annotatorconfusion`` rows; an annotator
the fit has not seen adds nothing until the next fit, which a Celery task runs debounced). A
comparison left without people's votes loses its row. ``annotation_consensus_refresh_project(id)``
does the same for a whole project (the refit and the backfill below). The maths is
``annotation.agreement.stored_figures``'s, which the tests hold the database to.

PostgreSQL only; on SQLite (the demo) the tables are written by the refit task alone.
"""

# The SQL is built from this file's constants only.
# ruff: noqa: S608

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

MACHINES = (
    "SELECT ug.user_id FROM {groups} ug JOIN auth_group g ON g.id = ug.group_id "
    "WHERE g.name = 'Machine judge'"
)
COUNTS = ", ".join(
    f"count(*) FILTER (WHERE v.choice = '{c}') AS n{k}"
    for k, c in (("a", "a"), ("b", "b"), ("t", "tie"), ("x", "both_bad"))
)
FIGURES = """
    WITH votes AS (
        SELECT j.comparison_id, c.project_id, j.choice, f.log_a, f.log_b, f.log_tie, f.log_both_bad
        FROM annotation_judgement j
        JOIN annotation_comparison c ON c.id = j.comparison_id
        LEFT JOIN annotation_annotatorconfusion f ON f.project_id = c.project_id
             AND f.annotator_id = j.annotator_id AND f.said = j.choice
        WHERE {where} AND j.annotator_id NOT IN ({machines})
    ), tally AS (
        SELECT v.comparison_id, v.project_id, count(*) AS n, {counts},
               coalesce(sum(v.log_a), 0) AS sa, coalesce(sum(v.log_b), 0) AS sb,
               coalesce(sum(v.log_tie), 0) AS st, coalesce(sum(v.log_both_bad), 0) AS sx
        FROM votes v GROUP BY v.comparison_id, v.project_id
    ), scored AS (
        SELECT t.comparison_id, t.project_id, t.n, t.na, t.nb, t.nt, t.nx,
               t.sa + coalesce(fit.log_prior_a, 0) AS la, t.sb + coalesce(fit.log_prior_b, 0) AS lb,
               t.st + coalesce(fit.log_prior_tie, 0) AS lt,
               t.sx + coalesce(fit.log_prior_both_bad, 0) AS lx
        FROM tally t LEFT JOIN annotation_consensusfit fit ON fit.project_id = t.project_id
    ), shifted AS (
        SELECT s.*, {exps}
        FROM scored s
    ), posterior AS (
        SELECT comparison_id, project_id, n, na, nb, nt, nx,
               ea / (ea + eb + et + ex) AS pa, eb / (ea + eb + et + ex) AS pb,
               et / (ea + eb + et + ex) AS pt, ex / (ea + eb + et + ex) AS px
        FROM shifted
    ), tops AS (
        SELECT p.*, greatest(na, nb, nt, nx) AS top,
               greatest(least(na, nb), least(na, nt), least(na, nx), least(nb, nt), least(nb, nx),
                        least(nt, nx)) AS second,
               greatest(pa, pb, pt, px) AS ptop
        FROM posterior p
    ), leaders AS (
        SELECT t.*,
               (na = top)::int + (nb = top)::int + (nt = top)::int + (nx = top)::int AS n_top,
               (pa = ptop)::int + (pb = ptop)::int + (pt = ptop)::int + (px = ptop)::int AS p_top
        FROM tops t
    )
    SELECT comparison_id, project_id, n,
           (na > 0)::int + (nb > 0)::int + (nt > 0)::int + (nx > 0)::int,
           CASE WHEN n_top > 1 THEN '' WHEN na = top THEN 'a' WHEN nb = top THEN 'b'
                WHEN nt = top THEN 'tie' ELSE 'both_bad' END,
           top::float8 / n - second::float8 / n,
           n_top > 1,
           CASE WHEN p_top > 1 THEN '' WHEN pa = ptop THEN 'a' WHEN pb = ptop THEN 'b'
                WHEN pt = ptop THEN 'tie' ELSE 'both_bad' END,
           CASE WHEN p_top > 1 THEN 0 WHEN pa = ptop THEN pa - pb WHEN pb = ptop THEN pb - pa
                ELSE 0 END,
           pa, pb, pt, px
    FROM leaders
"""
# exp of each log score less the top one, floored at -700 (PostgreSQL refuses an exp that
# underflows to 0; agreement.posterior_given_fit floors the same way).
EXPS = ", ".join(
    f"exp(greatest(l{k} - greatest(la, lb, lt, lx), -700)) AS e{k}" for k in ("a", "b", "t", "x")
)
COLUMNS = (
    "comparison_id, project_id, n_votes, n_choices, majority_choice, majority_margin, split, "
    "ds_choice, ds_margin, p_a, p_b, p_tie, p_both_bad"
)
UPSERT = (
    f"INSERT INTO annotation_storedconsensus ({COLUMNS}) {{figures}} "  # nosec B608 (constant column names)
    "ON CONFLICT (comparison_id) DO UPDATE SET "
    + ", ".join(f"{c} = EXCLUDED.{c}" for c in COLUMNS.split(", ")[1:])
)
PRUNE = (
    "DELETE FROM annotation_storedconsensus s WHERE {where} AND NOT EXISTS (SELECT 1 FROM "
    "annotation_judgement j WHERE j.comparison_id = s.comparison_id "
    "AND j.annotator_id NOT IN ({machines}))"
)


def _refresh(where_votes: str, where_rows: str, machines: str) -> str:
    figures = FIGURES.format(where=where_votes, machines=machines, counts=COUNTS, exps=EXPS)
    prune = PRUNE.format(where=where_rows, machines=machines)
    return f"{prune}; {UPSERT.format(figures=figures)};"


def _statements(groups: str) -> list[str]:
    machines = MACHINES.format(groups=groups)
    by_ids = _refresh("j.comparison_id = ANY(ids)", "s.comparison_id = ANY(ids)", machines)
    by_project = _refresh("c.project_id = pid", "s.project_id = pid", machines)
    statements = [
        f"CREATE FUNCTION annotation_consensus_refresh(ids bigint[]) RETURNS void "
        f"LANGUAGE sql AS $$ {by_ids} $$",
        f"CREATE FUNCTION annotation_consensus_refresh_project(pid bigint) RETURNS void "
        f"LANGUAGE sql AS $$ {by_project} $$",
    ]
    for name, source in (
        ("new", "SELECT comparison_id FROM new_judgements"),
        ("old", "SELECT comparison_id FROM old_judgements"),
        ("both", "SELECT comparison_id FROM old_judgements UNION "
                 "SELECT comparison_id FROM new_judgements"),
    ):  # fmt: skip
        statements.append(
            f"CREATE FUNCTION annotation_judgement_consensus_{name}() RETURNS trigger "  # nosec B608 (constant sources)
            f"LANGUAGE plpgsql AS $$ BEGIN PERFORM annotation_consensus_refresh("
            f"ARRAY(SELECT DISTINCT t.comparison_id FROM ({source}) t)); RETURN NULL; END $$"
        )
    statements += [
        "CREATE TRIGGER judgement_consensus_inserted AFTER INSERT ON annotation_judgement "
        "REFERENCING NEW TABLE AS new_judgements FOR EACH STATEMENT "
        "EXECUTE FUNCTION annotation_judgement_consensus_new()",
        "CREATE TRIGGER judgement_consensus_deleted AFTER DELETE ON annotation_judgement "
        "REFERENCING OLD TABLE AS old_judgements FOR EACH STATEMENT "
        "EXECUTE FUNCTION annotation_judgement_consensus_old()",
        "CREATE TRIGGER judgement_consensus_updated AFTER UPDATE ON annotation_judgement "
        "REFERENCING OLD TABLE AS old_judgements NEW TABLE AS new_judgements FOR EACH STATEMENT "
        "EXECUTE FUNCTION annotation_judgement_consensus_both()",
        # the backfill: every project's majority figures (Dawid-Skene waits for its first fit)
        "SELECT annotation_consensus_refresh_project(id) FROM annotation_project",
    ]
    return statements


DROP = [
    "DROP TRIGGER IF EXISTS judgement_consensus_updated ON annotation_judgement",
    "DROP TRIGGER IF EXISTS judgement_consensus_deleted ON annotation_judgement",
    "DROP TRIGGER IF EXISTS judgement_consensus_inserted ON annotation_judgement",
    "DROP FUNCTION IF EXISTS annotation_judgement_consensus_both()",
    "DROP FUNCTION IF EXISTS annotation_judgement_consensus_old()",
    "DROP FUNCTION IF EXISTS annotation_judgement_consensus_new()",
    "DROP FUNCTION IF EXISTS annotation_consensus_refresh_project(bigint)",
    "DROP FUNCTION IF EXISTS annotation_consensus_refresh(bigint[])",
]


def create_triggers(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    user = apps.get_model(settings.AUTH_USER_MODEL)
    for statement in _statements(user.groups.through._meta.db_table):
        schema_editor.execute(statement)


def drop_triggers(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in DROP:
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0012_task_types_rating_ranking"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ConsensusFit",
            fields=[
                (
                    "project",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="consensus_fit",
                        serialize=False,
                        to="annotation.project",
                    ),
                ),
                ("log_prior_a", models.FloatField()),
                ("log_prior_b", models.FloatField()),
                ("log_prior_tie", models.FloatField()),
                ("log_prior_both_bad", models.FloatField()),
                (
                    "n_judgements",
                    models.PositiveIntegerField(
                        help_text="People's judgements the fit learnt from."
                    ),
                ),
                ("iterations", models.PositiveIntegerField()),
                ("log_likelihood", models.FloatField()),
                (
                    "fingerprint",
                    models.JSONField(
                        default=list,
                        help_text="The judgements' fingerprint when fitted (count, latest change).",
                    ),
                ),
                ("fitted_at", models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name="AnnotatorConfusion",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "said",
                    models.CharField(
                        choices=[
                            ("a", "Response A is better"),
                            ("b", "Response B is better"),
                            ("tie", "About the same"),
                            ("both_bad", "Both are bad"),
                        ],
                        max_length=8,
                    ),
                ),
                ("log_a", models.FloatField()),
                ("log_b", models.FloatField()),
                ("log_tie", models.FloatField()),
                ("log_both_bad", models.FloatField()),
                (
                    "annotator",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="annotation.project",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("project", "annotator", "said"), name="confusion_one_row_per_choice"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="StoredConsensus",
            fields=[
                (
                    "comparison",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="stored_consensus",
                        serialize=False,
                        to="annotation.comparison",
                    ),
                ),
                ("n_votes", models.PositiveIntegerField()),
                ("n_choices", models.PositiveSmallIntegerField()),
                (
                    "majority_choice",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("a", "Response A is better"),
                            ("b", "Response B is better"),
                            ("tie", "About the same"),
                            ("both_bad", "Both are bad"),
                        ],
                        max_length=8,
                    ),
                ),
                ("majority_margin", models.FloatField()),
                ("split", models.BooleanField()),
                (
                    "ds_choice",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("a", "Response A is better"),
                            ("b", "Response B is better"),
                            ("tie", "About the same"),
                            ("both_bad", "Both are bad"),
                        ],
                        max_length=8,
                    ),
                ),
                ("ds_margin", models.FloatField()),
                ("p_a", models.FloatField()),
                ("p_b", models.FloatField()),
                ("p_tie", models.FloatField()),
                ("p_both_bad", models.FloatField()),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="annotation.project",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["project", "ds_margin"], name="consensus_ds_margin"),
                    models.Index(
                        fields=["project", "n_votes", "n_choices"], name="consensus_votes"
                    ),
                    models.Index(
                        condition=models.Q(("split", True)),
                        fields=["project", "comparison"],
                        name="consensus_split",
                    ),
                ],
            },
        ),
        migrations.RunPython(create_triggers, drop_triggers),
    ]
