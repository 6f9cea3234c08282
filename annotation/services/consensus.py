"""Stored consensus (issue 30): the full Dawid-Skene refit, debounced in the background, and the
backfill of existing projects.

Between fits the database keeps each judged comparison's ``StoredConsensus`` row itself: triggers
on judgements recompute the rows of the comparisons a statement touched, in its transaction, with
the project's last fit held fixed (migration 0012). ``consensus_refit`` learns the fit again from
all of people's judgements (``annotation.agreement.dawid_skene``, the rule of the agreement report
and the export), stores the priors and every annotator's confusion matrix, and rewrites the
project's rows with it, in one transaction. ``consensus_refit_schedule`` asks the worker to do it
after judgements change; calls within ``REFIT_DELAY_SECONDS`` collapse into one run.

On SQLite (the demo) there are no triggers: the refit writes the rows (majority and Dawid-Skene
both), so the figures follow the judgements a debounce later.
"""

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
    ProjectJudgements,
    judgements_fingerprint,
    project_judgements,
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


def _write_fit(project: Project, data: ProjectJudgements, fit: agreement.DawidSkene) -> None:
    """The fit's log priors and each annotator's log confusion rows (one per choice said)."""
    log_priors = np.log(fit.priors)
    ConsensusFit.objects.update_or_create(
        project=project,
        defaults={
            **{
                f"log_prior_{name}": float(v)
                for name, v in zip(CHOICE_FIELDS, log_priors, strict=True)
            },
            "n_judgements": int(data.table.item.size),
            "iterations": fit.iterations,
            "log_likelihood": fit.log_likelihood,
            "fingerprint": judgements_fingerprint(project=project),
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
            for r, annotator_id in enumerate(data.annotator_ids)
            for s, said in enumerate(agreement.CHOICES)
        ],
        batch_size=2000,
    )
    if connection.vendor == "postgresql":  # the rewrite joins every vote with these rows: let the
        with connection.cursor() as cursor:  # planner see how many there are (a hash join)
            cursor.execute("ANALYZE annotation_annotatorconfusion")


def _rows_in_python(project: Project, data: ProjectJudgements, log_priors: np.ndarray,
                    log_confusion: np.ndarray | None) -> int:  # fmt: skip
    """Rewrite the project's rows from ``agreement.stored_figures`` (databases without the
    triggers). log_confusion [R, true, said] of ``data``'s annotators, None: no fit."""
    table = data.table
    vote_log = (
        np.zeros((table.item.size, agreement.N_CHOICES))
        if log_confusion is None
        else log_confusion[table.annotator, :, table.choice]
    )
    figures = agreement.stored_figures(
        table.item, table.choice, vote_log, n_items=table.n_items, log_priors=log_priors
    )

    def choice(code: int) -> str:
        return agreement.CHOICES[code] if code != agreement.MISSING else ""

    StoredConsensus.objects.filter(project=project).delete()
    judged = np.flatnonzero(figures.n_votes)
    StoredConsensus.objects.bulk_create(
        [
            StoredConsensus(
                comparison_id=int(data.comparison_ids[i]),
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
            for i in judged
        ],
        batch_size=2000,
    )
    return int(judged.size)


def _rewrite_rows(
    project: Project, data: ProjectJudgements, fit: agreement.DawidSkene | None
) -> int:
    """Every stored row of the project from its current votes and fit (None: no fit)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:  # JIT costs more than it saves on this one pass
            cursor.execute("SET LOCAL jit = off")
            cursor.execute("SET LOCAL work_mem = '64MB'")
            cursor.execute("SELECT annotation_consensus_refresh_project(%s)", [project.pk])
            # every row was rewritten: the item browser's plans need the new margins' statistics
            cursor.execute("ANALYZE annotation_storedconsensus")
        return StoredConsensus.objects.filter(project=project).count()
    if fit is None:
        return _rows_in_python(project, data, np.zeros(agreement.N_CHOICES), None)
    return _rows_in_python(project, data, np.log(fit.priors), np.log(fit.confusion))


def consensus_refit(*, project: Project, force: bool = False) -> RefitResult:
    """Fit Dawid-Skene on all of the project's people's judgements, store the fit and rewrite every
    stored consensus row with it, in one transaction (concurrent refits of a project queue behind
    its row lock). Unless ``force``, nothing is done when the stored fit was made on the current
    judgements (same fingerprint)."""
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).first()
        fitted = ConsensusFit.objects.filter(project=project).first()
        if (
            not force
            and fitted is not None
            and fitted.fingerprint == judgements_fingerprint(project=project)
        ):
            return RefitResult(fitted.n_judgements, fitted.iterations, 0, refitted=False)
        data = project_judgements(project=project)
        if data.table.item.size == 0:
            ConsensusFit.objects.filter(project=project).delete()
            AnnotatorConfusion.objects.filter(project=project).delete()
            return RefitResult(0, 0, _rewrite_rows(project, data, None), refitted=True)
        fit = agreement.table_dawid_skene(data.table)
        _write_fit(project, data, fit)
        n_rows = _rewrite_rows(project, data, fit)
    return RefitResult(int(data.table.item.size), fit.iterations, n_rows, refitted=True)


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
