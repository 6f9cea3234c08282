"""Reads of rating and ranking items: the annotator's progress on the labelling screen, and the
project's items, answers and progress on the lead's pages (the project lists, Manage, and the
pairwise-only pages' notice)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Q

from annotation.models import Project, ProjectMembership, TaskAnswer, TaskItem, TaskLease
from common.roles import human_judgements, not_machine


@dataclass(frozen=True)
class ItemProgress:
    """``done``: items the annotator answered in the project; ``left``: items still short of
    annotators (gold items aside)."""

    done: int
    left: int


def item_progress(*, annotator: AbstractBaseUser, project: Project) -> ItemProgress:
    done = TaskLease.objects.filter(
        item__project=project, annotator=annotator, status=TaskLease.Status.DONE
    ).count()
    left = TaskItem.objects.filter(project=project, gold={}, taken__lt=project.overlap).count()
    return ItemProgress(done=done, left=left)


@dataclass(frozen=True)
class ItemsSummary:
    """A rating or ranking project's items at a glance: ``items`` (gold ones included) of which
    ``gold_items`` are gold; ``answers`` by people (first answers: repeats left out);
    ``complete``: items with all ``overlap`` answers (as a pairwise project counts its
    comparisons); ``answered_by_me``: the given annotator's answers (None without one)."""

    items: int
    gold_items: int
    answers: int
    complete: int
    answered_by_me: int | None = None

    @property
    def percent_complete(self) -> int:
        return round(100 * self.complete / self.items) if self.items else 0


def items_summary(*, project: Project, annotator: AbstractBaseUser | None = None) -> ItemsSummary:
    items = TaskItem.objects.filter(project=project)
    answers = human_judgements(TaskAnswer.objects.filter(item__project=project, repeat=False))
    people = Count("answers", filter=Q(answers__repeat=False) & not_machine("answers__annotator"))
    complete = items.annotate(n=people).filter(n__gte=project.overlap).count()
    return ItemsSummary(
        items=items.count(),
        gold_items=items.exclude(gold={}).count(),
        answers=answers.count(),
        complete=complete,
        answered_by_me=answers.filter(annotator=annotator).count() if annotator else None,
    )


def item_annotator_progress(*, project: Project) -> list[dict[str, object]]:
    """Per annotator member (reviewers left out), as ``annotator_progress`` gives for pairs:
    ``answers`` (first answers: repeats left out), ``skipped`` items, ``median_ms`` per item."""
    annotators = project.memberships.filter(role=ProjectMembership.Role.ANNOTATOR)
    members = project.members.filter(pk__in=annotators.values("user_id"))
    rows = []
    for member in human_judgements(members, "pk").order_by("username"):
        answered = TaskAnswer.objects.filter(item__project=project, annotator=member, repeat=False)
        times = sorted(t for t in answered.values_list("elapsed_ms", flat=True) if t is not None)
        skipped = TaskLease.objects.filter(
            item__project=project, annotator=member, status=TaskLease.Status.SKIPPED
        )
        rows.append(
            {
                "username": member.get_username(),
                "active": member.is_active,
                "answers": answered.count(),
                "skipped": skipped.count(),
                "median_ms": statistics.median(times) if times else None,
            }
        )
    return rows


def task_answer_own(
    *, annotator: AbstractBaseUser, project: Project, answer_id: int
) -> TaskAnswer | None:
    """The annotator's answer ``answer_id`` in ``project`` with its item's prompt, else None."""
    return (
        TaskAnswer.objects.select_related("item__prompt", "item__project")
        .filter(pk=answer_id, annotator=annotator, item__project=project)
        .first()
    )


def answer_screen(answer: TaskAnswer) -> list[dict[str, Any]]:
    """An answer's responses in the screen order it was made in, each with the rank it gave
    (rankings; None for ratings): [{"slot": j, "position": p, "response": Response, "rank": r}]."""
    responses = {
        row.position: row.response
        for row in answer.item.positions.select_related("response").order_by("position")
    }
    ranks = list(answer.ranks or [])
    return [
        {
            "slot": slot,
            "position": position,
            "response": responses[position],
            "rank": ranks[position] if position < len(ranks) else None,
        }
        for slot, position in enumerate(answer.order)
    ]
