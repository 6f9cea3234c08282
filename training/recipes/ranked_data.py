"""Reward-model rows beyond pairs (issue #32), as Concord exports ranking and rating projects:

- listwise rows, for ``loss = "plackett_luce"``: ``{"prompt", "responses": [K texts], "ranks": [K]}``
  with 1 = best and tied responses sharing a rank (only the order matters); K >= 2;
- regression rows, for ``loss = "aspect_regression"``: ``{"prompt", "response", "aspects": {name:
  rating or null}, "scale": [low, high]}``; a null (or absent) aspect was not rated.

``prompt`` and responses read as in ``data`` (a string or chat messages; a one-message list). A bad
line raises ``DataError`` naming its number and field; nothing is half-loaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.recipes.data import DataError, Messages, read_jsonl, row_messages, row_response


@dataclass(frozen=True)
class RankedList:
    """One prompt's K responses and the rank of each (1 = best, ties share a rank)."""

    prompt: Messages
    responses: tuple[str, ...]
    ranks: tuple[float, ...]


@dataclass(frozen=True)
class RatedResponse:
    """One response's ratings per aspect, normalised from the row's scale to [0, 1]
    ((rating - low) / (high - low)); aspects the row did not rate are absent."""

    prompt: Messages
    response: str
    targets: dict[str, float]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def load_ranked_lists(path: str | Path) -> tuple[list[RankedList], int]:
    """Every listwise row of the file in order, and how many rows were skipped because all their
    responses share one rank (no order to learn). DataError for a malformed row or no usable row."""
    path = Path(path)
    lists, skipped = [], 0
    for number, row in read_jsonl(path):
        where = f"{path.name} line {number}"
        if "prompt" not in row:
            raise DataError(f"{where}: missing 'prompt'")
        responses, ranks = row.get("responses"), row.get("ranks")
        if not isinstance(responses, list) or len(responses) < 2:
            raise DataError(f"{where}: responses must be a list of at least 2 responses")
        if not isinstance(ranks, list) or len(ranks) != len(responses):
            raise DataError(f"{where}: ranks must be a list with one rank per response")
        if not all(_number(r) for r in ranks):
            raise DataError(f"{where}: ranks must be finite numbers (1 = best)")
        texts = tuple(row_response(r, where, f"responses[{i}]") for i, r in enumerate(responses))
        if len(set(ranks)) == 1:
            skipped += 1
            continue
        lists.append(
            RankedList(row_messages(row["prompt"], where), texts, tuple(float(r) for r in ranks))
        )
    if not lists:
        raise DataError(f"{path.name}: no usable ranked lists (rows with responses and ranks)")
    return lists, skipped


def _scale(value: Any, where: str) -> tuple[float, float]:
    if not isinstance(value, list | tuple) or len(value) != 2 or not all(_number(v) for v in value):
        raise DataError(f"{where}: scale must be [low, high], two numbers")
    low, high = float(value[0]), float(value[1])
    if not low < high:
        raise DataError(f"{where}: scale needs low < high, got [{low}, {high}]")
    return low, high


def load_rated_responses(path: str | Path) -> tuple[list[RatedResponse], tuple[str, ...]]:
    """Every regression row of the file in order, and the aspects seen, in order of first use.
    DataError for a malformed row, a rating off its row's scale, or no rated row."""
    path = Path(path)
    rows: list[RatedResponse] = []
    aspects: dict[str, None] = {}
    for number, row in read_jsonl(path):
        where = f"{path.name} line {number}"
        if "prompt" not in row or "response" not in row:
            raise DataError(f"{where}: needs 'prompt' and 'response'")
        ratings = row.get("aspects")
        if not isinstance(ratings, dict) or not ratings:
            raise DataError(f"{where}: aspects must be an object of aspect name -> rating")
        low, high = _scale(row.get("scale"), where)
        targets = {}
        for name, value in ratings.items():
            if value is None:
                continue
            if not _number(value) or not low <= value <= high:
                raise DataError(
                    f"{where}: aspect {name!r} = {value!r} is not on the scale [{low}, {high}]"
                )
            targets[str(name)] = (float(value) - low) / (high - low)
            aspects.setdefault(str(name), None)
        if targets:
            rows.append(
                RatedResponse(
                    row_messages(row["prompt"], where),
                    row_response(row["response"], where, "response"),
                    targets,
                )
            )
    if not rows:
        raise DataError(f"{path.name}: no rated responses (rows with at least one rated aspect)")
    return rows, tuple(aspects)
