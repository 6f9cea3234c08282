"""Export of rating and ranking projects as JSONL rows (one JSON object a line).

Row formats (``ROW_FORMATS``; the training recipes read them):

- ``items`` (both types): every item with all its answers in stored terms and the display order
  each annotator saw: ``{"id", "prompt", "responses", "models", "metadata", "gold", "answers":
  [{"annotator", "scores", "thumbs", "ranks", "order"}]}``. ``import_items --format
  concord-items`` reads it back (a round trip).
- ``listwise`` (ranking): ``{"prompt", "responses", "ranks"}``, the consensus ranking across
  annotators (mean mid-rank, then re-ranked; 1 = best, ties share a rank).
- ``pairs`` (ranking): every pair the consensus ranking implies, in the pairwise export's format
  (``chosen`` / ``rejected`` with ``margin`` = rank distance); tied responses give no pair.
- ``kto`` (rating with thumbs): TRL's unpaired rows ``{"prompt", "completion", "label"}``, the
  label the annotators' majority (an even split gives no row).
- ``aspects`` (rating with aspects): ``{"prompt", "response", "aspects": {aspect: mean score},
  "scale": [1, 5]}``, the mean over annotators.

Answers counted: each annotator's first answer per item (not repeats); items without an answer
give no training row (they are in ``items``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from annotation.agreement.ranking import consensus_ranking, ranking_to_pairs
from annotation.models import RATING_SCALE, Project, TaskAnswer, TaskItem, TaskType
from common.errors import ConcordError

ROW_FORMATS = {
    TaskType.RATING: ("items", "kto", "aspects"),
    TaskType.RANKING: ("items", "listwise", "pairs"),
}


class TaskExportError(ConcordError):
    """An export that cannot be made as asked (the message says why); nothing was written."""


def _items(project: Project) -> list[TaskItem]:
    return list(
        TaskItem.objects.filter(project=project)
        .select_related("prompt")
        .prefetch_related("positions__response")
        .order_by("queue_position", "pk")
    )


def _answers(project: Project) -> dict[int, list[dict[str, Any]]]:
    rows = (
        TaskAnswer.objects.filter(item__project=project, repeat=False)
        .order_by("item_id", "annotator__username")
        .values("item_id", "annotator__username", "scores", "thumbs", "ranks", "order")
    )
    by_item: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_item[row["item_id"]].append(
            {
                "annotator": row["annotator__username"],
                "scores": row["scores"] or {},
                "thumbs": row["thumbs"],
                "ranks": row["ranks"] or [],
                "order": row["order"] or [],
            }
        )
    return by_item


def _responses(item: TaskItem) -> list[Any]:
    return [row.response for row in item.positions.all()]


def _item_rows(project: Project) -> Iterator[dict[str, Any]]:
    answers = _answers(project)
    for item in _items(project):
        responses = _responses(item)
        yield {
            "id": item.external_id or f"item-{item.pk}",
            "prompt": item.prompt.text,
            "responses": [r.text for r in responses],
            "models": [r.model_name for r in responses],
            "metadata": item.metadata,
            "gold": item.gold,
            "answers": answers.get(item.pk, []),
        }


def _ranked(project: Project) -> Iterator[tuple[TaskItem, list[Any], list[int], int]]:
    """(item, responses, consensus ranks [K], answers) for every ranked item."""
    answers = _answers(project)
    for item in _items(project):
        given = [a["ranks"] for a in answers.get(item.pk, []) if a["ranks"]]
        if given:
            ranks = consensus_ranking(np.asarray(given, dtype=float)).tolist()
            yield item, _responses(item), ranks, len(given)


def _listwise_rows(project: Project) -> Iterator[dict[str, Any]]:
    for item, responses, ranks, _ in _ranked(project):
        yield {"prompt": item.prompt.text, "responses": [r.text for r in responses], "ranks": ranks}


def _pair_rows(project: Project) -> Iterator[dict[str, Any]]:
    for item, responses, ranks, n in _ranked(project):
        for better, worse, margin in ranking_to_pairs(ranks):
            yield {
                "prompt": item.prompt.text,
                "chosen": responses[better].text,
                "rejected": responses[worse].text,
                "margin": float(margin),
                "consensus": "ranking",
                "tie": False,
                "n_judgements": n,
                "item_id": item.pk,
                "external_id": item.external_id,
                "model_chosen": responses[better].model_name,
                "model_rejected": responses[worse].model_name,
            }


def _kto_rows(project: Project) -> Iterator[dict[str, Any]]:
    answers = _answers(project)
    for item in _items(project):
        votes = [a["thumbs"] for a in answers.get(item.pk, []) if a["thumbs"] is not None]
        up, down = votes.count(True), votes.count(False)
        if up != down:
            response = _responses(item)[0]
            yield {"prompt": item.prompt.text, "completion": response.text, "label": up > down}


def _aspect_rows(project: Project) -> Iterator[dict[str, Any]]:
    answers = _answers(project)
    aspects = list(project.rating_aspects or [])
    for item in _items(project):
        given = [a["scores"] for a in answers.get(item.pk, []) if a["scores"]]
        means = {
            aspect: float(np.mean(values))
            for aspect in aspects
            if (values := [s[aspect] for s in given if aspect in s])
        }
        if means:
            yield {
                "prompt": item.prompt.text,
                "response": _responses(item)[0].text,
                "aspects": means,
                "scale": list(RATING_SCALE),
            }


WRITERS = {
    "items": _item_rows,
    "listwise": _listwise_rows,
    "pairs": _pair_rows,
    "kto": _kto_rows,
    "aspects": _aspect_rows,
}


def task_export_rows(*, project: Project, row_format: str) -> list[dict[str, Any]]:
    """The rows of ``project`` in ``row_format`` (one of ``ROW_FORMATS[project.task_type]``);
    TaskExportError naming the formats otherwise."""
    allowed = ROW_FORMATS.get(project.task_type)
    if allowed is None:
        raise TaskExportError(f"{project.slug} is a pairwise project; use export_dataset")
    if row_format not in allowed:
        raise TaskExportError(
            f"a {project.task_type} project exports as {', '.join(allowed)}, not {row_format!r}"
        )
    return list(WRITERS[row_format](project))


def task_export_write(*, project: Project, row_format: str, out: Path) -> int:
    """Write ``project``'s rows in ``row_format`` to the JSONL file ``out`` (its folder is made);
    returns the number of rows. Nothing is written when the format is refused."""
    rows = task_export_rows(project=project, row_format=row_format)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return len(rows)
