"""Archiving a rating or ranking project, and pausing or removing one of its annotators, release
the item leases held (as they release pairs' assignments): the lease is gone, its item's overlap
slot is free again, and the audit event counts it."""

from __future__ import annotations

import pytest

from annotation.models import ProjectEvent, TaskItem, TaskLease
from annotation.services.projects import member_pause, member_remove, project_archive
from annotation.work_queue import items as queue
from tests.helpers.task_items import annotators, ranking_project

pytestmark = pytest.mark.django_db


def _held(n_annotators: int = 2):
    """A ranking project whose annotators each hold one item (active normal leases)."""
    project, _ = ranking_project(3, overlap=1)
    people = annotators(project, n_annotators)
    for person in people:
        assert queue.item_claim(annotator=person, project=project) is not None
    assert sum(TaskItem.objects.filter(project=project).values_list("taken", flat=True)) == 2
    return project, people


def _active(project) -> int:
    return TaskLease.objects.filter(item__project=project, status="active").count()


def test_archiving_an_item_project_releases_every_item_lease(ml_engineer):
    project, _ = _held()
    project_archive(project=project, actor=ml_engineer)
    assert _active(project) == 0
    assert set(TaskItem.objects.filter(project=project).values_list("taken", flat=True)) == {0}
    event = ProjectEvent.objects.get(project=project, kind=ProjectEvent.Kind.ARCHIVED)
    assert event.changes == {"released_leases": 2}


@pytest.mark.parametrize("service", [member_pause, member_remove])
def test_pausing_or_removing_an_annotator_releases_only_their_item_lease(ml_engineer, service):
    project, (ann, bob) = _held()
    assert service(project=project, actor=ml_engineer, username=ann.username) == 1
    assert list(
        TaskLease.objects.filter(item__project=project).values_list("annotator", flat=True)
    ) == [bob.pk]
    assert sum(TaskItem.objects.filter(project=project).values_list("taken", flat=True)) == 1
