"""Readers of public preference-data formats: each record becomes one row of Concord's own format.

Pure: no Django. ``read_rows(path, format=..., ...)`` streams a file (any container of
``containers``) and yields, per record, either the Concord row (a dict that
``annotation.parsing.parse_record`` validates) or the RowError that says why it is refused.
``format="auto"`` picks the format from the first readable record's fields (``detect``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from annotation.formats import (
    concord,
    helpsteer2,
    hh_rlhf,
    mt_bench,
    pandalm,
    trl,
    ultrafeedback,
)
from annotation.formats.base import SCALARS_AS_TEXT, ReadOptions, RowError, SourceError
from annotation.formats.containers import Record, container_of, read_records
from annotation.formats.items import concord_items, oasst_items

# Detection order: the most specific fields first (UltraFeedback rows also fit TRL's shape, and
# HH-RLHF's transcripts are TRL's chosen/rejected without a prompt).
READERS: dict[str, ModuleType] = {
    module.NAME: module
    for module in (concord, pandalm, helpsteer2, mt_bench, ultrafeedback, hh_rlhf, trl)
}
FORMAT_NAMES = ("auto", *READERS)
# Rating and ranking items (annotation.formats.items): format -> (record, task type) -> item rows.
ITEM_READERS: dict[str, Callable[[dict[str, Any], str], list[dict[str, Any]]]] = {
    "concord-items": concord_items,
    "ultrafeedback": ultrafeedback.items,
    "helpsteer2": helpsteer2.items,
    "oasst": oasst_items,
}

__all__ = [
    "FORMAT_NAMES",
    "ITEM_READERS",
    "READERS",
    "ReadOptions",
    "Record",
    "RowError",
    "SourceError",
    "converted",
    "detect",
    "resolve",
]


def detect(record: dict[str, Any]) -> str:
    """The name of the format whose fields ``record`` has; SourceError naming the fields otherwise."""
    for name, reader in READERS.items():
        if reader.matches(record):
            return name
    fields = ", ".join(sorted(record)[:12])
    raise SourceError(
        f"cannot tell the format from the first record's fields ({fields}); "
        f"give --format, one of {', '.join(READERS)}"
    )


@dataclass(frozen=True)
class Resolved:
    """The format and container a file was read as (what ``auto`` chose)."""

    format: str
    container: str


def resolve(path: Path, *, format: str, max_bytes: int) -> Resolved:
    """The container of ``path`` and, for ``format="auto"``, the format of its first readable record."""
    if format != "auto" and format not in READERS:
        raise SourceError(f"unknown format {format!r}; expected one of {', '.join(FORMAT_NAMES)}")
    container = container_of(path)
    if format != "auto":
        return Resolved(format, container)
    for record in read_records(path, max_bytes=max_bytes, container=container):
        if record.data is not None:
            return Resolved(detect(record.data), container)
    raise SourceError(f"{path.name} holds no readable record")


def converted(
    records: Iterator[Record], *, format: str, options: ReadOptions
) -> Iterator[tuple[Record, dict[str, Any] | None, RowError | None, int]]:
    """(record, its Concord row or None, its error or None, how many of its values were read as
    their JSON text under ``options.scalars_as_text``) for every record."""
    reader = READERS[format]
    for record in records:
        if record.error is not None or record.data is None:
            yield record, None, record.error, 0
            continue
        before = options.tally[SCALARS_AS_TEXT]
        try:
            row = reader.convert(record.data, options=options)
        except RowError as exc:
            yield record, None, exc, 0
        else:
            yield record, row, None, options.tally[SCALARS_AS_TEXT] - before


def repeats_count_once(format: str) -> bool:
    """Whether a judge's repeated vote with the same verdict is one vote in this format."""
    return bool(getattr(READERS[format], "REPEAT_VOTES_COUNT_ONCE", False))
