"""Rating and ranking projects with items, for the work-queue, export and browser tests."""

from __future__ import annotations

from annotation.models import Project, TaskItem, TaskType
from annotation.services.task_items import task_items_create
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
