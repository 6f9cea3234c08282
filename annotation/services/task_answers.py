"""Writes of an annotator's own rating or ranking answer after it was submitted: the item screens'
undo (change the last answer of the session). The first answer is the work queue's
(``annotation.work_queue.items.item_submit``); this only changes what the answer says."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from annotation.models import TaskAnswer
from annotation.work_queue.plugins import AnswerError
from annotation.work_queue.registry import task_type_of

MAX_RATIONALE = 10_000


def task_answer_edit(
    *,
    annotator: AbstractBaseUser,
    answer_id: int,
    answer: Mapping[str, Any],
    rationale: str = "",
) -> TaskAnswer:
    """Change the annotator's own answer ``answer_id`` to ``answer`` (screen terms, as the screen
    posts them), validated by the project's task type against the display order the answer was
    made in (kept, as are its lease, its time and whether it was gold or a repeat). AnswerError
    (nothing changed) for an answer that is not theirs or one the type refuses."""
    with transaction.atomic():
        stored = (
            TaskAnswer.objects.select_for_update(of=("self",))
            .select_related("item__project")
            .filter(pk=answer_id, annotator=annotator)
            .first()
        )
        if stored is None:
            raise AnswerError("no such answer of yours")
        project = stored.item.project
        fields = task_type_of(project).validate(project, answer, list(stored.order))
        stored.scores = fields["scores"]
        stored.thumbs = fields["thumbs"]
        stored.ranks = fields["ranks"]
        stored.rationale = rationale[:MAX_RATIONALE]
        stored.save(update_fields=["scores", "thumbs", "ranks", "rationale", "updated_at"])
    return stored
