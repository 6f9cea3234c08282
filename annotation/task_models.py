"""Rating and ranking items: one prompt with its responses (one for a rating, 3-8 for a ranking),
the leases of the shared work queue (annotation.work_queue) and the annotators' answers.

A pairwise project keeps its Comparison / Assignment / Judgement tables; these tables are the
other task types'. Every lease and answer stores the display order the annotator saw: ``order[j]``
is the stored position (0-based, ``TaskItemResponse.position``) of the response shown in screen
slot ``j``. Answers are stored in stored terms (``ranks[p]``: the rank, 1 = best, of the response
at stored position ``p``), so the screen's order can be audited for position bias and never leaks
into agreement or export.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class TaskItem(models.Model):
    """One rating or ranking item: a prompt and its responses in stored order (``positions``).

    ``gold``: the known answer of a gold item ({} for an ordinary item), in stored terms:
    ``{"scores": {aspect: int}, "thumbs": bool}`` for a rating, ``{"ranks": [int, ...]}`` for a
    ranking. ``taken`` = active normal leases + answers (never above the project's overlap);
    ``served``: how many times it was handed out (its display-order rotation).
    """

    project = models.ForeignKey(
        "annotation.Project", on_delete=models.CASCADE, related_name="task_items"
    )
    prompt = models.ForeignKey(
        "annotation.Prompt", on_delete=models.CASCADE, related_name="task_items"
    )
    gold = models.JSONField(default=dict, blank=True)
    external_id = models.CharField(max_length=200, blank=True)
    content_hash = models.CharField(max_length=64)
    metadata = models.JSONField(default=dict, blank=True)
    queue_position = models.BigIntegerField(default=0)
    taken = models.PositiveSmallIntegerField(default=0)
    served = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "content_hash"], name="task_item_unique_content"
            )
        ]
        indexes = [
            models.Index(fields=["project", "queue_position", "id"], name="task_item_queue")
        ]

    def __str__(self) -> str:
        return f"item {self.pk} of project {self.project_id}"


class TaskItemResponse(models.Model):
    """The response at stored position ``position`` (0-based) of an item."""

    item = models.ForeignKey(TaskItem, on_delete=models.CASCADE, related_name="positions")
    response = models.ForeignKey("annotation.Response", on_delete=models.PROTECT, related_name="+")
    position = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["position"]
        constraints = [
            models.UniqueConstraint(fields=["item", "position"], name="task_item_position_once")
        ]


class TaskLease(models.Model):
    """An item handed to an annotator (the work queue's claim), with the display order shown.

    ``kind``: normal (counted against the overlap), gold (everyone, outside the overlap) or repeat
    (an item the annotator answered a while ago, shown again in another order)."""

    class Kind(models.TextChoices):
        NORMAL = "normal", "Normal"
        GOLD = "gold", "Gold item"
        REPEAT = "repeat", "Repeat"

    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        DONE = "done", "Answered"
        SKIPPED = "skipped", "Skipped"

    item = models.ForeignKey(TaskItem, on_delete=models.CASCADE, related_name="leases")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="task_leases"
    )
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.NORMAL)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.ACTIVE)
    order = models.JSONField(help_text="Stored positions in screen order.")
    claimed_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["item", "annotator", "kind"], name="task_lease_once_per_kind"
            )
        ]
        indexes = [models.Index(fields=["status", "expires_at"], name="task_lease_expiry")]

    def __str__(self) -> str:
        return f"{self.annotator} <- item {self.item_id} ({self.kind}, {self.status})"


class TaskAnswer(models.Model):
    """An annotator's answer on an item, in stored terms, with the display order they saw.

    Rating: ``scores`` {aspect: 1-5} and/or ``thumbs`` (True = up). Ranking: ``ranks`` [K], the rank
    of the response at each stored position (1 = best; equal ranks are ties). ``repeat``: the second
    answer of a repeat (kept apart, as pairwise keeps RepeatJudgement apart)."""

    item = models.ForeignKey(TaskItem, on_delete=models.CASCADE, related_name="answers")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="task_answers"
    )
    repeat = models.BooleanField(default=False)
    gold = models.BooleanField(default=False, help_text="Answered as a gold item.")
    order = models.JSONField(help_text="Stored positions in the screen order shown.")
    scores = models.JSONField(default=dict, blank=True)
    thumbs = models.BooleanField(null=True, blank=True)
    ranks = models.JSONField(default=list, blank=True)
    rationale = models.TextField(blank=True)
    elapsed_ms = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["item", "annotator", "repeat"], name="task_answer_one_per_annotator"
            )
        ]

    def __str__(self) -> str:
        return f"{self.annotator} on item {self.item_id}"
