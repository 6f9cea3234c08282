"""Reads for the project lead's settings and people pages: members with their activity, the audit log."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.paginator import Page, Paginator
from django.db.models import Count, Max, Q
from django.utils import timezone

from annotation.models import (
    Judgement,
    Project,
    ProjectEvent,
    ProjectMembership,
    TaskAnswer,
    TaskType,
)
from annotation.selectors.agreement import cached_dashboard
from common.roles import human_judgements

EVENTS_PER_PAGE = 25
RECENT_DAYS = 7


@dataclass(frozen=True)
class MemberActivity:
    """One member of a project and what they did in it.

    ``judgements``: all their judgements in the project (imported ones included; a rating or
    ranking project's: their answers, repeats left out); ``recent``: those
    made in the last RECENT_DAYS days; ``last_active``: their latest judgement (made or edited),
    None if none; ``agreement``: their leave-one-out agreement with the other annotators' consensus
    (0-1) from the last computed agreement dashboard, None when it was never computed or does not
    include them; ``invite_pending``: the account has no password yet.
    """

    username: str
    email: str
    role: str
    paused_at: datetime | None
    added_at: datetime
    judgements: int
    recent: int
    last_active: datetime | None
    agreement: float | None
    invite_pending: bool


def _dashboard_agreement(project: Project) -> dict[str, float | None]:
    """Annotator name -> leave-one-out agreement, from the cached dashboard (no computation)."""
    payload = cached_dashboard(project=project) or {}
    rows = payload.get("summary", {}).get("annotators", [])
    return {row["annotator"]: row.get("loo_agreement") for row in rows}


def project_members(*, project: Project) -> list[MemberActivity]:
    """The project's members (annotators first, then reviewers; by username) with their activity.
    Two queries whatever the number of members, plus one cache read."""
    memberships = list(
        human_judgements(ProjectMembership.objects.filter(project=project), "user")
        .select_related("user")
        .order_by("role", "user__username")
    )
    since = timezone.now() - timedelta(days=RECENT_DAYS)
    if project.task_type == TaskType.PAIRWISE:
        work = Judgement.objects.filter(comparison__project=project)
    else:
        work = TaskAnswer.objects.filter(item__project=project, repeat=False)
    activity = {
        row["annotator"]: row
        for row in work.filter(annotator__in=[m.user_id for m in memberships])
        .values("annotator")
        .annotate(
            total=Count("id"),
            recent=Count("id", filter=Q(created_at__gte=since)),
            last=Max("updated_at"),
        )
    }
    agreement = _dashboard_agreement(project)
    rows = []
    for m in memberships:
        act = activity.get(m.user_id, {})
        name = m.user.get_username()
        rows.append(
            MemberActivity(
                username=name,
                email=m.user.email,
                role=m.role,
                paused_at=m.paused_at,
                added_at=m.added_at,
                judgements=act.get("total", 0),
                recent=act.get("recent", 0),
                last_active=act.get("last"),
                agreement=agreement.get(name),
                invite_pending=not m.user.has_usable_password(),
            )
        )
    return rows


def project_events(*, project: Project, page: int | str | None = 1) -> Page:
    """One page (EVENTS_PER_PAGE rows, newest first) of the project's audit log; a page number out
    of range or not a number gives the nearest valid page."""
    events = ProjectEvent.objects.filter(project=project).select_related("actor").order_by("-id")
    return Paginator(events, EVENTS_PER_PAGE).get_page(page)
