"""Reads of rating and ranking items for the labelling screen: the annotator's progress."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser

from annotation.models import Project, TaskItem, TaskLease


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
