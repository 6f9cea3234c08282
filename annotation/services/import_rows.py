"""The row-by-row write path of the import (SQLite's, the demo's; PostgreSQL's with
CONCORD_IMPORT_BULK off): one chunk of checked rows written with the ORM's bulk queries.

``annotation.services.importing`` reads and checks the rows and calls ``chunk_write`` for each chunk,
inside its one transaction. Prompts and responses are found by their content hash, comparisons by
their key (``comparison_hash``: the id, or the content); new comparisons join the end of the
hand-out queue; a judgement per (comparison, annotator) at most, each taking one overlap slot.
``annotation.services.import_copy`` does the same with COPY and set-based SQL.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import AbstractBaseUser, Group
from django.db.models import F, Max

from annotation.models import Comparison, Judgement, Project, Prompt, Response
from annotation.parsing import ImportedComparison, ImportValidationError, LineError
from common.roles import ANNOTATOR


@dataclass
class ImportCounts:
    """The import's counts, as ImportResult reports them. ``comparisons_existing`` counts the
    comparisons of the file that the project held before the import, each once (however many rows
    name it, in whichever chunks)."""

    comparisons_created: int = 0
    comparisons_existing: int = 0
    judgements_created: int = 0
    judgements_existing: int = 0
    annotators_created: int = 0


@dataclass
class ExistingSeen:
    """The row path's record of the comparisons it found already stored: ids up to ``before_id``
    were there before the import (counted once each, in ``counted``); later ids are its own."""

    before_id: int
    counted: set[int] = field(default_factory=set)


def _prompts_for(
    project: Project, rows: list[ImportedComparison], answers: dict[str, tuple[int, str]]
) -> dict[str, Prompt]:
    """The rows' prompts, created when missing; ``answers`` (prompt hash -> (line, answer)) go to
    ``Prompt.metadata["answer"]``, filling in a stored prompt that has none. A stored prompt with
    another answer (written by a concurrent import since pass 1) is an ImportValidationError, which
    rolls the whole import back."""
    wanted = {row.prompt_hash: row for row in rows}
    existing = Prompt.objects.filter(project=project, content_hash__in=wanted)
    found = {prompt.content_hash: prompt for prompt in existing}
    missing = [
        Prompt(
            project=project,
            content_hash=h,
            text=row.prompt_text,
            messages=row.messages,
            metadata={"answer": answers[h][1]} if h in answers else {},
        )
        for h, row in wanted.items()
        if h not in found
    ]
    Prompt.objects.bulk_create(missing, ignore_conflicts=True)
    if missing:
        found = {
            p.content_hash: p
            for p in Prompt.objects.filter(project=project, content_hash__in=wanted)
        }
    filled = []
    for h, (line, answer) in answers.items():
        prompt = found[h]
        metadata = prompt.metadata if isinstance(prompt.metadata, dict) else {}
        stored = metadata.get("answer")
        if stored is None:
            prompt.metadata = {**metadata, "answer": answer}
            filled.append(prompt)
        elif str(stored) != answer:
            message = (
                f"{answer!r} differs from the answer {stored!r} the project has for this prompt"
            )
            raise ImportValidationError([LineError(line, "answer", message)])
    Prompt.objects.bulk_update(filled, ["metadata"])
    return found


def _responses_for(
    rows: list[ImportedComparison], prompts: dict[str, Prompt]
) -> dict[tuple[int, str], Response]:
    wanted: dict[tuple[int, str], tuple[str, str]] = {}
    for row in rows:
        prompt_id = prompts[row.prompt_hash].pk
        wanted[(prompt_id, row.hash_a)] = (
            row.response_a,
            row.model_a,
        )
        wanted[(prompt_id, row.hash_b)] = (
            row.response_b,
            row.model_b,
        )

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


def annotators_for(
    project: Project, names: Iterable[str], counts: ImportCounts
) -> dict[str, AbstractBaseUser]:
    """Accounts for the annotators ``names``; new ones are inactive with no password. All become
    members of ``project``."""
    user_model = get_user_model()
    names = set(names)
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


def chunk_write(
    project: Project, rows: list[ImportedComparison], counts: ImportCounts, found: ExistingSeen
) -> None:
    # A prompt's answer may come on any of its rows (pass 1 checked they agree).
    answers = {r.prompt_hash: (r.line, r.answer) for r in rows if r.answer is not None}
    # Rows of one comparison inside the chunk are merged (pass 1 checked their judgements).
    merged: dict[str, ImportedComparison] = {}
    for row in rows:
        first = merged.get(row.comparison_hash)
        if first is not None:
            row = replace(first, judgements=first.judgements + row.judgements)
        merged[row.comparison_hash] = row
    rows = list(merged.values())
    prompts = _prompts_for(project, rows, answers)
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
        stored = existing.get(row.comparison_hash)
        if stored is not None:
            if stored.pk <= found.before_id and stored.pk not in found.counted:
                found.counted.add(stored.pk)
                counts.comparisons_existing += 1
            continue
        prompt = prompts[row.prompt_hash]
        new.append(
            Comparison(
                project=project,
                queue_position=next_position + len(new),
                prompt=prompt,
                response_a=responses[(prompt.pk, row.hash_a)],
                response_b=responses[(prompt.pk, row.hash_b)],
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

    annotators = annotators_for(
        project, {j.annotator for row in rows for j in row.judgements}, counts
    )
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
