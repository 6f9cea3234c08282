"""Writes of projects and the all-or-nothing, streaming import (comparisons, responses, judgements).

Views, commands and tasks call these; none holds logic of its own.

Every row is read and checked once by ``_checked`` (its format by annotation.formats, its fields by
annotation.parsing, duplicates and reference answers against the rows before it, keeping only each
comparison's key, content hash and annotators' verdicts, packed small), so whether a row is bad is
known as it is read. Then one of two write paths, with the same rules and the same result:

- PostgreSQL (``_import_by_copy``): the checked rows go straight into temporary staging tables by
  COPY, COPY_ROWS at a time, and set-based ``INSERT ... SELECT`` statements
  (annotation.services.import_copy) write them each time WRITE_LINES rows are staged. One pass over
  the file, read and checked by a worker thread (annotation.services.read_ahead) while the server
  writes the rows before.
- SQLite, the demo (``_import_by_rows``): pass 1 checks the whole file, pass 2 reads it again and
  writes it with the ORM in chunks of CHUNK_ROWS rows.

Either way everything happens inside one transaction: a bad row (all or nothing is the default) or a
failure half-way leaves nothing behind, and the file never sits in memory. With ``skip_invalid`` the
bad rows are written, with their reasons, to a rejects file beside the source and left out.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Max
from django.utils.text import slugify

from annotation import formats
from annotation.formats.containers import read_records, records_estimate
from annotation.models import Comparison, Project, Prompt
from annotation.parsing import (
    ImportedComparison,
    ImportValidationError,
    LineError,
    parse_record,
    parse_row,
)
from annotation.services import import_copy
from annotation.services.import_result import ImportResult
from annotation.services.import_rows import ExistingSeen, ImportCounts, annotators_for, chunk_write
from annotation.services.read_ahead import read_ahead

CHUNK_ROWS = 1000
COPY_ROWS = 5000  # rows held in memory between two COPYs into the staging tables
WRITE_LINES = 25_000  # rows staged, then written by one round of set-based statements
# Rows the reading thread may hold ahead of the writes (about 3 KB each: with 25,000, a 1,000,000-row
# import peaked at 454 MB, near the 500 MB goal; the per-comparison record is most of the rest).
READ_AHEAD_ROWS = 15_000
MAX_ERRORS_KEPT = 1000
REJECTS_SUFFIX = ".rejected.jsonl"

Progress = Callable[[str, int, int | None], None]
"""progress(phase, rows_done, rows_total): phase is "validating" or "importing"."""

Source = Sequence[str] | Path
"""Concord JSONL lines, or the Path of a file in any format and container annotation.formats reads."""


def project_get_or_create(
    *, slug: str, name: str | None = None, created_by: AbstractBaseUser | None = None, **fields
) -> tuple[Project, bool]:
    """The project with ``slug``, created with ``name`` and ``fields`` when it does not exist."""
    if slugify(slug) != slug or not slug:
        raise ValueError(f"{slug!r} is not a valid slug (lowercase letters, digits and hyphens)")
    return Project.objects.get_or_create(
        slug=slug,
        defaults={
            "name": name or slug.replace("-", " ").title(),
            "created_by": created_by,
            **fields,
        },
    )


@dataclass(frozen=True)
class _Read:
    """One record as read: where it is, the row or its errors, and the record as it came."""

    number: int
    unit: str
    row: ImportedComparison | None
    errors: list[LineError]
    raw: Any
    as_text: int = 0  # values of the record read as their JSON text (ReadOptions.scalars_as_text)


@dataclass(frozen=True)
class ImportOptions:
    """How to read the source: its format ("auto" or a name in annotation.formats.READERS), the
    readers' options, and whether bad rows are set aside (``skip_invalid``) instead of refusing all."""

    format: str = "auto"
    read: formats.ReadOptions = field(default_factory=formats.ReadOptions)
    skip_invalid: bool = False


def _lines_read(lines: Sequence[str]) -> Iterator[_Read]:
    for number, text in enumerate(lines, start=1):
        if text.strip():
            parsed = parse_row(number, text)
            if isinstance(parsed, list):
                yield _Read(number, "line", None, parsed, text)
            else:
                yield _Read(number, "line", parsed, [], text)


def _file_read(path: Path, resolved: formats.Resolved, options: ImportOptions) -> Iterator[_Read]:
    records = read_records(
        path, max_bytes=settings.CONCORD_IMPORT_MAX_BYTES, container=resolved.container
    )
    for record, row, error, as_text in formats.converted(
        records, format=resolved.format, options=options.read
    ):
        if error is not None or row is None:
            error = error or formats.RowError("", "unreadable record")
            line_error = LineError(record.number, error.field, error.message, record.unit)
            yield _Read(record.number, record.unit, None, [line_error], record.raw)
            continue
        parsed = parse_record(record.number, row, unit=record.unit)
        if isinstance(parsed, list):
            yield _Read(record.number, record.unit, None, parsed, record.raw)
        else:
            yield _Read(record.number, record.unit, parsed, [], record.raw, as_text)


@dataclass
class _Plan:
    """What pass 1 learnt and pass 2 needs: the rows to leave out and the votes to count once."""

    format: str
    container: str
    rows: int = 0
    rejected: set[int] = field(default_factory=set)
    repeats: set[tuple[int, str]] = field(default_factory=set)
    empty_responses: int = 0
    scalars_as_text: int = 0
    rejects_path: str = ""


def _source_reads(source: Source, plan: _Plan, options: ImportOptions) -> Iterator[_Read]:
    if isinstance(source, Path):
        yield from _file_read(source, formats.Resolved(plan.format, plan.container), options)
    else:
        yield from _lines_read(source)


def _plan_for(source: Source, options: ImportOptions) -> _Plan:
    if not isinstance(source, Path):
        if options.format not in ("auto", "concord"):
            raise ValueError("a list of lines is read as Concord JSONL only")
        return _Plan(format="concord", container="jsonl")
    resolved = formats.resolve(
        source, format=options.format, max_bytes=settings.CONCORD_IMPORT_MAX_BYTES
    )
    return _Plan(format=resolved.format, container=resolved.container)


def _json_default(value: object) -> str:
    return str(value)


def _stored_answers(project: Project, reads: list[_Read]) -> dict[str, str]:
    """{prompt hash: reference answer} of the project's stored prompts that the rows of ``reads``
    give an answer for (one query per chunk of rows)."""
    hashes = {i.row.prompt_hash for i in reads if i.row is not None and i.row.answer is not None}
    if not hashes:
        return {}
    stored = Prompt.objects.filter(project=project, content_hash__in=hashes)
    return {
        content_hash: str(metadata["answer"])
        for content_hash, metadata in stored.values_list("content_hash", "metadata")
        if isinstance(metadata, dict) and metadata.get("answer") is not None
    }


def _answer_errors(
    item: _Read, answers: dict[str, tuple[int, str]], stored: dict[str, str]
) -> list[LineError]:
    """A row's answer against the answer an earlier row of the file (``answers``: prompt hash ->
    (line, answer)) or the project (``stored``) gives the same prompt: one prompt, one answer."""
    row = item.row
    if row is None or row.answer is None:
        return []
    earlier = answers.get(row.prompt_hash)
    if earlier is not None and earlier[1] != row.answer:
        message = (
            f"{row.answer!r} differs from the answer {earlier[1]!r} given to the same prompt on "
            f"{item.unit} {earlier[0]}"
        )
        return [LineError(item.number, "answer", message, item.unit)]
    if stored.get(row.prompt_hash, row.answer) != row.answer:
        message = (
            f"{row.answer!r} differs from the answer {stored[row.prompt_hash]!r} the project "
            "already has for this prompt"
        )
        return [LineError(item.number, "answer", message, item.unit)]
    return []


def _verdicts_packed(line: int, content_key: str, verdicts: dict[str, tuple[str, int]]) -> bytes:
    """What pass 1 keeps of a comparison's first row, packed small (a million rows fit in about
    200 MB): its line, the first 16 bytes of its content hash, and its annotators' verdicts."""
    packed = json.dumps(sorted([n, c, s] for n, (c, s) in verdicts.items()), ensure_ascii=False)
    return line.to_bytes(8, "little") + bytes.fromhex(content_key[:32]) + packed.encode()


def _verdicts_unpacked(value: bytes) -> tuple[int, bytes, dict[str, tuple[str, int]]]:
    line = int.from_bytes(value[:8], "little")
    return line, value[8:24], {n: (c, s) for n, c, s in json.loads(value[24:].decode())}


def _hashed(reads: Iterator[_Read]) -> Iterator[_Read]:
    """``reads`` with every row's hashes computed, in the thread that reads ahead."""
    for item in reads:
        if item.row is not None:
            item.row.hashed()
        yield item


def _checked(
    source: Source,
    options: ImportOptions,
    progress: Progress | None,
    project: Project,
    plan: _Plan,
    *,
    ahead: bool = False,
) -> Iterator[tuple[ImportedComparison, bool]]:
    """Read every record of ``source`` once, check it, and yield the valid rows (a judge's repeated
    vote left out where the format counts it once), each with whether it is the first row of its
    comparison, filling ``plan`` as it goes. ``ahead``: a worker thread reads, parses and hashes
    the records (up to READ_AHEAD_ROWS of them) while the caller waits for the database; the checks
    against the rows before, and the stored answers' query, stay here.

    A comparison (one key: its id, or its content without one) may span several rows; each of its
    annotators judges it once, and rows with one id must show the same content. A prompt has one
    reference answer: rows (and the project's stored prompt) that give it two are an error. Every
    check looks back only (a row is judged against the valid rows before it), so whether a row is
    rejected is known when it is read. At the end raises ImportValidationError listing the errors
    unless ``skip_invalid`` (then the bad rows go to the rejects file beside ``source``): a caller
    that writes while it reads must do so inside a transaction that this error rolls back.
    """
    count_once = formats.repeats_count_once(plan.format)
    errors: list[LineError] = []
    n_errors = 0
    # first 16 bytes of the key -> _verdicts_packed(first line, content hash, verdicts)
    seen: dict[bytes, bytes] = {}
    answers: dict[str, tuple[int, str]] = {}  # prompt hash -> (first line, answer)
    total = _rows_estimate(source, plan)
    rejects = None
    if options.skip_invalid and isinstance(source, Path):
        plan.rejects_path = str(source.with_name(source.name + REJECTS_SUFFIX))
        rejects = open(plan.rejects_path + ".part", "w", encoding="utf-8")  # noqa: SIM115
    reads: Iterator[_Read] | None = None
    try:
        reads = _source_reads(source, plan, options)
        if ahead:
            depth = max(1, READ_AHEAD_ROWS // CHUNK_ROWS)
            reads = read_ahead(_hashed(reads), batch=CHUNK_ROWS, depth=depth)
        while chunk := list(islice(reads, CHUNK_ROWS)):
            stored = _stored_answers(project, chunk)
            for item in chunk:
                plan.rows += 1
                row_errors = [*item.errors, *_answer_errors(item, answers, stored)]
                repeats: list[str] = []
                first = None
                if item.row is not None:
                    row = item.row
                    key = bytes.fromhex(row.comparison_hash[:32])
                    content_key = row.content_key
                    packed = seen.get(key)
                    first = _verdicts_unpacked(packed) if packed is not None else None
                    verdicts = {j.annotator: (j.choice, j.strength) for j in row.judgements}
                    if first is not None:
                        if first[1] != bytes.fromhex(content_key[:32]):
                            row_errors.append(
                                LineError(
                                    item.number,
                                    "id",
                                    f"id {row.external_id!r} is also on {item.unit} {first[0]} with "
                                    "a different prompt, responses or models",
                                    item.unit,
                                )
                            )
                        for name in sorted(verdicts.keys() & first[2].keys()):
                            if count_once and verdicts[name] == first[2][name]:
                                repeats.append(name)
                                continue
                            row_errors.append(
                                LineError(
                                    item.number,
                                    "judgements",
                                    f"{name!r} already judged this comparison on {item.unit} "
                                    f"{first[0]}",
                                    item.unit,
                                )
                            )
                if row_errors:
                    n_errors += len(row_errors)
                    errors.extend(row_errors[: max(0, MAX_ERRORS_KEPT - len(errors))])
                    plan.rejected.add(item.number)
                    if rejects is not None:
                        reasons = [{"field": e.field, "message": e.message} for e in row_errors]
                        rejects.write(
                            json.dumps(
                                {item.unit: item.number, "errors": reasons, "record": item.raw},
                                ensure_ascii=False,
                                default=_json_default,
                            )
                            + "\n"
                        )
                else:
                    row = item.row
                    plan.empty_responses += row.empty_responses
                    plan.scalars_as_text += item.as_text
                    plan.repeats.update((item.number, name) for name in repeats)
                    if row.answer is not None:
                        answers.setdefault(row.prompt_hash, (item.number, row.answer))
                    if first is None:
                        seen[key] = _verdicts_packed(item.number, content_key, verdicts)
                    else:
                        merged = {**first[2], **verdicts}
                        seen[key] = _verdicts_packed(first[0], content_key, merged)
                    yield _without_repeats(row, plan), first is None
                if progress is not None and plan.rows % CHUNK_ROWS == 0:
                    progress("validating", plan.rows, total)
    except BaseException:
        if rejects is not None:
            rejects.close()
            os.unlink(rejects.name)
        raise
    finally:
        if ahead and reads is not None:
            reads.close()  # stops the reading thread at once, the caller's error or not
    if rejects is not None:
        rejects.close()
        os.replace(rejects.name, plan.rejects_path)
    if n_errors and not options.skip_invalid:
        raise ImportValidationError(errors, total=n_errors)


def _rows_estimate(source: Source, plan: _Plan) -> int | None:
    """About how many rows ``source`` holds (progress and time left), None when unknown."""
    if not isinstance(source, Path):
        return len(source)
    return records_estimate(
        source, max_bytes=settings.CONCORD_IMPORT_MAX_BYTES, container=plan.container
    )


def _validate(
    source: Source, options: ImportOptions, progress: Progress | None, project: Project
) -> _Plan:
    """Pass 1 of the row-by-row path: every record read and checked (``_checked``), nothing kept
    but the plan. Raises ImportValidationError as ``_checked`` does."""
    plan = _plan_for(source, options)
    for _row in _checked(source, options, progress, project, plan):
        pass
    return plan


def _without_repeats(row: ImportedComparison, plan: _Plan) -> ImportedComparison:
    if not plan.repeats:
        return row
    kept = tuple(j for j in row.judgements if (row.line, j.annotator) not in plan.repeats)
    if len(kept) == len(row.judgements):
        return row
    return replace(row, judgements=kept)


def _import_by_rows(
    project: Project, lines: Source, progress: Progress | None, options: ImportOptions
) -> tuple[_Plan, ImportCounts]:
    """SQLite's path (and PostgreSQL's with CONCORD_IMPORT_BULK off): pass 1 checks the whole
    source, pass 2 reads it again and writes it in chunks of CHUNK_ROWS rows with the ORM."""
    plan = _validate(lines, options, progress, project)
    counts = ImportCounts()
    done = 0
    with transaction.atomic():
        top = Comparison.objects.filter(project=project).aggregate(top=Max("id"))["top"]
        found = ExistingSeen(before_id=top or 0)
        rows = (
            _without_repeats(item.row, plan)
            for item in _source_reads(lines, plan, options)
            if item.row is not None and item.number not in plan.rejected
        )
        while chunk := list(islice(rows, CHUNK_ROWS)):
            chunk_write(project, chunk, counts, found)
            done += len(chunk)
            if progress is not None:
                progress("importing", done, plan.rows)
    return plan, counts


def _staged_written(project: Project, counts: ImportCounts) -> int:
    """Write the rows staged so far (one round of set-based statements), add what they wrote to
    ``counts`` and empty the staging tables; returns the number of rows written."""
    import_copy.staging_analyze()
    staged, low, high = import_copy.staged_lines()
    if not staged:
        return 0
    counts.comparisons_existing += import_copy.staged_existing(project_id=project.pk)
    names = import_copy.staged_annotators(low=low, high=high)
    if names:
        annotators_for(project, names, counts)
    written = import_copy.staged_write(
        project_id=project.pk, low=low, high=high, judged=bool(names)
    )
    counts.comparisons_created += written.comparisons_created
    counts.judgements_created += written.judgements_created
    counts.judgements_existing += written.judgements_existing
    import_copy.staging_clear()
    return written.rows


def _import_by_copy(
    project: Project, lines: Source, progress: Progress | None, options: ImportOptions
) -> tuple[_Plan, ImportCounts]:
    """PostgreSQL's path: one pass reads and checks the source (a worker thread reading ahead)
    and COPYs the valid rows into staging tables, COPY_ROWS at a time; each time WRITE_LINES rows
    are staged, set-based statements write them while the next rows are read. All inside one
    transaction: a bad row (which raises at the end of the reading, when every error is known) or
    any failure leaves nothing written; once a bad row is seen (all or nothing), the rest of the
    file is only checked, so that every error is listed, and nothing more is staged."""
    plan = _plan_for(lines, options)
    counts = ImportCounts()
    with transaction.atomic():
        import_copy.staging_create()
        rows = _checked(lines, options, progress, project, plan, ahead=True)
        staged = done = 0
        try:
            while chunk := list(islice(rows, COPY_ROWS)):
                if plan.rejected and not options.skip_invalid:
                    continue  # refused: read on for the errors (the raise rolls back the writes)
                staged += import_copy.staging_copy(chunk)
                if staged >= WRITE_LINES:
                    done += _staged_written(project, counts)
                    staged = 0
        finally:
            rows.close()  # a failed write stops the reading thread now, not when collected
        if progress is not None:
            progress("importing", done, done + staged)
        done += _staged_written(project, counts)
        if progress is not None:
            progress("importing", done, done)
        import_copy.staging_drop()
    return plan, counts


def bulk_import_enabled() -> bool:
    """Whether imports take the COPY path: on PostgreSQL, unless CONCORD_IMPORT_BULK is off."""
    return import_copy.bulk_supported() and getattr(settings, "CONCORD_IMPORT_BULK", True)


def comparisons_import(
    *,
    project: Project,
    lines: Source,
    progress: Progress | None = None,
    options: ImportOptions | None = None,
) -> ImportResult:
    """Import comparisons into ``project``: all or nothing (unless ``skip_invalid``), idempotent.

    ``lines`` is a list of Concord JSONL lines or the Path of a file in any format annotation.formats
    reads (streamed, never held in memory). Any bad row raises ImportValidationError listing each
    bad row and field, and nothing is written; with ``options.skip_invalid`` the good rows are
    imported and the bad ones listed in ``<file>.rejected.jsonl``. A row with an ``id`` is found
    again by that id on re-import; a row without one by its content (prompt, responses, models).
    Judgements already present (same comparison and annotator) are kept as they are. On PostgreSQL
    the rows go through COPY and set-based statements (``annotation.services.import_copy``); on
    SQLite through the ORM in chunks; the rules and the result are the same.
    """
    options = options or ImportOptions()
    by = _import_by_copy if bulk_import_enabled() else _import_by_rows
    with transaction.atomic():
        plan, counts = by(project, lines, progress, options)
        if counts.judgements_created:
            from annotation.services.labelling import judgements_changed

            judgements_changed(project)
    return ImportResult(
        rows=plan.rows,
        **counts.__dict__,
        format=plan.format,
        container=plan.container,
        rows_rejected=len(plan.rejected),
        empty_responses=plan.empty_responses,
        repeated_votes=len(plan.repeats),
        rejects_path=plan.rejects_path,
        scalars_as_text=plan.scalars_as_text,
    )


@transaction.atomic
def project_import(
    *,
    slug: str,
    lines: Source,
    progress: Progress | None = None,
    options: ImportOptions | None = None,
) -> tuple[Project, bool, ImportResult]:
    """Import into the project ``slug``, creating it if missing; on any error neither happens."""
    project, created = project_get_or_create(slug=slug)
    result = comparisons_import(project=project, lines=lines, progress=progress, options=options)
    return project, created, result
