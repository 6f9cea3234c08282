"""Rating and ranking items from public formats and Concord's own item rows.

Pure: no Django. Every reader turns one record into a list of item rows:
``{"prompt": str, "responses": [str], "models": [str], "external_id": str, "metadata": {},
"gold": {}, "answers": [{"annotator": str, "scores": {aspect: 1-5}, "thumbs": bool | None,
"ranks": [int], "order": [int]}]}`` (a rating item has one response; a ranking item 3-8; answers
in stored terms, ``order`` the display order shown, [] when the source did not say).

Readers (``annotation.formats.ITEM_READERS``), each ``(record, task_type) -> [item row]``:

- ``concord-items`` (here): the rows ``annotation/services/task_export.py`` writes as ``items``
  (a round trip).
- ``ultrafeedback`` (annotation/formats/ultrafeedback.py; openbmb/UltraFeedback: ``instruction``,
  ``completions`` with per-aspect ``annotations`` rated "1"-"5" or "N/A"): as a ranking, one item
  of the four completions ranked by their mean aspect rating (ties share a rank); as ratings, one
  item per completion with its aspect ratings. The ratings become answers by
  ``ultrafeedback-gpt4``.
- ``helpsteer2`` (annotation/formats/helpsteer2.py; nvidia/HelpSteer2: ``prompt``, ``response``
  and five aspects rated 0-4): one rating item, its aspects shifted to 1-5, answered by
  ``helpsteer2``.
- ``oasst`` (here; OpenAssistant-style ranked replies: ``prompt`` and ``replies`` [{"text", "rank"}],
  rank 0 = best as in OASST's message trees): one ranking item answered by ``oasst``.
"""

from __future__ import annotations

from typing import Any

from annotation.formats.base import RowError

RATING, RANKING = "rating", "ranking"
RESPONSES = {RATING: (1, 1), RANKING: (3, 8)}
SCALE = (1, 5)


def competition_ranks(values: list[float], *, higher_is_better: bool) -> list[int]:
    """Ranks (1 = best) with ties sharing the best rank of their group ("1224")."""
    sign = -1 if higher_is_better else 1
    keys = [sign * v for v in values]
    return [1 + sum(other < key for other in keys) for key in keys]


def text_value(value: object, name: str) -> str:
    """``value`` if it is a string; RowError naming the field otherwise."""
    if not isinstance(value, str):
        raise RowError(name, f"must be text, got {type(value).__name__}")
    return value


def _check_answer(answer: object, task_type: str, size: int, where: str) -> dict[str, Any]:
    if not isinstance(answer, dict) or not isinstance(answer.get("annotator"), str):
        raise RowError(where, "must be an object with an annotator name")
    scores = answer.get("scores") or {}
    ranks = list(answer.get("ranks") or [])
    low, high = SCALE
    for aspect, value in scores.items():
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise RowError(f"{where}.scores.{aspect}", f"must be an integer {low}-{high}")
    if task_type == RANKING and (
        len(ranks) != size or ranks != competition_ranks(ranks, higher_is_better=False)
    ):
        raise RowError(f"{where}.ranks", f"must rank all {size} responses from 1, got {ranks}")
    thumbs = answer.get("thumbs")
    if thumbs is not None and not isinstance(thumbs, bool):
        raise RowError(f"{where}.thumbs", "must be true, false or null")
    order = list(answer.get("order") or [])
    if order and sorted(order) != list(range(size)):
        raise RowError(f"{where}.order", f"must be a permutation of 0..{size - 1}")
    if task_type == RATING and not scores and thumbs is None:
        raise RowError(where, "a rating answer needs scores or thumbs")
    return {
        "annotator": answer["annotator"],
        "scores": dict(scores),
        "thumbs": thumbs,
        "ranks": ranks,
        "order": order,
    }


def checked_item(row: dict[str, Any], task_type: str) -> dict[str, Any]:
    """``row`` as a complete item row of ``task_type``; RowError naming the field otherwise."""
    responses = row.get("responses")
    fewest, most = RESPONSES[task_type]
    if not isinstance(responses, list) or not fewest <= len(responses) <= most:
        raise RowError("responses", f"a {task_type} item has {fewest}-{most} responses")
    responses = [text_value(r, f"responses[{i}]") for i, r in enumerate(responses)]
    models = row.get("models") or [""] * len(responses)
    if len(models) != len(responses):
        raise RowError("models", "must name one model per response")
    answers = [
        _check_answer(a, task_type, len(responses), f"answers[{i}]")
        for i, a in enumerate(row.get("answers") or [])
    ]
    gold = row.get("gold") or {}
    if not isinstance(gold, dict):
        raise RowError("gold", "must be an object (the known answer) or empty")
    return {
        "prompt": text_value(row.get("prompt"), "prompt"),
        "responses": responses,
        "models": [str(m or "") for m in models],
        "external_id": str(row.get("id") or row.get("external_id") or ""),
        "metadata": dict(row.get("metadata") or {}),
        "gold": gold,
        "answers": answers,
    }


def concord_items(record: dict[str, Any], task_type: str) -> list[dict[str, Any]]:
    return [checked_item(record, task_type)]


def oasst_items(record: dict[str, Any], task_type: str) -> list[dict[str, Any]]:
    if task_type != RANKING:
        raise RowError("format", "ranked replies import as ranking items")
    replies = record.get("replies")
    if not isinstance(replies, list):
        raise RowError("replies", "must be a list of {text, rank}")
    texts, raw_ranks = [], []
    for i, reply in enumerate(replies):
        if not isinstance(reply, dict) or isinstance(reply.get("rank"), bool):
            raise RowError(f"replies[{i}]", "must be an object with text and rank")
        if not isinstance(reply.get("rank"), int):
            raise RowError(f"replies[{i}].rank", "must be an integer (0 = best)")
        texts.append(text_value(reply.get("text"), f"replies[{i}].text"))
        raw_ranks.append(reply["rank"])
    ranks = competition_ranks(raw_ranks, higher_is_better=False)
    row = {
        "id": record.get("message_id") or record.get("id") or "",
        "prompt": text_value(record.get("prompt"), "prompt"),
        "responses": texts,
        "metadata": {"source": "oasst"},
        "answers": [{"annotator": str(record.get("annotator") or "oasst"), "ranks": ranks}],
    }
    return [checked_item(row, RANKING)]
