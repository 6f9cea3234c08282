"""The labelling loop's writes: claim the next pair, submit, skip, edit the last judgement.

Concurrency: a claim is one short transaction that locks one comparison row with
``SELECT ... FOR UPDATE SKIP LOCKED`` (ordered by queue position, then id), bumps its ``taken`` counter
and records a lease. ``taken`` = active leases + judgements, so a comparison is never handed out beyond
its overlap; PostgreSQL re-checks ``taken < overlap`` on the locked row, so two claims can never both
take the last slot. Claims release expired leases (the slot returns to the pool): at most every
RELEASE_EVERY_S seconds per project, and at once when a claim finds no free pair. A claim that finds
every free pair locked by other claims looks again after pauses of milliseconds
(``claims.BUSY_WAITS_S``) before it says that none is left.

Sides: the response shown on the left alternates between the annotators of a comparison (its
``served`` counter's parity, started from the comparison id so that A is not always first), and is
stored with the lease and the judgement. The screen speaks of left and right; the service maps them
back to the stored responses a and b.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from annotation.models import (
    MAX_STRENGTH,
    SCREEN_PAIR,
    Assignment,
    Choice,
    Comparison,
    GuidelinesVersion,
    Judgement,
    Project,
    RepeatJudgement,
    Side,
)
from annotation.services.suggestions import (
    offered_verdicts,
    suggestion_columns,
    suggestion_sql,
    suggests,
)
from annotation.work_queue.claims import BUSY_WAITS_S, after_locks
from annotation.work_queue.policy import (
    REPEAT_MIN_DISTANCE,
    due,
    lease_skip,
    may_claim,
    release_due,
    release_expired,
    side_for,
)
from common.errors import ConcordError
from common.sides import LEFT, RIGHT, other_side, stored_side

PICKS = ("left", "right", "tie", "both_bad")


logger = logging.getLogger(__name__)


def judgements_changed(project: Project) -> None:
    """After the transaction commits, ask for the project's agreement report to be recomputed
    (debounced: many submissions in a few seconds make one recomputation). A broker that is down
    never costs the annotator the submission."""

    def schedule() -> None:
        from annotation.services.agreement import dashboard_refresh_schedule

        try:
            dashboard_refresh_schedule(project=project)
        except Exception:
            logger.warning(
                "could not schedule the agreement report of %s", project.slug, exc_info=True
            )

    transaction.on_commit(schedule)


class LabellingError(ConcordError):
    """A submission that cannot be accepted as it is (the message says why)."""


@dataclass(frozen=True)
class Verdict:
    """What the annotator pressed: a screen-relative pick and a strength (1-3)."""

    pick: str
    strength: int = 1

    def choice(self, shown_left: str) -> str:
        """The stored choice (a / b / tie / both_bad) for a screen showing ``shown_left`` on the left."""
        if self.pick in (LEFT, RIGHT):
            return stored_side(self.pick, shown_left=shown_left, pair=SCREEN_PAIR)
        return self.pick


# Per process: project pk -> time.monotonic() of this process's last turn at _release_due.
_release_asked: dict[int, float] = {}


def _release_due(project: Project) -> bool:
    """True for one claim per project every RELEASE_EVERY_S seconds (work_queue.policy)."""
    return release_due(project, asked=_release_asked, queue="lease-release")


def _release_expired(project: Project) -> int:
    """Give the slots of expired leases back to the pool; returns how many were released."""
    leases = Assignment.objects.filter(comparison__project=project)
    return release_expired(leases, Comparison, "comparison_id")


def _side_for(comparison: Comparison) -> str:
    """Alternate the left side between a comparison's annotators, starting from its id's parity."""
    return side_for(comparison.pk, comparison.served)


def _lease(
    comparison_id: int,
    project: Project,
    annotator: AbstractBaseUser,
    kind: str,
    shown_left: str,
    ahead: int = 0,
) -> Assignment:
    """A lease of ``project.lease_minutes``, times (1 + ``ahead``) for a pair reserved ``ahead``
    pairs before it is shown (its clock also runs while the pairs before it are read)."""
    return Assignment.objects.create(
        comparison_id=comparison_id,
        annotator=annotator,
        kind=kind,
        shown_left=shown_left,
        expires_at=timezone.now() + timedelta(minutes=project.lease_minutes * (1 + ahead)),
    )


def _never_given_to(annotator: AbstractBaseUser) -> Q:
    """Comparisons the annotator was never assigned and never judged. Spelt as NOT EXISTS (what
    ``exclude()`` across a relation becomes, at a higher cost to build on every claim)."""
    given = Assignment.objects.filter(comparison=OuterRef("pk"), annotator=annotator)
    judged = Judgement.objects.filter(comparison=OuterRef("pk"), annotator=annotator)
    return ~Q(Exists(given)) & ~Q(Exists(judged))


def _with_screen(assignment: Assignment, project: Project) -> Assignment:
    """The assignment with what the labelling screen shows of its comparison (prompt, responses;
    ``suggested_choice``: the suggestion judge's stored verdict, "" for none; ``suggested_by``: its
    account's username) fetched in one query. Not joined into the claim itself: PostgreSQL plans
    the locking query about ten times slower with three more tables in it, on every claim."""
    comparisons = Comparison.objects.select_related("prompt", "response_a", "response_b")
    if suggests(project, assignment.kind):
        comparisons = comparisons.annotate(**suggestion_columns(project))
    assignment.comparison = comparisons.get(pk=assignment.comparison_id)
    assignment.comparison.project = project
    assignment.suggested_choice = getattr(assignment.comparison, "suggested", None) or ""
    assignment.suggested_by = getattr(assignment.comparison, "suggested_by", None) or ""
    return assignment


# Take one slot of the next free comparison in queue order that the annotator was never given or
# judged, in one statement: the inner SELECT locks the row (skipping rows other claims hold), and
# PostgreSQL re-checks ``taken < overlap`` on the locked row, so the last slot goes to one claim only.
# Hand-written: built through the ORM (two NOT EXISTS subqueries, then an UPDATE) it cost more CPU
# than the rest of a claim, on every pair shown. A comparison's ``target_overlap`` (overlap reduction,
# never below 1) lowers its slots below the project's overlap; NULL compares false, so it keeps the
# overlap. Parameters: project, overlap (twice), annotator (twice).
_FREE_PAIR_SQL = """
    SELECT c.id FROM {comparison} c
    WHERE c.project_id = %s AND c.gold = ''
      AND c.taken < CASE WHEN c.target_overlap < %s THEN c.target_overlap ELSE %s END
      AND NOT EXISTS (SELECT 1 FROM {assignment} a
                      WHERE a.comparison_id = c.id AND a.annotator_id = %s)
      AND NOT EXISTS (SELECT 1 FROM {judgement} j
                      WHERE j.comparison_id = c.id AND j.annotator_id = %s)
    ORDER BY c.queue_position, c.id
    LIMIT 1"""
# (S608: the names filled in are the quoted model tables; every value is a parameter.)
_CLAIM_NEXT_SQL = (
    "UPDATE {comparison} SET taken = taken + 1, served = served + 1\nWHERE id = ("  # noqa: S608  # nosec B608
    + _FREE_PAIR_SQL
    + "{lock})\nRETURNING id, served"
)


def _labelling_sql(template: str, lock: str = "") -> str:
    """One of this module's SQL templates with the quoted table names of the comparison,
    assignment and judgement models filled in as {comparison}, {assignment}, {judgement}, and
    ``lock`` as {lock} (empty on SQLite: no row locks, it runs one writer at a time)."""
    quote = connection.ops.quote_name
    return template.format(
        comparison=quote(Comparison._meta.db_table),
        assignment=quote(Assignment._meta.db_table),
        judgement=quote(Judgement._meta.db_table),
        lock=lock,
    )


def _claim_normal(
    project: Project, annotator: AbstractBaseUser, ahead: int = 0
) -> Assignment | None:
    skip_locked = connection.features.has_select_for_update_skip_locked
    sql = _labelling_sql(_CLAIM_NEXT_SQL, " FOR UPDATE SKIP LOCKED" if skip_locked else "")
    params = [project.pk, project.overlap, project.overlap, annotator.pk, annotator.pk]
    with connection.cursor() as cursor:

        def take() -> tuple | None:
            cursor.execute(sql, params)
            return cursor.fetchone()

        def locked_left() -> bool:  # a free pair another claim holds may still have a slot
            cursor.execute(_labelling_sql(_FREE_PAIR_SQL), params)
            return cursor.fetchone() is not None

        row = after_locks(take, locked_left, iter(BUSY_WAITS_S if skip_locked else ()))
    if row is None:
        return None
    comparison_id, served = row
    shown_left = _side_for(Comparison(pk=comparison_id, served=served - 1))
    return _lease(comparison_id, project, annotator, Assignment.Kind.NORMAL, shown_left, ahead)


def _claim_gold(project: Project, annotator: AbstractBaseUser, ahead: int = 0) -> Assignment | None:
    """A gold item the annotator has not seen; gold items go to everyone, outside the overlap."""
    comparison = (
        Comparison.objects.filter(project=project)
        .exclude(gold="")
        .filter(_never_given_to(annotator))
        .order_by("queue_position", "pk")
        .first()
    )
    if comparison is None:
        return None
    Comparison.objects.filter(pk=comparison.pk).update(served=F("served") + 1)
    side = _side_for(comparison)
    return _lease(comparison.pk, project, annotator, Assignment.Kind.GOLD, side, ahead)


def _claim_repeat(
    project: Project, annotator: AbstractBaseUser, ahead: int = 0
) -> Assignment | None:
    """A pair the annotator judged a while ago and has not repeated, with the sides flipped."""
    judged = list(
        Judgement.objects.filter(comparison__project=project, annotator=annotator)
        .exclude(shown_left="")
        .order_by("-created_at")
        .values_list("comparison_id", "shown_left")[REPEAT_MIN_DISTANCE : REPEAT_MIN_DISTANCE + 50]
    )
    repeated = set(
        Assignment.objects.filter(
            annotator=annotator,
            kind=Assignment.Kind.REPEAT,
            comparison_id__in=[c for c, _ in judged],
        ).values_list("comparison_id", flat=True)
    )
    for comparison_id, shown_left in reversed(judged):  # the oldest first
        if comparison_id not in repeated:
            flipped = other_side(shown_left, pair=SCREEN_PAIR)
            kind = Assignment.Kind.REPEAT
            return _lease(comparison_id, project, annotator, kind, flipped, ahead)
    return None


# The annotator's unexpired lease in a project, if any. Parameters: project, annotator, status, now.
_ACTIVE_LEASE_SQL = """
SELECT a.* FROM {assignment} a JOIN {comparison} c ON c.id = a.comparison_id
WHERE c.project_id = %s AND a.annotator_id = %s AND a.status = %s AND a.expires_at >= %s
ORDER BY a.id
LIMIT 1
"""


def _active_lease(project: Project, annotator: AbstractBaseUser) -> Assignment | None:
    """The lease a page reload shows again. Hand-written for the CPU it saves on every claim."""
    sql = _labelling_sql(_ACTIVE_LEASE_SQL)
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    params = [project.pk, annotator.pk, Assignment.Status.ACTIVE.value, now]
    return next(iter(Assignment.objects.raw(sql, params)), None)


def assignment_claim(*, annotator: AbstractBaseUser, project: Project) -> Assignment | None:
    """The annotator's current pair in ``project``, or a newly claimed one; None when none is left.

    An active lease is returned again (a page reload shows the same pair). Otherwise, every
    ``gold_every``-th pair is a gold item and every ``repeat_every``-th a swap repeat, when one is
    available; else the next comparison in queue order that still has a free slot and that this
    annotator has never been given.
    """
    with transaction.atomic():
        released = _release_due(project)
        if released:
            _release_expired(project)
        assignment = _active_lease(project, annotator)
        if assignment is None and not may_claim(project, annotator):
            return None  # (archiving and pausing released the leases: none is returned above)
        if assignment is None and (project.repeat_every or project.gold_every):
            assignment = _claim_special(project, annotator)
        if assignment is None:
            assignment = _claim_normal(project, annotator)
        if assignment is None and not released and _release_expired(project):
            assignment = _claim_normal(project, annotator)  # an expired lease freed a slot
    # After the commit: the claimed comparison's row lock is held no longer than needed.
    return None if assignment is None else _with_screen(assignment, project)


# The annotator's unexpired leases in a project after ``current`` (the pair on screen), oldest
# first. Parameters: project, annotator, status, now, current.
_LEASES_AFTER_SQL = """
SELECT a.* FROM {assignment} a JOIN {comparison} c ON c.id = a.comparison_id
WHERE c.project_id = %s AND a.annotator_id = %s AND a.status = %s AND a.expires_at >= %s
  AND a.id > %s
ORDER BY a.id
LIMIT 1
"""


def assignment_reserve_next(
    *, annotator: AbstractBaseUser, project: Project, current_id: int
) -> Assignment | None:
    """The pair the annotator will see after their current one (``current_id``), claimed now with
    its own lease so the screen can show it the moment the current one is submitted; None when
    none is left.

    Idempotent: a lease the annotator already holds after ``current_id`` is returned again, so at
    most one pair is reserved ahead however often the screen asks. The reservation is an ordinary
    claim (the same statement, the overlap and the side rules; gold items and swap repeats fall
    where they would have fallen), with a lease twice as long: its clock runs while the current
    pair is read. Since leases are shown oldest first, a page reload still shows ``current_id``.
    """
    with transaction.atomic():
        sql = _labelling_sql(_LEASES_AFTER_SQL)
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        params = [project.pk, annotator.pk, Assignment.Status.ACTIVE.value, now, current_id]
        assignment = next(iter(Assignment.objects.raw(sql, params)), None)
        if assignment is None and not may_claim(project, annotator):
            return None
        if assignment is None and (project.repeat_every or project.gold_every):
            assignment = _claim_special(project, annotator, ahead=1)
        if assignment is None:
            assignment = _claim_normal(project, annotator, ahead=1)
    return None if assignment is None else _with_screen(assignment, project)


def _claim_special(
    project: Project, annotator: AbstractBaseUser, ahead: int = 0
) -> Assignment | None:
    """A swap repeat or a gold item when one is due for the annotator, else None. ``ahead``: how
    many pairs the annotator holds before this one (they will be done when it is shown)."""
    done = ahead + (
        Assignment.objects.filter(
            comparison__project=project, annotator=annotator, status=Assignment.Status.DONE
        ).count()
    )
    try:
        with transaction.atomic():
            if due(project.repeat_every, done) and (
                repeat := _claim_repeat(project, annotator, ahead)
            ):
                return repeat
            if due(project.gold_every, done) and (gold := _claim_gold(project, annotator, ahead)):
                return gold
    except IntegrityError:
        pass  # a concurrent tab claimed the same special item: fall back to a normal pair
    return None


def _validate(project: Project, verdict: Verdict) -> None:
    if verdict.pick not in PICKS:
        raise LabellingError(f"unknown pick {verdict.pick!r}; expected one of {PICKS}")
    if verdict.pick == "tie" and not project.allow_ties:
        raise LabellingError("this project does not allow ties")
    if verdict.pick == "both_bad" and not project.allow_both_bad:
        raise LabellingError("this project does not allow 'both bad'")
    if not 1 <= verdict.strength <= min(MAX_STRENGTH, project.strength_scale):
        raise LabellingError(f"strength must be between 1 and {project.strength_scale}")


# The annotator's assignment, locked, with its comparison's project. Only the assignment's row is
# locked: joined rows (the comparison, the project every submission shares) would make all of a
# project's submissions wait for one another. Parameters: assignment, annotator.
_OWN_ASSIGNMENT_SQL = """
SELECT a.*, c.project_id AS project_of_comparison
FROM {assignment} a JOIN {comparison} c ON c.id = a.comparison_id
WHERE a.id = %s AND a.annotator_id = %s
{lock}
"""


def _locked_assignment(assignment_id: int, annotator: AbstractBaseUser) -> Assignment | None:
    """The annotator's assignment ``assignment_id``, row-locked until the transaction ends (None if
    it is not theirs, or no longer exists). Hand-written for the CPU it saves on every submission."""
    features = connection.features
    lock = ""
    if features.has_select_for_update:
        lock = "FOR UPDATE OF a" if features.has_select_for_update_of else "FOR UPDATE"
    sql = _labelling_sql(_OWN_ASSIGNMENT_SQL, lock)
    return next(iter(Assignment.objects.raw(sql, [assignment_id, annotator.pk])), None)


def judgement_submit(
    *,
    annotator: AbstractBaseUser,
    assignment_id: int,
    verdict: Verdict,
    rationale: str = "",
    elapsed_ms: int | None = None,
    project: Project | None = None,
) -> Judgement | RepeatJudgement:
    """Record the annotator's verdict on their assignment; idempotent for retries and double clicks.

    A second submission of the same assignment returns the stored judgement unchanged (edits go
    through ``judgement_edit``). A submission that arrives after its lease expired is still kept:
    nothing an annotator submitted is lost. ``project``: the caller's copy of the assignment's
    project, if it has one (saves a query; any other project is ignored and the right one read).
    """
    with transaction.atomic():
        assignment = _locked_assignment(assignment_id, annotator)
        if assignment is None:
            # The lease expired and was released; the pair may have been handed to someone else.
            raise LabellingError("this pair is no longer assigned to you; the next pair is loaded")
        if project is None or project.pk != assignment.project_of_comparison:
            project = Project.objects.get(pk=assignment.project_of_comparison)
        _validate(project, verdict)
        choice = verdict.choice(assignment.shown_left)
        strength = 1 if choice in (Choice.TIE, Choice.BOTH_BAD) else verdict.strength
        fields = {
            "choice": choice,
            "strength": strength,
            "shown_left": assignment.shown_left,
            "elapsed_ms": elapsed_ms,
        }
        if assignment.kind == Assignment.Kind.REPEAT:
            model, values = RepeatJudgement, fields
        else:
            model, values = Judgement, {**fields, "rationale": rationale[:10_000]}
        comparison_id = assignment.comparison_id
        mine = model.objects.filter(comparison_id=comparison_id, annotator=annotator)
        # A retry or a double click finds the assignment done and gets the stored judgement back;
        # a first submission inserts without looking first (the unique constraint settles a race
        # with an import of the same pair for this annotator: the row already there is kept).
        stored = mine.first() if assignment.status == Assignment.Status.DONE else None
        if stored is None:
            row = model(comparison_id=comparison_id, annotator=annotator, **values)
            judge_id = project.suggestion_judge_id if suggests(project, assignment.kind) else None
            stored = (
                _insert_unless_judged(
                    row,
                    project_id=project.pk,
                    suggestion_judge_id=judge_id,
                    suggestion_choices=offered_verdicts(project),
                )
                or mine.get()
            )
        if assignment.status != Assignment.Status.DONE:
            assignment.status = Assignment.Status.DONE
            assignment.finished_at = timezone.now()
            assignment.save(update_fields=["status", "finished_at"])
            judgements_changed(project)
        return stored


def _insert_unless_judged(
    row: Judgement | RepeatJudgement,
    *,
    project_id: int,
    suggestion_judge_id: int | None = None,
    suggestion_choices: list[str] | None = None,
) -> Judgement | RepeatJudgement | None:
    """INSERT ``row`` unless the annotator already has one for its comparison (then None). A
    Judgement is stamped, in the same statement, with project ``project_id``'s newest guidelines
    version and, when ``suggestion_judge_id`` is given, with that account's verdict on the
    comparison as ``suggested_choice`` if it is one of ``suggestion_choices`` (what the screen
    pre-selected; "" otherwise): subqueries, no extra round trip on the hot path.

    One statement, ``INSERT ... ON CONFLICT (comparison_id, annotator_id) DO NOTHING RETURNING id``,
    where ``create()`` inside a savepoint costs three round trips to the database on every
    submission (SAVEPOINT, INSERT, RELEASE). PostgreSQL and SQLite (3.35+) both speak it.
    """
    meta = row._meta
    for field in meta.concrete_fields:
        if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
            field.pre_save(row, add=True)  # sets created_at / updated_at on the instance
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    quote = connection.ops.quote_name
    versions = GuidelinesVersion._meta
    stamp = (
        f"(SELECT v.{quote(versions.pk.column)} FROM {quote(versions.db_table)} v "  # noqa: S608  # nosec B608
        f"WHERE v.{quote('project_id')} = %s ORDER BY v.{quote('number')} DESC LIMIT 1)"
    )
    choices = list(suggestion_choices or Choice.values)
    stamped = isinstance(row, Judgement)
    slots, params = [], []
    for f in fields:
        if stamped and f.attname == "guidelines_version_id":
            slots.append(stamp)
            params.append(project_id)
        elif stamped and f.attname == "suggested_choice" and suggestion_judge_id is not None:
            slots.append(suggestion_sql(quote(meta.db_table), len(choices)))
            params += [row.comparison_id, suggestion_judge_id, *choices]
        else:
            slots.append("%s")
            params.append(f.get_db_prep_save(getattr(row, f.attname), connection))
    returning = quote(meta.pk.column)
    if stamped:
        returning += f", {quote('guidelines_version_id')}, {quote('suggested_choice')}"
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "  # noqa: S608  # nosec B608
        f"VALUES ({', '.join(slots)}) "
        f"ON CONFLICT ({quote('comparison_id')}, {quote('annotator_id')}) DO NOTHING "
        f"RETURNING {returning}"
    )  # names from the model's metadata; every value is a parameter
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        inserted = cursor.fetchone()
    if inserted is None:
        return None
    row.pk = inserted[0]
    if stamped:
        row.guidelines_version_id, row.suggested_choice = inserted[1], inserted[2]
    row._state.adding = False
    row._state.db = connection.alias
    return row


def assignment_skip(*, annotator: AbstractBaseUser, assignment_id: int) -> None:
    """Give the pair back without judging it; it is not offered to this annotator again."""
    lease_skip(
        Assignment.objects.filter(annotator=annotator), Comparison, "comparison_id", assignment_id
    )


def judgement_edit(
    *, annotator: AbstractBaseUser, judgement_id: int, verdict: Verdict, rationale: str = ""
) -> Judgement:
    """Change the annotator's own judgement (undo); the side shown when it was made is kept."""
    with transaction.atomic():
        judgement = (
            Judgement.objects.select_for_update(of=("self",))
            .select_related("comparison__project")
            .filter(Q(pk=judgement_id) & Q(annotator=annotator))
            .first()
        )
        if judgement is None:
            raise LabellingError("no such judgement of yours")
        _validate(judgement.comparison.project, verdict)
        shown_left = judgement.shown_left or Side.A
        judgement.choice = verdict.choice(shown_left)
        judgement.strength = (
            1 if judgement.choice in (Choice.TIE, Choice.BOTH_BAD) else verdict.strength
        )
        judgement.rationale = rationale[:10_000]
        judgement.save(update_fields=["choice", "strength", "rationale", "updated_at"])
        judgements_changed(judgement.comparison.project)
        return judgement
