"""Writes of the annotation domain: projects and the all-or-nothing, streaming JSONL import.

Views, commands and tasks call these; none holds logic of its own.

The import reads its source twice. Pass 1 parses and validates every line (keeping only each row's
content hash and annotator names), so a bad file is refused before anything is written. Pass 2 reads
the file again and writes it in chunks of CHUNK_ROWS rows with bulk queries, inside one transaction: a
100,000-line file never sits in memory, and a failure half-way leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import AbstractBaseUser, Group
from django.db import transaction
from django.db.models import F, Max
from django.utils.text import slugify

from annotation.importing import (
    ImportedComparison,
    ImportValidationError,
    LineError,
    compressed_file_message,
    compression_of,
    content_hash,
    parse_row,
)
from annotation.models import Comparison, Judgement, Project, Prompt, Response
from common.roles import ANNOTATOR

CHUNK_ROWS = 1000
MAX_ERRORS_KEPT = 1000

Progress = Callable[[str, int, int | None], None]
"""progress(phase, rows_done, rows_total): phase is "validating" or "importing"."""

Source = Sequence[str] | Path


@dataclass(frozen=True)
class ImportResult:
    """Counts of one import: rows read, comparisons created or already present, and so on."""

    rows: int
    comparisons_created: int
    comparisons_existing: int
    judgements_created: int
    judgements_existing: int
    annotators_created: int

    def summary(self) -> str:
        return (
            f"{self.rows} rows: {self.comparisons_created} comparisons created, "
            f"{self.comparisons_existing} already present; {self.judgements_created} judgements "
            f"created, {self.judgements_existing} already present; "
            f"{self.annotators_created} annotator accounts created"
        )


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


def _numbered_lines(source: Source) -> Iterator[tuple[int, str | LineError]]:
    """(line number, text) for every line; undecodable bytes become a LineError for that line."""
    if not isinstance(source, Path):
        yield from enumerate(source, start=1)
        return
    with source.open("rb") as handle:
        if compression := compression_of(handle.read(8)):
            yield 1, LineError(1, "", compressed_file_message("this file", compression))
            return
        handle.seek(0)
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                yield number, LineError(number, "", f"not valid UTF-8 (byte {exc.start + 1})")
            else:
                yield number, text


def _rows(source: Source) -> Iterator[ImportedComparison | list[LineError]]:
    for number, text in _numbered_lines(source):
        if isinstance(text, LineError):
            yield [text]
        elif text.strip():
            yield parse_row(number, text)


def _validate(source: Source, progress: Progress | None) -> int:
    """Pass 1: every line parsed; duplicates within the file checked. Returns the row count."""
    errors: list[LineError] = []
    n_errors = 0
    first_line: dict[str, tuple[int, frozenset[str]]] = {}
    rows = 0
    for item in _rows(source):
        rows += 1
        if isinstance(item, list):
            n_errors += len(item)
            errors.extend(item[: max(0, MAX_ERRORS_KEPT - len(errors))])
            continue
        names = frozenset(j.annotator for j in item.judgements)
        seen = first_line.get(item.comparison_hash)
        if seen is not None:
            for name in sorted(names & seen[1]):
                n_errors += 1
                if len(errors) < MAX_ERRORS_KEPT:
                    errors.append(
                        LineError(
                            item.line,
                            "judgements",
                            f"{name!r} already judged this comparison on line {seen[0]}",
                        )
                    )
            names |= seen[1]
        first_line[item.comparison_hash] = (seen[0] if seen else item.line, names)
        if progress is not None and rows % CHUNK_ROWS == 0:
            progress("validating", rows, None)
    if n_errors:
        raise ImportValidationError(errors, total=n_errors)
    return rows


@dataclass
class _Counts:
    comparisons_created: int = 0
    comparisons_existing: int = 0
    judgements_created: int = 0
    judgements_existing: int = 0
    annotators_created: int = 0


def _prompts_for(project: Project, rows: list[ImportedComparison]) -> dict[str, Prompt]:
    wanted = {row.prompt_hash: row for row in rows}
    existing = Prompt.objects.filter(project=project, content_hash__in=wanted)
    found = {prompt.content_hash: prompt for prompt in existing}
    missing = [
        Prompt(project=project, content_hash=h, text=row.prompt_text, messages=row.messages)
        for h, row in wanted.items()
        if h not in found
    ]
    Prompt.objects.bulk_create(missing, ignore_conflicts=True)
    if missing:
        found = {
            p.content_hash: p
            for p in Prompt.objects.filter(project=project, content_hash__in=wanted)
        }
    return found


def _responses_for(
    rows: list[ImportedComparison], prompts: dict[str, Prompt]
) -> dict[tuple[int, str], Response]:
    wanted: dict[tuple[int, str], tuple[str, str]] = {}
    for row in rows:
        prompt_id = prompts[row.prompt_hash].pk
        wanted[(prompt_id, content_hash(row.response_a))] = (row.response_a, row.model_a)
        wanted[(prompt_id, content_hash(row.response_b))] = (row.response_b, row.model_b)

    def fetch() -> dict[tuple[int, str], Response]:
        query = Response.objects.filter(
            prompt_id__in={p for p, _ in wanted}, content_hash__in={h for _, h in wanted}
        )
        return {(r.prompt_id, r.content_hash): r for r in query}

    found = fetch()
    missing = [
        Response(prompt_id=p, content_hash=h, text=text, model_name=model)
        for (p, h), (text, model) in wanted.items()
        if (p, h) not in found
    ]
    Response.objects.bulk_create(missing, ignore_conflicts=True)
    return fetch() if missing else found


def _annotators_for(
    project: Project, rows: list[ImportedComparison], counts: _Counts
) -> dict[str, AbstractBaseUser]:
    """Accounts for the annotators named in the rows; new ones are inactive with no password."""
    user_model = get_user_model()
    names = {j.annotator for row in rows for j in row.judgements}
    if not names:
        return {}
    found = {u.get_username(): u for u in user_model.objects.filter(username__in=names)}
    missing = sorted(names - set(found))
    if missing:
        unusable = make_password(None)
        user_model.objects.bulk_create(
            [user_model(username=n, is_active=False, password=unusable) for n in missing]
        )
        found = {u.get_username(): u for u in user_model.objects.filter(username__in=names)}
        group, _ = Group.objects.get_or_create(name=ANNOTATOR)
        group.user_set.add(*(found[n] for n in missing))
        counts.annotators_created += len(missing)
    project.members.add(*found.values())
    return found


def _write_chunk(project: Project, rows: list[ImportedComparison], counts: _Counts) -> None:
    # Rows repeating one comparison inside the chunk are merged (their judgements were checked).
    merged: dict[str, ImportedComparison] = {}
    for row in rows:
        first = merged.get(row.comparison_hash)
        merged[row.comparison_hash] = (
            row
            if first is None
            else ImportedComparison(
                **{**first.__dict__, "judgements": first.judgements + row.judgements}
            )
        )
    rows = list(merged.values())
    prompts = _prompts_for(project, rows)
    responses = _responses_for(rows, prompts)

    existing = {
        c.content_hash: c
        for c in Comparison.objects.filter(project=project, content_hash__in=merged)
    }
    new = []
    # New pairs join the end of the hand-out queue (after any cluster-balanced order).
    next_position = (
        Comparison.objects.filter(project=project).aggregate(top=Max("queue_position"))["top"] or 0
    ) + 1
    for row in rows:
        if row.comparison_hash in existing:
            counts.comparisons_existing += 1
            continue
        prompt = prompts[row.prompt_hash]
        new.append(
            Comparison(
                project=project,
                queue_position=next_position + len(new),
                prompt=prompt,
                response_a=responses[(prompt.pk, content_hash(row.response_a))],
                response_b=responses[(prompt.pk, content_hash(row.response_b))],
                gold=row.gold,
                external_id=row.external_id,
                content_hash=row.comparison_hash,
                metadata=row.metadata,
            )
        )
    Comparison.objects.bulk_create(new)
    counts.comparisons_created += len(new)
    comparisons = {
        c.content_hash: c
        for c in Comparison.objects.filter(project=project, content_hash__in=merged)
    }

    annotators = _annotators_for(project, rows, counts)
    if not annotators:
        return
    judged = set(
        Judgement.objects.filter(
            comparison__in=comparisons.values(), annotator__in=annotators.values()
        ).values_list("comparison_id", "annotator_id")
    )
    fresh: list[Judgement] = []
    for row in rows:
        comparison = comparisons[row.comparison_hash]
        for item in row.judgements:
            annotator = annotators[item.annotator]
            if (comparison.pk, annotator.pk) in judged:
                counts.judgements_existing += 1
                continue
            fresh.append(
                Judgement(
                    comparison=comparison,
                    annotator=annotator,
                    choice=item.choice,
                    strength=item.strength,
                    rationale=item.rationale,
                    shown_left=item.shown_left,
                    elapsed_ms=item.elapsed_ms,
                )
            )
    Judgement.objects.bulk_create(fresh)
    counts.judgements_created += len(fresh)
    # Each imported judgement takes one of its comparison's overlap slots.
    added: dict[int, int] = {}
    for judgement in fresh:
        added[judgement.comparison_id] = added.get(judgement.comparison_id, 0) + 1
    by_amount: dict[int, list[int]] = {}
    for comparison_id, amount in added.items():
        by_amount.setdefault(amount, []).append(comparison_id)
    for amount, ids in by_amount.items():  # F() so concurrent claims' increments are not lost
        Comparison.objects.filter(pk__in=ids).update(taken=F("taken") + amount)


def comparisons_import(
    *, project: Project, lines: Source, progress: Progress | None = None
) -> ImportResult:
    """Import comparison JSONL into ``project``: all or nothing, idempotent on re-import.

    ``lines`` is a list of lines or the Path of a file (read twice, never held in memory). Any bad
    line raises ImportValidationError listing each bad line and field, and nothing is written. Rows
    already present (same prompt and responses) are not duplicated; judgements already present (same
    comparison and annotator) are kept as they are.
    """
    total = _validate(lines, progress)
    counts = _Counts()
    done = 0
    with transaction.atomic():
        rows = (row for row in _rows(lines) if not isinstance(row, list))
        while chunk := list(islice(rows, CHUNK_ROWS)):
            _write_chunk(project, chunk, counts)
            done += len(chunk)
            if progress is not None:
                progress("importing", done, total)
        if counts.judgements_created:
            from annotation.labelling import judgements_changed

            judgements_changed(project)
    return ImportResult(rows=total, **counts.__dict__)


@transaction.atomic
def project_import(
    *, slug: str, lines: Source, progress: Progress | None = None
) -> tuple[Project, bool, ImportResult]:
    """Import JSONL into the project ``slug``, creating it if missing; on any error neither happens."""
    project, created = project_get_or_create(slug=slug)
    return project, created, comparisons_import(project=project, lines=lines, progress=progress)
