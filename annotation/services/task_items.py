"""Writes of rating and ranking items outside the labelling loop: import (a file in one of
``annotation.formats.ITEM_READERS``' formats, or item rows) and gold answers.

An import is all or nothing: every record is read and checked first; one bad record refuses the
file (TaskImportError lists the first errors) and nothing is written. Items are identified in
their project by their ``id`` when the row has one, else by their content (prompt, responses,
models), so importing the same file twice adds nothing. Answers in the file become answers by
the named accounts (created inactive, as for pairwise imports) and count against the overlap.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import F, Max

from annotation import formats
from annotation.formats.base import RowError
from annotation.formats.containers import read_records
from annotation.formats.items import checked_item
from annotation.models import (
    Project,
    ProjectEvent,
    Prompt,
    Response,
    TaskAnswer,
    TaskItem,
    TaskItemResponse,
    TaskType,
)
from annotation.parsing import content_hash, response_hash
from annotation.services.import_rows import ImportCounts, annotators_for
from annotation.services.projects import rating_aspects_problem
from common.errors import ConcordError

MAX_IMPORT_BYTES = 2 << 30
MAX_ERRORS_SHOWN = 20


class TaskImportError(ConcordError):
    """A file or rows that cannot be imported as items (the message says why); nothing written."""


@dataclass
class TaskImportResult:
    """What an item import did."""

    items_created: int = 0
    items_existing: int = 0
    answers_created: int = 0
    answers_existing: int = 0
    annotators_created: int = 0


def item_key(row: dict[str, Any]) -> str:
    """An item's identity in its project: its id when the row has one, else its content."""
    if row["external_id"]:
        return content_hash(["item", row["external_id"]])
    return content_hash(["item", row["prompt"], row["responses"], row["models"]])


def task_rows_read(*, path: Path, format: str, task_type: str) -> list[dict[str, Any]]:
    """The item rows of the file at ``path`` read as ``format`` for ``task_type`` projects;
    TaskImportError with the first errors (record number, field, message) otherwise."""
    reader = formats.ITEM_READERS.get(format)
    if reader is None:
        raise TaskImportError(
            f"unknown item format {format!r}; expected one of {', '.join(formats.ITEM_READERS)}"
        )
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    try:
        for record in read_records(path, max_bytes=MAX_IMPORT_BYTES):
            where = f"{record.unit} {record.number}"
            if record.error is not None or record.data is None:
                errors.append(f"{where}: {record.error}")
                continue
            try:
                rows.extend(reader(record.data, task_type))
            except RowError as exc:
                errors.append(f"{where}: {exc}")
    except formats.SourceError as exc:
        raise TaskImportError(str(exc)) from exc
    if errors:
        shown = "; ".join(errors[:MAX_ERRORS_SHOWN])
        raise TaskImportError(f"{len(errors)} record(s) refused, nothing imported: {shown}")
    return rows


def _item_for(project: Project, row: dict[str, Any], position: int) -> tuple[TaskItem, bool]:
    key = item_key(row)
    found = TaskItem.objects.filter(project=project, content_hash=key).first()
    if found is not None:
        return found, False
    prompt, _ = Prompt.objects.get_or_create(
        project=project, content_hash=content_hash(row["prompt"]), defaults={"text": row["prompt"]}
    )
    item = TaskItem.objects.create(
        project=project,
        prompt=prompt,
        gold=row["gold"],
        external_id=row["external_id"][:200],
        content_hash=key,
        metadata=row["metadata"],
        queue_position=position,
    )
    for index, (text, model) in enumerate(zip(row["responses"], row["models"], strict=True)):
        response, _ = Response.objects.get_or_create(
            prompt=prompt,
            content_hash=response_hash(text, model),
            defaults={"text": text, "model_name": model},
        )
        TaskItemResponse.objects.create(item=item, response=response, position=index)
    return item, True


def _aspects_learnt(project: Project, rows: list[dict[str, Any]]) -> None:
    """A rating project without aspects takes those the file scores, in first-seen order."""
    if project.task_type != TaskType.RATING or project.rating_aspects:
        return
    seen: dict[str, None] = {}
    for row in rows:
        for answer in row["answers"]:
            seen.update(dict.fromkeys(answer["scores"]))
    if seen:
        project.rating_aspects = list(seen)
        project.save(update_fields=["rating_aspects"])


def task_items_create(*, project: Project, rows: list[dict[str, Any]]) -> TaskImportResult:
    """Store item rows (``annotation.formats.items.checked_item``'s shape, checked again here)
    and their answers in ``project``, in one transaction. TaskImportError (nothing written) for a
    pairwise project or a row that does not fit the project's task type."""
    if project.task_type == TaskType.PAIRWISE:
        raise TaskImportError(f"{project.slug} is a pairwise project; import pairs there")
    checked = []
    for number, row in enumerate(rows, start=1):
        try:
            checked.append(checked_item(row, project.task_type))
        except RowError as exc:
            raise TaskImportError(f"row {number}: {exc}; nothing imported") from exc
    result = TaskImportResult()
    with transaction.atomic():
        _aspects_learnt(project, checked)
        counts = ImportCounts()
        names = {a["annotator"] for row in checked for a in row["answers"]}
        annotators = annotators_for(project, names, counts)
        result.annotators_created = counts.annotators_created
        top = TaskItem.objects.filter(project=project).aggregate(top=Max("queue_position"))["top"]
        position = (top or 0) + 1
        for row in checked:
            item, created = _item_for(project, row, position)
            position += created
            result.items_created += created
            result.items_existing += not created
            added = 0
            for answer in row["answers"]:
                _, made = TaskAnswer.objects.get_or_create(
                    item=item,
                    annotator=annotators[answer["annotator"]],
                    repeat=False,
                    defaults={
                        "order": answer["order"],
                        "scores": answer["scores"],
                        "thumbs": answer["thumbs"],
                        "ranks": answer["ranks"],
                    },
                )
                added += made
                result.answers_created += made
                result.answers_existing += not made
            if added and not item.gold:
                TaskItem.objects.filter(pk=item.pk).update(taken=F("taken") + added)
    return result


def task_items_import(*, project: Project, path: Path, format: str) -> TaskImportResult:
    """Import the file at ``path`` (``format``: one of ``formats.ITEM_READERS``) into the rating or
    ranking ``project``; all or nothing."""
    if project.task_type == TaskType.PAIRWISE:
        raise TaskImportError(f"{project.slug} is a pairwise project; import pairs there")
    rows = task_rows_read(path=path, format=format, task_type=project.task_type)
    return task_items_create(project=project, rows=rows)


def project_task_setup(
    *,
    project: Project,
    actor: AbstractBaseUser | None,
    task_type: str,
    rating_aspects: list[str] | None = None,
    rating_thumbs: bool = False,
) -> Project:
    """Set the project's task type and, for ratings, its aspects (each scored 1-5) and thumbs;
    audited as an edit. TaskImportError (nothing changed) for an unknown type, a type change in a
    project that already holds pairs or items, or aspects that are not distinct short names, or a
    rating project with neither aspects nor thumbs (the aspects' rule is the settings page's:
    ``rating_aspects_problem``)."""
    if task_type not in TaskType.values:
        raise TaskImportError(f"unknown task type {task_type!r}; expected one of {TaskType.values}")
    aspects = [a.strip() for a in rating_aspects or []]
    if task_type != TaskType.RATING and (aspects or rating_thumbs):
        raise TaskImportError("aspects and thumbs belong to rating projects")
    problem = rating_aspects_problem(aspects)
    if problem:
        raise TaskImportError(f"aspects: {problem}")
    if task_type == TaskType.RATING and not aspects and not rating_thumbs:
        raise TaskImportError("a rating project asks for aspects, thumbs or both")
    with transaction.atomic():
        locked = Project.objects.select_for_update().get(pk=project.pk)
        holds = locked.comparisons.exists() or locked.task_items.exists()
        if holds and locked.task_type != task_type:
            raise TaskImportError(
                f"{locked.slug} already holds {locked.task_type} data: its task type stays"
            )
        after = {"task_type": task_type, "rating_aspects": aspects, "rating_thumbs": rating_thumbs}
        changes = {
            name: {"before": getattr(locked, name), "after": value}
            for name, value in after.items()
            if getattr(locked, name) != value
        }
        if changes:
            for name, value in after.items():
                setattr(locked, name, value)
            locked.save(update_fields=list(changes))
            ProjectEvent.objects.create(
                project=locked, actor=actor, kind=ProjectEvent.Kind.EDITED, changes=changes
            )
    return locked


def task_item_gold_set(*, item: TaskItem, gold: dict[str, Any]) -> TaskItem:
    """Make ``item`` a gold item with the known answer ``gold`` (stored terms: {"ranks": [...]}
    or {"scores": {...}, "thumbs": bool}); {} makes it ordinary again."""
    if gold:
        row = {
            "prompt": "",
            "responses": [""] * item.positions.count(),
            "answers": [{"annotator": "gold", **gold}],
        }
        try:
            checked_item(row, item.project.task_type)
        except RowError as exc:
            raise TaskImportError(f"gold answer refused: {exc}") from exc
    item.gold = gold
    item.save(update_fields=["gold"])
    return item
