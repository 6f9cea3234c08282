"""Concord's own JSONL rows (see annotation.parsing): passed through unchanged."""

from __future__ import annotations

from typing import Any

from annotation.formats.base import ReadOptions

NAME = "concord"
EXAMPLE = "python manage.py import_comparisons pairs.jsonl --project demo"


def matches(record: dict[str, Any]) -> bool:
    return "response_a" in record or "response_b" in record


def convert(record: dict[str, Any], *, options: ReadOptions) -> dict[str, Any]:
    return record
