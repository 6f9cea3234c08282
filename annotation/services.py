"""Writes of the annotation domain. Views, commands and tasks call these; none holds logic of its own."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import F
from django.utils.text import slugify

from annotation.importing import (
    ImportedComparison,
    ImportValidationError,
    LineError,
    content_hash,
    parse_jsonl,
)
from annotation.models import Comparison, Judgement, Project, Prompt, Response
from common.roles import ANNOTATOR, role_assign


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


def _annotator_for(name: str, cache: dict[str, AbstractBaseUser]) -> tuple[AbstractBaseUser, bool]:
    """The account called ``name``; a new one is inactive with no usable password until activated."""
    if name in cache:
        return cache[name], False
    user_model = get_user_model()
    user, created = user_model.objects.get_or_create(username=name, defaults={"is_active": False})
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
        role_assign(user=user, role=ANNOTATOR)
    cache[name] = user
    return user, created


def _merge_duplicate_rows(rows: list[ImportedComparison]) -> list[ImportedComparison]:
    """Rows with the same content become one comparison; the same annotator twice is an error."""
    merged: dict[str, ImportedComparison] = {}
    errors: list[LineError] = []
    for row in rows:
        first = merged.get(row.comparison_hash)
        if first is None:
            merged[row.comparison_hash] = row
            continue
        names = {j.annotator for j in first.judgements}
        for judgement in row.judgements:
            if judgement.annotator in names:
                errors.append(
                    LineError(
                        row.line,
                        "judgements",
                        f"{judgement.annotator!r} already judged this comparison on line "
                        f"{first.line}",
                    )
                )
        merged[row.comparison_hash] = ImportedComparison(
            **{**first.__dict__, "judgements": first.judgements + row.judgements}
        )
    if errors:
        raise ImportValidationError(errors)
    return list(merged.values())


def _response_for(prompt: Prompt, text: str, model_name: str) -> Response:
    response, _ = Response.objects.get_or_create(
        prompt=prompt,
        content_hash=content_hash(text),
        defaults={"text": text, "model_name": model_name},
    )
    return response


def comparisons_import(*, project: Project, lines: Iterable[str]) -> ImportResult:
    """Import comparison JSONL into ``project``: all or nothing, idempotent on re-import.

    Every line is validated first; any error raises ImportValidationError listing each bad line and
    field, and nothing is written. Rows already present (same prompt and responses) are not duplicated,
    and judgements already present (same comparison and annotator) are kept as they are.
    """
    parsed: list[ImportedComparison] = []
    errors: list[LineError] = []
    for item in parse_jsonl(lines):
        if isinstance(item, list):
            errors.extend(item)
        else:
            parsed.append(item)
    if errors:
        raise ImportValidationError(errors)
    rows = _merge_duplicate_rows(parsed)

    created = existing = j_created = j_existing = accounts = 0
    annotators: dict[str, AbstractBaseUser] = {}
    with transaction.atomic():
        for row in rows:
            prompt, _ = Prompt.objects.get_or_create(
                project=project,
                content_hash=row.prompt_hash,
                defaults={"text": row.prompt_text, "messages": row.messages},
            )
            comparison, was_created = Comparison.objects.get_or_create(
                project=project,
                content_hash=row.comparison_hash,
                defaults={
                    "prompt": prompt,
                    "response_a": _response_for(prompt, row.response_a, row.model_a),
                    "response_b": _response_for(prompt, row.response_b, row.model_b),
                    "gold": row.gold,
                    "external_id": row.external_id,
                    "metadata": row.metadata,
                },
            )
            created += was_created
            existing += not was_created
            for item in row.judgements:
                annotator, new_account = _annotator_for(item.annotator, annotators)
                accounts += new_account
                project.members.add(annotator)
                _, judged = Judgement.objects.get_or_create(
                    comparison=comparison,
                    annotator=annotator,
                    defaults={
                        "choice": item.choice,
                        "strength": item.strength,
                        "rationale": item.rationale,
                        "shown_left": item.shown_left,
                        "elapsed_ms": item.elapsed_ms,
                    },
                )
                j_created += judged
                j_existing += not judged
                if judged:  # an imported judgement takes one of the comparison's overlap slots
                    Comparison.objects.filter(pk=comparison.pk).update(taken=F("taken") + 1)
    return ImportResult(
        rows=len(parsed),
        comparisons_created=created,
        comparisons_existing=existing,
        judgements_created=j_created,
        judgements_existing=j_existing,
        annotators_created=accounts,
    )


@transaction.atomic
def project_import(*, slug: str, lines: Iterable[str]) -> tuple[Project, bool, ImportResult]:
    """Import JSONL into the project ``slug``, creating it if missing; on any error neither happens."""
    project, created = project_get_or_create(slug=slug)
    return project, created, comparisons_import(project=project, lines=lines)
