"""Reads of the labelling screen: an annotator's progress and history in a project."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.core.cache import cache
from django.db import connection
from django.db.models import Exists, F, OuterRef
from django.utils import timezone

from annotation.models import (
    SCREEN_PAIR,
    Assignment,
    Comparison,
    Judgement,
    Project,
    ProjectMembership,
    Side,
)
from common.sides import screen_side

BATCH_SIZE = 20
OPEN_PAIRS_CACHE_S = 5  # seconds a count of open pairs stays fresh, at least
OPEN_PAIRS_COST_FACTOR = (
    100  # ... and this many times the seconds it took (counting <= 1% of the time)
)
OPEN_PAIRS_KEEP_S = 3600  # a stale count is served this long while one request recounts
OPEN_PAIRS_LOCK_S = 60  # the recount lock outlives a request that died while counting


@dataclass(frozen=True)
class LabellingProgress:
    """An annotator's progress in a project, for the labelling screen.

    ``done``: their judgements in the project (imported ones included); ``labelled``: pairs they
    judged on the labelling screen (gold items and swap repeats included, imports and simulated
    judgements not); ``done_today``: those of ``labelled`` finished since local midnight;
    ``available``: pairs still to do for them, the ones they hold (on screen or reserved ahead)
    included, so the count does not move while they edit an earlier judgement.
    """

    done: int
    done_today: int
    available: int
    labelled: int = 0

    @property
    def batch_number(self) -> int:
        """The batch (1-based, blocks of BATCH_SIZE labelled pairs) the next pair belongs to."""
        return self.labelled // BATCH_SIZE + 1

    @property
    def batch_done(self) -> int:
        """Pairs labelled in the current batch (0 right after a batch is finished: a new one began)."""
        return self.labelled % BATCH_SIZE

    @property
    def batch_size(self) -> int:
        """BATCH_SIZE, always: a size cut to the pairs left would shrink as other annotators take
        pairs (the last batch simply ends early; ``available`` says how many are left)."""
        return BATCH_SIZE


# The labelling page's per-annotator counts in one statement (it is on every page load; the ORM
# would build several queries, one with a union, each time): judgements in the project; pairs
# labelled on the screen (done assignments) in all and today; the leases they hold now; the pairs
# their own claims since ``since`` filled (see labelling_progress); the open pairs (below the
# overlap, not gold) the annotator was already given or judged. The open pairs are
# driven from the annotator's own rows: from the project's side it hashes every open pair.
_PROGRESS_SQL = f"""
SELECT (SELECT count(*) FROM {Judgement._meta.db_table} j
        JOIN {Comparison._meta.db_table} jc ON jc.id = j.comparison_id
        WHERE j.annotator_id = %(annotator)s AND jc.project_id = %(project)s),
       count(*) FILTER (WHERE a.status = 'done'),
       count(*) FILTER (WHERE a.status = 'done' AND a.finished_at >= %(day)s),
       count(*) FILTER (WHERE a.status = 'active' AND a.expires_at >= %(now)s),
       count(*) FILTER (WHERE a.kind = 'normal' AND a.claimed_at > %(since)s
                        AND ac.taken >= %(overlap)s AND ac.gold = ''),
       (SELECT count(*) FROM {Comparison._meta.db_table} c
        WHERE c.project_id = %(project)s AND c.taken < %(overlap)s AND c.gold = ''
          AND c.id IN (SELECT comparison_id FROM {Assignment._meta.db_table}
                       WHERE annotator_id = %(annotator)s
                       UNION SELECT comparison_id FROM {Judgement._meta.db_table}
                       WHERE annotator_id = %(annotator)s))
FROM {Assignment._meta.db_table} a JOIN {Comparison._meta.db_table} ac ON ac.id = a.comparison_id
WHERE a.annotator_id = %(annotator)s AND ac.project_id = %(project)s
"""  # noqa: S608 - table names from the models; every value is a parameter  # nosec B608


def _open_pairs(project: Project) -> tuple[int, datetime]:
    """The project's open pairs (below their overlap, not gold) and when they were counted.

    Counting them scans the project's comparisons (about 200 ms at a million), more than the rest
    of the page, so the count is kept in the shared cache and served stale while one request
    recounts: it stays fresh OPEN_PAIRS_COST_FACTOR times as long as it took to count (at least
    OPEN_PAIRS_CACHE_S), and when it is older the one request that takes the recount lock counts
    again while every other request keeps the old figure. Without the lock every request of a
    busy project would count at once as the figure expired, each scan slowing the others.
    """
    key = f"concord:open-pairs:{project.pk}:{project.created_at.timestamp()}"
    cached = cache.get(key)
    if cached is not None:
        open_count, counted_at, fresh_s = cached
        age_s = (timezone.now() - counted_at).total_seconds()
        if age_s < fresh_s or not cache.add(f"{key}:recount", "1", OPEN_PAIRS_LOCK_S):
            return open_count, counted_at
    started = time.monotonic()
    counted_at = timezone.now()
    open_count = (
        Comparison.objects.filter(project=project, taken__lt=project.overlap, gold="")
        .exclude(target_overlap__lte=F("taken"))  # overlap reduction left it fewer slots
        .count()
    )
    fresh_s = max(OPEN_PAIRS_CACHE_S, OPEN_PAIRS_COST_FACTOR * (time.monotonic() - started))
    cache.set(key, (open_count, counted_at, fresh_s), OPEN_PAIRS_KEEP_S)
    cache.delete(f"{key}:recount")
    return open_count, counted_at


def labelling_progress(*, annotator: AbstractBaseUser, project: Project) -> LabellingProgress:
    """Counts for the labelling screen's progress bars (see LabellingProgress)."""
    now = timezone.now()
    start_of_day = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    # The open pairs come from a shared count a few seconds old (_open_pairs); the annotator's own
    # claims since it was taken that filled a pair are taken off it at once: the count of pairs
    # left never stays up after their own submission, then drops by several.
    open_count, counted_at = _open_pairs(project)
    params = {
        "annotator": annotator.pk,
        "project": project.pk,
        "overlap": project.overlap,
        "day": start_of_day,
        "now": now,
        "since": counted_at,
    }
    with connection.cursor() as cursor:
        cursor.execute(_PROGRESS_SQL, params)
        done, labelled, done_today, holding, filled_since, touched = cursor.fetchone()
    return LabellingProgress(
        done=done,
        done_today=done_today,
        available=max(0, open_count - touched - filled_since) + holding,
        labelled=labelled,
    )


@dataclass(frozen=True)
class HistoryEntry:
    """One of the annotator's recent judgements as the labelling screen lists it: the verdict in
    screen terms (``pick``: left / right / tie / both_bad, as they saw it), a prompt excerpt."""

    judgement_id: int
    pick: str
    strength: int
    prompt_excerpt: str
    rationale: str
    created_at: datetime
    edited: bool


HISTORY_LENGTH = 30
EDITED_AFTER_S = 0.05


def labelling_history(
    *, annotator: AbstractBaseUser, project: Project, limit: int = HISTORY_LENGTH
) -> list[HistoryEntry]:
    """The annotator's last ``limit`` judgements in the project made on the labelling screen
    (newest first), each editable. Imported or simulated judgements (no assignment) are not listed."""
    on_screen = Assignment.objects.filter(
        comparison=OuterRef("comparison"),
        annotator=annotator,
        status=Assignment.Status.DONE,
        kind__in=[Assignment.Kind.NORMAL, Assignment.Kind.GOLD],
    )
    rows = (
        Judgement.objects.filter(comparison__project=project, annotator=annotator)
        .filter(Exists(on_screen))
        .order_by("-created_at", "-pk")
        .values_list(
            "pk",
            "choice",
            "strength",
            "shown_left",
            "rationale",
            "created_at",
            "updated_at",
            "comparison__prompt__text",
        )[:limit]
    )
    entries = []
    for pk, choice, strength, shown_left, rationale, created, updated, text in rows:
        pick = choice
        if choice in ("a", "b"):
            pick = screen_side(choice, shown_left=shown_left or Side.A, pair=SCREEN_PAIR)
        excerpt = " ".join(text.split())
        entries.append(
            HistoryEntry(
                judgement_id=pk,
                pick=pick,
                strength=strength,
                prompt_excerpt=excerpt[:80] + ("…" if len(excerpt) > 80 else ""),
                rationale=rationale,
                created_at=created,
                # created_at and updated_at are stamped microseconds apart on insert
                edited=(updated - created).total_seconds() > EDITED_AFTER_S,
            )
        )
    return entries


def judgement_last(*, annotator: AbstractBaseUser, project: Project) -> Judgement | None:
    """The annotator's most recent judgement in the project (what Z brings back to edit)."""
    return (
        Judgement.objects.select_related("comparison__prompt", "comparison__project")
        .filter(comparison__project=project, annotator=annotator)
        .order_by("-updated_at", "-pk")
        .first()
    )


def judgement_own(
    *, annotator: AbstractBaseUser, project: Project, judgement_id: int
) -> Judgement | None:
    """The annotator's own judgement ``judgement_id`` in the project (from their history), or None
    when there is no such judgement of theirs there."""
    return (
        Judgement.objects.select_related("comparison__prompt", "comparison__project")
        .filter(pk=judgement_id, comparison__project=project, annotator=annotator)
        .first()
    )


def labelling_stopped(*, annotator: AbstractBaseUser, project: Project) -> str | None:
    """Why ``annotator`` gets no new pairs in ``project`` other than there being none left:
    "archived" (the lead archived the project), "paused" (the lead paused this annotator), or None."""
    if project.archived_at is not None:
        return "archived"
    paused = ProjectMembership.objects.filter(
        project=project, user=annotator, paused_at__isnull=False
    ).exists()
    return "paused" if paused else None
