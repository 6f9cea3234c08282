"""Rating and ranking projects with items, for the work-queue, export and browser tests."""

from __future__ import annotations

from annotation.models import Project, TaskItem, TaskType
from annotation.services.task_items import task_items_create
from annotation.work_queue import items as queue
from common.roles import ANNOTATOR
from tests.factories import ProjectFactory, UserFactory

ASPECTS = ["helpfulness", "correctness"]


def rating_project(n: int = 3, *, thumbs: bool = True, **fields) -> tuple[Project, list[TaskItem]]:
    """A rating project (two aspects, thumbs unless ``thumbs=False``) with ``n`` items."""
    fields = {"overlap": 2, "gold_every": 0, "repeat_every": 0, **fields}
    project = ProjectFactory(
        task_type=TaskType.RATING, rating_aspects=ASPECTS, rating_thumbs=thumbs, **fields
    )
    rows = [
        {"prompt": f"Question {i}?", "responses": [f"Answer {i}."], "models": ["m"]}
        for i in range(n)
    ]
    task_items_create(project=project, rows=rows)
    return project, list(TaskItem.objects.filter(project=project).order_by("queue_position"))


def ranking_project(n: int = 3, k: int = 4, **fields) -> tuple[Project, list[TaskItem]]:
    """A ranking project with ``n`` items of ``k`` responses ("Reply i.j", stored position j)."""
    fields = {"overlap": 2, "gold_every": 0, "repeat_every": 0, "allow_ties": False, **fields}
    project = ProjectFactory(task_type=TaskType.RANKING, **fields)
    rows = [
        {"prompt": f"Prompt {i}?", "responses": [f"Reply {i}.{j}" for j in range(k)]}
        for i in range(n)
    ]
    task_items_create(project=project, rows=rows)
    return project, list(TaskItem.objects.filter(project=project).order_by("queue_position"))


def annotators(project: Project, n: int) -> list:
    users = [UserFactory(role=ANNOTATOR) for _ in range(n)]
    project.members.add(*users)
    return users


def answered_ranking(n: int = 2, k: int = 4) -> Project:
    """A ranking project of ``n`` items of ``k`` responses, each ranked by 3 annotators (their
    screens' orders differ, so the consensus has no ties)."""
    project, _ = ranking_project(n, k=k, overlap=3)
    screens = ([1, 2, 3, 4], [2, 1, 3, 4], [1, 2, 4, 3])
    for user, screen in zip(annotators(project, 3), screens, strict=True):
        while (lease := queue.item_claim(annotator=user, project=project)) is not None:
            ranks = [str(r) for r in screen[:k]]
            queue.item_submit(annotator=user, lease_id=lease.pk, answer={"ranks": ranks})
    return project


def answered_rating(n: int = 2) -> Project:
    """A rating project of ``n`` items, each answered by 3 annotators: helpfulness 5, 3, 4,
    correctness 4, 4, 1, thumbs up, up, down (so: label true, means 4.0 and 3.0)."""
    project, _ = rating_project(n, overlap=3)
    answers = [("5", "4", "up"), ("3", "4", "up"), ("4", "1", "down")]
    for user, (h, c, t) in zip(annotators(project, 3), answers, strict=True):
        while (lease := queue.item_claim(annotator=user, project=project)) is not None:
            answer = {"scores": {"helpfulness": h, "correctness": c}, "thumbs": t}
            queue.item_submit(annotator=user, lease_id=lease.pk, answer=answer)
    return project
