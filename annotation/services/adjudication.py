"""Writes for adjudication and guidelines versions: annotators' flags, adjudicators' verdicts (kept
apart from the judgements, superseded but never deleted), guidelines edits as numbered versions, and
the "guidelines changed" notice an annotator sees once.

Bad input raises AdjudicationError with a message for the user, and nothing is written.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from annotation.models import (
    SCREEN_PAIR,
    Adjudication,
    Assignment,
    Choice,
    Comparison,
    Flag,
    GuidelinesSeen,
    GuidelinesVersion,
    Judgement,
    Project,
)
from annotation.selectors.adjudication import QUEUE_REASONS, guidelines_current
from common.sides import LEFT, RIGHT, stored_side

MAX_NOTE = 10_000


class AdjudicationError(ValueError):
    """A flag, verdict or guidelines edit that cannot be stored, with a message for the user."""


def flag_create(
    *, annotator: AbstractBaseUser, assignment_id: int, reason: str, note: str = ""
) -> Flag:
    """Flag the pair of the annotator's assignment ``assignment_id`` (one of Flag.Reason). Flagging
    the same pair for the same reason again keeps one flag and updates its note. Leaves the
    assignment and any judgement as they are (the annotator keeps their place)."""
    if reason not in Flag.Reason.values:
        raise AdjudicationError(
            f"unknown flag reason {reason!r}; expected one of {Flag.Reason.values}"
        )
    assignment = (
        Assignment.objects.filter(pk=assignment_id, annotator=annotator)
        .only("comparison_id")
        .first()
    )
    if assignment is None:
        raise AdjudicationError("this pair is not assigned to you")
    flag, _ = Flag.objects.update_or_create(
        comparison_id=assignment.comparison_id,
        annotator=annotator,
        reason=reason,
        defaults={"note": note.strip()[:MAX_NOTE]},
    )
    return flag


def _choice_from_pick(pick: str, shown_left: str, project: Project) -> str:
    """The stored verdict of a screen pick (left, right, tie, both_bad) with ``shown_left`` on the
    left; a tie or "both bad" only where the project offers it."""
    if shown_left not in SCREEN_PAIR:
        raise AdjudicationError(
            f"shown_left must be one of {list(SCREEN_PAIR)}, got {shown_left!r}"
        )
    if pick in (LEFT, RIGHT):
        return stored_side(pick, shown_left=shown_left, pair=SCREEN_PAIR)
    if pick == Choice.TIE and project.allow_ties:
        return Choice.TIE
    if pick == Choice.BOTH_BAD and project.allow_both_bad:
        return Choice.BOTH_BAD
    raise AdjudicationError(f"pick a verdict: {pick!r} is not one this project offers")


def adjudication_record(
    *,
    comparison: Comparison,
    decided_by: AbstractBaseUser,
    pick: str,
    shown_left: str,
    note: str = "",
    reasons: list[str] | tuple[str, ...] = (),
) -> Adjudication:
    """Record the final verdict on ``comparison``: ``pick`` is what the adjudicator chose on screen
    (left, right, tie, both_bad), ``shown_left`` the stored response (a or b) they saw on the left.

    The comparison's current verdict, if any, is stamped superseded and the new one points at it;
    judgements are never touched. ``reasons``: why it was in the queue (some of QUEUE_REASONS).
    """
    choice = _choice_from_pick(pick, shown_left, comparison.project)
    unknown = set(reasons) - set(QUEUE_REASONS)
    if unknown:
        raise AdjudicationError(f"unknown queue reasons {sorted(unknown)}")
    with transaction.atomic():
        # The comparison's row lock serialises two adjudicators deciding the same pair at once.
        Comparison.objects.select_for_update().filter(pk=comparison.pk).values_list("pk").get()
        current = (
            Adjudication.objects.select_for_update()
            .filter(comparison=comparison, superseded_at__isnull=True)
            .first()
        )
        if current is not None:
            current.superseded_at = timezone.now()
            current.save(update_fields=["superseded_at"])
        return Adjudication.objects.create(
            comparison=comparison,
            choice=choice,
            note=note.strip()[:MAX_NOTE],
            reasons=list(reasons),
            shown_left=shown_left,
            decided_by=decided_by,
            supersedes=current,
        )


def guidelines_update(
    *, project: Project, text: str, user: AbstractBaseUser | None
) -> GuidelinesVersion | None:
    """Set the project's guidelines to ``text`` as a new numbered version by ``user``; None (and
    nothing written) when the text is unchanged. The first edit of a project with guidelines but no
    version also keeps the old text, as version 1 (author unknown), so the change can be shown."""
    if not isinstance(text, str):
        raise AdjudicationError("guidelines must be text")
    with transaction.atomic():
        locked = Project.objects.select_for_update().get(pk=project.pk)
        latest = GuidelinesVersion.objects.filter(project=locked).aggregate(n=Max("number"))["n"]
        if text == locked.guidelines and latest is not None:
            return None
        if latest is None and locked.guidelines and text != locked.guidelines:
            GuidelinesVersion.objects.create(project=locked, number=1, text=locked.guidelines)
            latest = 1
        version = GuidelinesVersion.objects.create(
            project=locked, number=(latest or 0) + 1, text=text, author=user
        )
        Project.objects.filter(pk=locked.pk).update(guidelines=text)
    project.guidelines = text
    return version


@dataclass(frozen=True)
class DiffLine:
    """One line of a guidelines diff: ``kind`` is "added", "removed" or "same"; ``text`` the line."""

    kind: str
    text: str


@dataclass(frozen=True)
class GuidelinesNotice:
    """The "guidelines changed" notice: the version now in force and the change from the one before."""

    number: int
    created_at: object
    diff: list[DiffLine]


def guidelines_diff(old: str, new: str) -> list[DiffLine]:
    """Line diff of two guidelines texts (difflib), unchanged lines included for context."""
    lines = []
    for line in difflib.ndiff(old.splitlines(), new.splitlines()):
        tag, body = line[:2], line[2:]
        if tag == "? ":
            continue  # ndiff's intraline hints
        lines.append(DiffLine(kind={"+ ": "added", "- ": "removed"}.get(tag, "same"), text=body))
    return lines


def guidelines_notice_take(
    *, project: Project, annotator: AbstractBaseUser
) -> GuidelinesNotice | None:
    """The notice the annotator should see now, at most once per version: the newest version and
    its diff against the version before, when it is newer than the last one they were told of. An
    annotator who never saw a notice gets one only if they judged in the project before the newest
    version (a newcomer starts with the current guidelines). Records what they were told."""
    current = guidelines_current(project=project)
    if current is None:
        return None
    seen = GuidelinesSeen.objects.filter(project=project, annotator=annotator).first()
    if seen is None:
        due = Judgement.objects.filter(
            comparison__project=project, annotator=annotator, created_at__lt=current.created_at
        ).exists()
    else:
        due = seen.number < current.number
    if seen is None or seen.number != current.number:
        GuidelinesSeen.objects.update_or_create(
            project=project, annotator=annotator, defaults={"number": current.number}
        )
    if not due:
        return None
    previous = (
        GuidelinesVersion.objects.filter(project=project, number__lt=current.number)
        .order_by("-number")
        .values_list("text", flat=True)
        .first()
    )
    return GuidelinesNotice(
        number=current.number,
        created_at=current.created_at,
        diff=guidelines_diff(previous or "", current.text),
    )
