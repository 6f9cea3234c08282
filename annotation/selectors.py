"""Reads of the annotation domain, shaped for pages and commands."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, F, Q

from annotation.models import Comparison, Judgement, Project


@dataclass(frozen=True)
class ProjectProgress:
    """Progress of one project: comparisons, judgements, comparisons with all ``overlap`` judgements,
    and (for an annotator's view) how many the annotator has judged."""

    project: Project
    comparisons: int
    judgements: int
    complete: int
    judged_by_me: int | None = None

    @property
    def percent_complete(self) -> int:
        return round(100 * self.complete / self.comparisons) if self.comparisons else 0


def _progress(projects, annotator: AbstractBaseUser | None) -> list[ProjectProgress]:
    rows = []
    for project in projects:
        comparisons = Comparison.objects.filter(project=project)
        complete = (
            comparisons.annotate(n=Count("judgements")).filter(n__gte=F("project__overlap")).count()
        )
        judgements = Judgement.objects.filter(comparison__project=project)
        rows.append(
            ProjectProgress(
                project=project,
                comparisons=comparisons.count(),
                judgements=judgements.count(),
                complete=complete,
                judged_by_me=(
                    judgements.filter(annotator=annotator).count() if annotator else None
                ),
            )
        )
    return rows


def projects_for_annotator(*, annotator: AbstractBaseUser) -> list[ProjectProgress]:
    """The projects the annotator is a member of, with overall and personal progress."""
    projects = Project.objects.filter(members=annotator).order_by("name")
    return _progress(projects, annotator)


def projects_overview() -> list[ProjectProgress]:
    """Every project with its progress (for project leads and reviewers)."""
    return _progress(Project.objects.order_by("name"), None)


def judgement_counts_by_choice(*, project: Project) -> dict[str, int]:
    """How often each choice was made in the project: {"a": n, "b": n, "tie": n, "both_bad": n}."""
    counts = Judgement.objects.filter(comparison__project=project).aggregate(
        **{choice: Count("id", filter=Q(choice=choice)) for choice in ("a", "b", "tie", "both_bad")}
    )
    return {key: value or 0 for key, value in counts.items()}
