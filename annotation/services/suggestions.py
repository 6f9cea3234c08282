"""Which suggestion the labelling screen shows and records (a project's suggestion judge, issue 19).

A project may name a model judge's machine account (``Project.suggestion_judge``); its verdict on a
pair is pre-selected on the screen and stored with the judgement as ``suggested_choice``. Both reads
are subqueries inside statements the labelling loop already makes (the screen's comparison query,
the judgement's INSERT), so suggestions cost no extra round trip.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import OuterRef, Subquery

from annotation.models import Assignment, Choice, Judgement, Project


def suggests(project: Project, kind: str) -> bool:
    """Whether a pair of ``kind`` gets the project's suggestion: when the project names a
    suggestion judge, on normal pairs and gold items (a gold item without one would stand out),
    never on swap repeats (they measure the annotator's own consistency)."""
    return project.suggestion_judge_id is not None and kind != Assignment.Kind.REPEAT


def offered_verdicts(project: Project) -> list[str]:
    """The verdicts the project's screen offers: a judge's tie is no suggestion where there is no
    tie button (nor "both bad" without its button), so it is neither shown nor recorded."""
    offered = [Choice.A.value, Choice.B.value]
    if project.allow_ties:
        offered.append(Choice.TIE.value)
    if project.allow_both_bad:
        offered.append(Choice.BOTH_BAD.value)
    return offered


def suggestion_columns(project: Project) -> dict[str, Subquery]:
    """Annotations for a Comparison queryset: ``suggested`` (the suggestion judge's verdict, if the
    screen offers it; None otherwise) and ``suggested_by`` (the judge account's username)."""
    verdict = Judgement.objects.filter(
        comparison=OuterRef("pk"),
        annotator_id=project.suggestion_judge_id,
        choice__in=offered_verdicts(project),
    ).values("choice")[:1]
    user = get_user_model()
    judge = user.objects.filter(pk=project.suggestion_judge_id).values(user.USERNAME_FIELD)[:1]
    return {"suggested": Subquery(verdict), "suggested_by": Subquery(judge)}


def suggestion_sql(judgement_table: str, n_choices: int) -> str:
    """A scalar subquery for an INSERT into the (quoted) ``judgement_table``: the judge's verdict
    on the comparison if it is one of ``n_choices`` given verdicts, else ''. Parameters: comparison
    id, judge account id, then the verdicts."""
    quote = connection.ops.quote_name
    allowed = ", ".join(["%s"] * n_choices)
    return (
        f"COALESCE((SELECT s.{quote('choice')} FROM {judgement_table} s "  # noqa: S608  # nosec B608
        f"WHERE s.{quote('comparison_id')} = %s AND s.{quote('annotator_id')} = %s "
        f"AND s.{quote('choice')} IN ({allowed}) LIMIT 1), '')"
    )
