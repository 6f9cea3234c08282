"""Reads of projects: the projects a user sees with their progress, membership, the lead's page."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection
from django.db.models import Count, Exists, F, OuterRef, QuerySet

from annotation.models import (
    Assignment,
    Comparison,
    Judgement,
    Project,
    ProjectMembership,
    QueueOrder,
    TaskType,
)
from annotation.selectors.labelling import BATCH_SIZE
from annotation.selectors.task_items import items_summary
from common.roles import (
    human_judgements,
    machine_account_ids,
    not_machine,
    remember_roles,
    role_flags_sql,
)

# Comparisons' judgements by people (machine judges never fill a comparison's overlap).
_HUMAN_JUDGEMENTS = Count("judgements", filter=not_machine("judgements__annotator"))


@dataclass(frozen=True)
class ProjectProgress:
    """Progress of one project in its own units: ``units`` (comparisons of a pairwise project,
    items of a rating or ranking one; gold items included), ``answers`` (people's judgements or
    answers; repeats left out), ``complete`` (units with all ``overlap`` of them) and, for an
    annotator's view, how many the annotator has answered."""

    project: Project
    units: int
    answers: int
    complete: int
    answered_by_me: int | None = None

    @property
    def pairwise(self) -> bool:
        return self.project.task_type == TaskType.PAIRWISE

    @property
    def unit_name(self) -> str:
        return "comparisons" if self.pairwise else "items"

    @property
    def answer_name(self) -> str:
        return "judgements" if self.pairwise else "answers"

    @property
    def percent_complete(self) -> int:
        return round(100 * self.complete / self.units) if self.units else 0


def _pairwise_progress(project: Project, annotator: AbstractBaseUser | None) -> ProjectProgress:
    comparisons = Comparison.objects.filter(project=project)
    complete = (
        comparisons.annotate(n=_HUMAN_JUDGEMENTS).filter(n__gte=F("project__overlap")).count()
    )
    judgements = human_judgements(Judgement.objects.filter(comparison__project=project))
    return ProjectProgress(
        project=project,
        units=comparisons.count(),
        answers=judgements.count(),
        complete=complete,
        answered_by_me=judgements.filter(annotator=annotator).count() if annotator else None,
    )


def _item_progress(project: Project, annotator: AbstractBaseUser | None) -> ProjectProgress:
    summary = items_summary(project=project, annotator=annotator)
    return ProjectProgress(
        project=project,
        units=summary.items,
        answers=summary.answers,
        complete=summary.complete,
        answered_by_me=summary.answered_by_me,
    )


def _progress(projects, annotator: AbstractBaseUser | None) -> list[ProjectProgress]:
    return [
        _pairwise_progress(project, annotator)
        if project.task_type == TaskType.PAIRWISE
        else _item_progress(project, annotator)
        for project in projects
    ]


def projects_for_annotator(*, annotator: AbstractBaseUser) -> list[ProjectProgress]:
    """The projects the annotator labels in (archived ones left out), with overall and personal
    progress."""
    projects = Project.objects.filter(
        memberships__user=annotator, memberships__role="annotator", archived_at__isnull=True
    ).order_by("name")
    return _progress(projects, annotator)


def projects_overview() -> list[ProjectProgress]:
    """Every project with its progress (for project leads and reviewers)."""
    return _progress(Project.objects.order_by("name"), None)


def member_project(*, user: AbstractBaseUser, slug: str) -> Project | None:
    """The project ``slug`` if ``user`` is one of its members, else None. The user's roles come in
    the same query and are cached on ``user`` (``has_role`` and the navigation ask no more).

    Hand-written SQL: it runs on every labelling request, where building it through the ORM (with
    the role subqueries) cost more CPU than the rest of the membership check.
    """
    members = Project._meta.get_field("members")
    quote = connection.ops.quote_name
    roles, role_params = role_flags_sql(user.pk)
    sql = (
        f"SELECT p.*, {roles} FROM {quote(Project._meta.db_table)} p "  # noqa: S608  # nosec B608
        f"WHERE p.slug = %s AND EXISTS (SELECT 1 FROM {quote(members.m2m_db_table())} m "
        f"WHERE m.{quote(members.m2m_column_name())} = p.{quote(Project._meta.pk.column)} "
        f"AND m.{quote(members.m2m_reverse_name())} = %s)"
    )  # names from the models' metadata; every value is a parameter
    project = next(iter(Project.objects.raw(sql, [*role_params, slug, user.pk])), None)
    if project is not None:
        remember_roles(user, project)
    return project


def annotator_progress(*, project: Project) -> list[dict[str, object]]:
    """Per annotator member of the project (reviewer members label nothing: left out): judgements,
    skips, median milliseconds per pair (the lead's page; milliseconds as on the agreement
    dashboard and the item page, the median as numpy's)."""
    rows = []
    annotators = project.memberships.filter(role=ProjectMembership.Role.ANNOTATOR)
    members = project.members.filter(pk__in=annotators.values("user_id"))
    for member in human_judgements(members, "pk").order_by("username"):
        judged = Judgement.objects.filter(comparison__project=project, annotator=member)
        times = sorted(t for t in judged.values_list("elapsed_ms", flat=True) if t is not None)
        rows.append(
            {
                "username": member.get_username(),
                "active": member.is_active,
                "judgements": judged.count(),
                "skipped": Assignment.objects.filter(
                    comparison__project=project,
                    annotator=member,
                    status=Assignment.Status.SKIPPED,
                ).count(),
                "median_ms": statistics.median(times) if times else None,
            }
        )
    return rows


@dataclass(frozen=True)
class BatchProgress:
    """One batch of the project's queue: its number (1-based), pairs, pairs with all judgements."""

    number: int
    comparisons: int
    complete: int
    judgements: int

    @property
    def percent(self) -> int:
        return round(100 * self.complete / self.comparisons) if self.comparisons else 0


def batch_progress(*, project: Project, batch_size: int = BATCH_SIZE) -> list[BatchProgress]:
    """Progress per batch: the queue (queue position, then id) cut into blocks of ``batch_size``."""
    counts = (
        Comparison.objects.filter(project=project, gold="")
        .order_by("queue_position", "pk")
        .annotate(n=_HUMAN_JUDGEMENTS)
        .values_list("n", "target_overlap")
    )
    batches: list[BatchProgress] = []
    block: list[
        tuple[int, int]
    ] = []  # (judgements, judgements needed: overlap reduction's or the project's)
    for row in [*counts.iterator(chunk_size=5000), None]:
        if row is not None:
            block.append((row[0], row[1] or project.overlap))
        if block and (len(block) == batch_size or row is None):
            batches.append(
                BatchProgress(
                    number=len(batches) + 1,
                    comparisons=len(block),
                    complete=sum(1 for k, needed in block if k >= needed),
                    judgements=sum(k for k, _ in block),
                )
            )
            block = []
    return batches


def suggestion_judges(*, project: Project | None) -> QuerySet:
    """The accounts a lead may choose as the project's suggestion judge: machine accounts (the
    MACHINE_JUDGE group) with at least one judgement in ``project``, by username; none for a
    project not saved yet. People are never offered."""
    users = get_user_model().objects.filter(pk__in=machine_account_ids())
    if project is None or project.pk is None:
        return users.none()
    judged = Judgement.objects.filter(annotator=OuterRef("pk"), comparison__project=project)
    return users.filter(Exists(judged)).order_by("username")


# The learning curve's drawing area in SVG units (viewBox), with margins for the axis labels.
CURVE_WIDTH, CURVE_HEIGHT, CURVE_MARGIN = 480, 200, 36


@dataclass(frozen=True)
class ActiveLearningPanel:
    """What the project page shows of active preference collection: the queue's order in words,
    its exploration share, overlap reduction, continuous reward modelling, and the learning curve
    (accuracy against labels, one point per retrain) as SVG coordinates: ``points`` [(x, y, labels,
    accuracy)], ``polyline`` "x,y x,y ...", axis ticks ``y_ticks`` [(y, label)] and ``x_ticks``."""

    queue_order: str
    acquisition: bool
    exploration_percent: int
    overlap_reduction: bool
    continuous_rm: bool
    every: int
    ensemble_size: int
    points: list[tuple[float, float, int, float]]
    polyline: str
    x_ticks: list[tuple[float, str]]
    y_ticks: list[tuple[float, str]]
    width: int = CURVE_WIDTH
    height: int = CURVE_HEIGHT


def active_learning_panel(*, project: Project) -> ActiveLearningPanel:
    """The project's active-learning settings and its learning curve, drawn on [0, 1] accuracy
    against 0..max labels (server-rendered SVG)."""
    rows = list(
        project.learning_curve.order_by("labels", "created_at").values_list("labels", "accuracy")
    )
    inner_w, inner_h = CURVE_WIDTH - 2 * CURVE_MARGIN, CURVE_HEIGHT - 2 * CURVE_MARGIN
    top = max((labels for labels, _ in rows), default=1) or 1

    def x(labels: float) -> float:
        return round(CURVE_MARGIN + inner_w * labels / top, 1)

    def y(accuracy: float) -> float:
        return round(CURVE_MARGIN + inner_h * (1 - accuracy), 1)

    points = [(x(labels), y(acc), labels, acc) for labels, acc in rows]
    return ActiveLearningPanel(
        queue_order=QueueOrder(project.queue_order).label,
        acquisition=project.queue_order != QueueOrder.BALANCED,
        exploration_percent=round(100 * project.exploration_share),
        overlap_reduction=project.overlap_reduction,
        continuous_rm=project.continuous_rm,
        every=project.continuous_rm_every,
        ensemble_size=project.continuous_rm_ensemble_size,
        points=points,
        polyline=" ".join(f"{px},{py}" for px, py, _, _ in points),
        x_ticks=[(x(v), str(v)) for v in sorted({0, top // 2, top})],
        y_ticks=[(y(v), f"{v:.1f}") for v in (0.0, 0.5, 1.0)],
    )
