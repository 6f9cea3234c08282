"""Stored consensus (issue 30): the full Dawid-Skene refit, debounced in the background, and the
backfill of existing projects.

Between fits the database keeps each judged comparison's ``StoredConsensus`` row itself: triggers
on judgements recompute the rows of the comparisons a statement touched, in its transaction, with
the project's last fit held fixed (migration 0013). ``consensus_refit`` learns the fit again from
all of people's judgements (``annotation.agreement.dawid_skene``, the rule of the agreement report
and the export; warm-started from the stored fit when there is one), stores the priors and every
annotator's confusion matrix, and rewrites the project's rows with it, in one transaction:

1. read people's votes (``project_votes``: three packed integer columns, judged comparisons only);
2. EM (pure NumPy/SciPy);
3. compute every row's figures from the votes and the new fit (``agreement.stored_figures``, the
   maths the triggers hold to) and write them set-based: on PostgreSQL a binary ``COPY`` into a
   temporary table, then one ``UPDATE ... FROM`` of the Dawid-Skene columns of rows whose figures
   changed, one ``INSERT`` of rows the table lacks and, when the project has rows beyond those,
   one ``DELETE`` of rows no longer judged; elsewhere ``bulk_create``.

``consensus_refit_schedule`` asks the worker to do it after judgements change; calls within
``REFIT_DELAY_SECONDS`` collapse into one run. Judgements that arrive while a refit runs are the
triggers' (their rows, figured with the old fit, are left as they are: the refit updates only rows
whose majority figures match its read), and the fit stores the judgements' fingerprint taken
before its read, so the refit they scheduled runs rather than skips.

On SQLite (the demo) there are no triggers: the refit writes the rows (majority and Dawid-Skene
both), so the figures follow the judgements a debounce later.
"""

# The SQL below is built from this module's constants only.
# ruff: noqa: S608

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from django.core.cache import cache
from django.db import connection, transaction
from django.utils import timezone

from annotation import agreement
from annotation.models import (
    AnnotatorConfusion,
    ConsensusFit,
    Project,
    StoredConsensus,
)
from annotation.selectors.agreement import (
    ProjectVotes,
    judgements_fingerprint,
    project_votes,
)
from common.jobs import task_send

REFIT_DELAY_SECONDS = 30
CHOICE_FIELDS = ("a", "b", "tie", "both_bad")  # column suffixes, in CHOICES order


def refit_pending_key(project: Project) -> str:
    return f"concord:consensus:pending:{project.pk}"


@dataclass(frozen=True)
class RefitResult:
    """What a refit did: judgements learnt from, EM iterations, comparisons with a stored row, and
    whether it ran at all (False: the fit already matched the judgements)."""

    n_judgements: int
    iterations: int
    n_rows: int
    refitted: bool


def _stored_fit(
    project: Project, annotator_ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """The project's last fit as a warm start: confusion [R, K, K] (P(said | true)) for
    ``annotator_ids`` (uniform rows for an annotator it has not seen) and priors [K]; None when
    there is no fit."""
    fitted = ConsensusFit.objects.filter(project=project).first()
    if fitted is None:
        return None
    k = agreement.N_CHOICES
    confusion = np.full((annotator_ids.size, k, k), 1.0 / k)
    position = {int(pk): r for r, pk in enumerate(annotator_ids)}
    columns = [f"log_{name}" for name in CHOICE_FIELDS]
    for annotator_id, said, *logs in AnnotatorConfusion.objects.filter(project=project).values_list(
        "annotator_id", "said", *columns
    ):
        if annotator_id in position:
            confusion[position[annotator_id], :, agreement.CHOICES.index(said)] = np.exp(logs)
    priors = np.exp([getattr(fitted, f"log_prior_{name}") for name in CHOICE_FIELDS])
    return confusion, priors


def _write_fit(
    project: Project, votes: ProjectVotes, fit: agreement.DawidSkene, fingerprint: list
) -> None:
    """The fit's log priors and each annotator's log confusion rows (one per choice said)."""
    log_priors = np.log(fit.priors)
    ConsensusFit.objects.update_or_create(
        project=project,
        defaults={
            **{
                f"log_prior_{name}": float(v)
                for name, v in zip(CHOICE_FIELDS, log_priors, strict=True)
            },
            "n_judgements": int(votes.table.item.size),
            "iterations": fit.iterations,
            "log_likelihood": fit.log_likelihood,
            "fingerprint": fingerprint,
            "fitted_at": timezone.now(),
        },
    )
    AnnotatorConfusion.objects.filter(project=project).delete()
    log_confusion = np.log(fit.confusion)  # [R, true, said]
    AnnotatorConfusion.objects.bulk_create(
        [
            AnnotatorConfusion(
                project=project,
                annotator_id=int(annotator_id),
                said=said,
                **{
                    f"log_{name}": float(log_confusion[r, k, s])
                    for k, name in enumerate(CHOICE_FIELDS)
                },
            )
            for r, annotator_id in enumerate(votes.annotator_ids)
            for s, said in enumerate(agreement.CHOICES)
        ],
        batch_size=2000,
    )
    if connection.vendor == "postgresql":  # the triggers join every vote with these rows: let the
        with connection.cursor() as cursor:  # planner see how many there are (a hash join)
            cursor.execute("ANALYZE annotation_annotatorconfusion")


def _figures(votes: ProjectVotes, fit: agreement.DawidSkene | None) -> agreement.StoredFigures:
    """Every judged comparison's stored figures from its votes and the fit (None: no fit, uniform
    priors and no annotator information), as the triggers compute them."""
    table = votes.table
    if fit is None:
        log_priors = np.zeros(agreement.N_CHOICES)
        vote_log = np.zeros((table.item.size, agreement.N_CHOICES))
    else:
        log_priors = np.log(fit.priors)
        vote_log = np.log(fit.confusion)[table.annotator, :, table.choice]
    return agreement.stored_figures(
        table.item, table.choice, vote_log, n_items=table.n_items, log_priors=log_priors
    )


def _rows_by_orm(project: Project, votes: ProjectVotes, figures: agreement.StoredFigures) -> None:
    """Rewrite the project's rows through the ORM (databases without COPY: the demo's SQLite)."""

    def choice(code: int) -> str:
        return agreement.CHOICES[code] if code != agreement.MISSING else ""

    StoredConsensus.objects.filter(project=project).delete()
    StoredConsensus.objects.bulk_create(
        [
            StoredConsensus(
                comparison_id=int(votes.comparison_ids[i]),
                project=project,
                n_votes=int(figures.n_votes[i]),
                n_choices=int(figures.n_choices[i]),
                majority_choice=choice(int(figures.majority[i])),
                majority_margin=float(figures.majority_margin[i]),
                split=bool(figures.split[i]),
                ds_choice=choice(int(figures.ds_label[i])),
                ds_margin=float(figures.ds_margin[i]),
                **{f"p_{n}": float(figures.posterior[i, k]) for k, n in enumerate(CHOICE_FIELDS)},
            )
            for i in range(votes.comparison_ids.size)
        ],
        batch_size=2000,
    )


# One binary COPY tuple of the temporary table: a field count, then each field's byte length and
# big-endian value (PostgreSQL's binary COPY format), fixed width, so NumPy writes them all at once.
_COPY_FIELDS = (
    ("comparison_id", "int8", ">i8"),
    ("n_votes", "int4", ">i4"),
    ("n_choices", "int2", ">i2"),
    ("majority", "int2", ">i2"),  # CHOICES code, -1 for a split
    ("majority_margin", "float8", ">f8"),
    ("split", "bool", "u1"),
    ("ds", "int2", ">i2"),  # CHOICES code, -1 when the top posterior is shared
    ("ds_margin", "float8", ">f8"),
    *((f"p_{name}", "float8", ">f8") for name in CHOICE_FIELDS),
)
_COPY_ROW = np.dtype(
    [("fields", ">i2")]
    + [item for name, _, code in _COPY_FIELDS for item in ((f"len_{name}", ">i4"), (name, code))]
)
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00" * 8  # signature, flags, no header extension
_CHOICE_SQL = "coalesce((ARRAY['a', 'b', 'tie', 'both_bad'])[t.{0} + 1], '')"  # -1 -> ''
_STORED = (
    "n_votes", "n_choices", "majority_choice", "majority_margin", "split", "ds_choice",
    "ds_margin", "p_a", "p_b", "p_tie", "p_both_bad",
)  # fmt: skip
_SOURCES = {
    "majority_choice": _CHOICE_SQL.format("majority"),
    "ds_choice": _CHOICE_SQL.format("ds"),
}
_NEW_ROWS = (  # the temporary table's rows in the stored table's terms
    "SELECT t.comparison_id, "  # nosec B608 (constant column names)
    + ", ".join(f"{_SOURCES.get(c, f't.{c}')} AS {c}" for c in _STORED)
    + " FROM consensus_refit_rows t"
)
_DELETE = (  # rows of comparisons no longer judged
    "DELETE FROM annotation_storedconsensus s WHERE s.project_id = %s AND NOT EXISTS "
    "(SELECT 1 FROM consensus_refit_rows t WHERE t.comparison_id = s.comparison_id)"
)
_MAJORITY = ("n_votes", "n_choices", "majority_choice", "majority_margin", "split")
_DAWID_SKENE = ("ds_choice", "ds_margin", "p_a", "p_b", "p_tie", "p_both_bad")
# The Dawid-Skene columns of rows whose figures changed (a plain UPDATE: cheaper than ON
# CONFLICT's per-row path). Only rows whose majority figures are the ones computed from the read:
# the triggers keep those exact, so a row that differs had its votes changed since the read by a
# committed statement, and keeps that statement's figures (old fit) until the next refit.
_UPDATE = (
    "UPDATE annotation_storedconsensus s SET "  # nosec B608 (constant column names)
    + ", ".join(f"{c} = n.{c}" for c in _DAWID_SKENE)
    + f" FROM ({_NEW_ROWS}) n WHERE s.comparison_id = n.comparison_id AND s.project_id = %s AND ("
    + ", ".join(f"s.{c}" for c in _MAJORITY)
    + ") = ("
    + ", ".join(f"n.{c}" for c in _MAJORITY)
    + ") AND ("
    + ", ".join(f"s.{c}" for c in _DAWID_SKENE)
    + ") IS DISTINCT FROM ("
    + ", ".join(f"n.{c}" for c in _DAWID_SKENE)
    + ")"
)
_INSERT = (  # rows the table lacks (a comparison deleted since the read gets none)
    f"INSERT INTO annotation_storedconsensus (comparison_id, project_id, {', '.join(_STORED)}) "  # nosec B608 (constant column names)
    f"SELECT n.comparison_id, %s, {', '.join(f'n.{c}' for c in _STORED)} FROM ({_NEW_ROWS}) n "
    "WHERE NOT EXISTS (SELECT 1 FROM annotation_storedconsensus s "
    "WHERE s.comparison_id = n.comparison_id) "
    "AND EXISTS (SELECT 1 FROM annotation_comparison c WHERE c.id = n.comparison_id) "
    "ON CONFLICT (comparison_id) DO NOTHING"  # a trigger wrote it meanwhile: its figures stand
)


def _copy_block(votes: ProjectVotes, figures: agreement.StoredFigures) -> bytes:
    """The rows as one binary COPY stream: header, a tuple per judged comparison, trailer."""
    rows = np.zeros(votes.comparison_ids.size, dtype=_COPY_ROW)
    rows["fields"] = len(_COPY_FIELDS)
    values = {
        "comparison_id": votes.comparison_ids,
        "n_votes": figures.n_votes,
        "n_choices": figures.n_choices,
        "majority": figures.majority,
        "majority_margin": figures.majority_margin,
        "split": figures.split,
        "ds": figures.ds_label,
        "ds_margin": figures.ds_margin,
        **{f"p_{name}": figures.posterior[:, k] for k, name in enumerate(CHOICE_FIELDS)},
    }
    for name, _, code in _COPY_FIELDS:
        rows[f"len_{name}"] = np.dtype(code).itemsize
        rows[name] = values[name]
    return _COPY_HEADER + rows.tobytes() + b"\xff\xff"


def _rows_by_copy(project: Project, votes: ProjectVotes, figures: agreement.StoredFigures) -> int:
    """Rewrite the project's rows set-based (PostgreSQL): binary COPY into a temporary table,
    update the Dawid-Skene figures of rows that changed (a refit that moves few posteriors writes
    few rows), insert the rows the table lacks and delete those of comparisons no longer judged.
    Returns the rows updated or inserted."""
    columns = ", ".join(f"{name} {sql}" for name, sql, _ in _COPY_FIELDS)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL jit = off")
        cursor.execute("SET LOCAL work_mem = '64MB'")
        cursor.execute(f"CREATE TEMPORARY TABLE consensus_refit_rows ({columns}) ON COMMIT DROP")
        with cursor.cursor.copy("COPY consensus_refit_rows FROM STDIN (FORMAT binary)") as copy:
            copy.write(_copy_block(votes, figures))
        cursor.execute(_UPDATE, [project.pk])
        written = max(cursor.rowcount, 0)
        cursor.execute(_INSERT, [project.pk])
        written += max(cursor.rowcount, 0)
        # now every judged comparison has its row: any more rows are strays to delete (a count
        # over an index costs less than the anti-join, which is rarely needed)
        cursor.execute(
            "SELECT count(*) FROM annotation_storedconsensus WHERE project_id = %s", [project.pk]
        )
        if cursor.fetchone()[0] != votes.comparison_ids.size:
            cursor.execute(_DELETE, [project.pk])
        # rows were rewritten: the item browser's plans need the new margins' statistics
        cursor.execute("ANALYZE annotation_storedconsensus")
        cursor.execute("DROP TABLE consensus_refit_rows")
    return written


# A refit that wrote at least this many rows vacuums the table once it has committed, as
# autovacuum would a minute or so later: until then the item browser's index-only walks of the
# margin (``consensus_margin``) read every rewritten row's page (a band's page 175 ms instead
# of 60 on 1M comparisons, right after a first fit of 266,666 rows).
VACUUM_FROM_ROWS = 10_000


def _rewrite_rows(
    project: Project, votes: ProjectVotes, fit: agreement.DawidSkene | None
) -> tuple[int, int]:
    """Every stored row of the project from its current votes and fit (None: no fit). Returns
    (rows, rows written): on SQLite every row is written."""
    figures = _figures(votes, fit)
    if connection.vendor == "postgresql":
        written = _rows_by_copy(project, votes, figures)
    else:
        _rows_by_orm(project, votes, figures)
        written = int(votes.comparison_ids.size)
    return int(votes.comparison_ids.size), written


def _vacuum_after(written: int) -> None:
    """VACUUM the stored consensus after a refit that wrote VACUUM_FROM_ROWS rows or more, when
    that can run (PostgreSQL, outside any transaction: not inside a caller's atomic block)."""
    if written < VACUUM_FROM_ROWS or connection.vendor != "postgresql":
        return
    if connection.in_atomic_block:
        return
    with connection.cursor() as cursor:
        cursor.execute("VACUUM annotation_storedconsensus")


def consensus_refit(*, project: Project, force: bool = False, warm: bool = True) -> RefitResult:
    """Fit Dawid-Skene on all of the project's people's judgements, store the fit and rewrite every
    stored consensus row with it, in one transaction (concurrent refits of a project queue behind
    its row lock). The EM starts from the stored fit when there is one and ``warm`` (it then stops
    after a few rounds when little changed), else from the majority vote, as the export's fit
    does. Unless ``force``, nothing is done when the stored fit was made on the current
    judgements (same fingerprint)."""
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).first()
        fitted = ConsensusFit.objects.filter(project=project).first()
        fingerprint = judgements_fingerprint(project=project)  # before the read: see the module
        if not force and fitted is not None and fitted.fingerprint == fingerprint:
            return RefitResult(fitted.n_judgements, fitted.iterations, 0, refitted=False)
        votes = project_votes(project=project)
        if votes.table.item.size == 0:
            ConsensusFit.objects.filter(project=project).delete()
            AnnotatorConfusion.objects.filter(project=project).delete()
            return RefitResult(0, 0, _rewrite_rows(project, votes, None)[0], refitted=True)
        start = _stored_fit(project, votes.annotator_ids) if warm else None
        table = votes.table
        fit = agreement.dawid_skene(
            table.item,
            table.annotator,
            table.choice,
            n_items=table.n_items,
            n_annotators=table.n_annotators,
            init_confusion=None if start is None else start[0],
            init_priors=None if start is None else start[1],
        )
        _write_fit(project, votes, fit, fingerprint)
        n_rows, written = _rewrite_rows(project, votes, fit)
    _vacuum_after(written)
    return RefitResult(int(table.item.size), fit.iterations, n_rows, refitted=True)


def consensus_refit_schedule(*, project: Project, delay: int = REFIT_DELAY_SECONDS) -> bool:
    """Ask the worker to refit the project's consensus in ``delay`` seconds unless a refit is
    already pending (calls in the same window collapse into one). True when one was queued."""
    if not cache.add(refit_pending_key(project), "1", timeout=delay + 600):
        return False
    try:
        task_send(
            "annotation.tasks.consensus_refit", args=[project.pk], countdown=delay, on_commit=False
        )
    except Exception:
        cache.delete(refit_pending_key(project))  # the broker is down: let the next call try again
        raise
    return True


def consensus_refit_due(*, project_id: int) -> RefitResult | None:
    """The task's body: clear the pending mark (judgements arriving during the fit schedule another
    one) and refit; None when the project is gone."""
    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        return None
    cache.delete(refit_pending_key(project))
    return consensus_refit(project=project)
