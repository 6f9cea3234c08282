"""Writes of a run's stored stopping-panel figures: computed by a Celery task (default queue) when
what they rest on changes, debounced as the agreement report is, and read by the run page.

- ``stopping_panel_refresh(run=...)``: compute the figures now (``stopping_panel_figures``) and store
  them with the fingerprint of their inputs (the task calls it).
- ``stopping_panel_refresh_schedule(run=...)``: queue one recomputation in ``delay`` seconds unless
  one is pending; calls inside the window collapse into one run.
- ``stopping_inputs_changed(run_id)``: after the transaction commits, schedule (a broker that is
  down never costs a reviewer a rating). Ratings, round judges' verdicts and generated rounds call
  it; metric points are found by the fingerprint when the page is viewed (training never imports
  monitoring).
- ``stopping_panel_state(run=..., kappa_threshold=...)``: what the run page shows: the panel from
  the stored figures (None before the first computation), whether they are out of date, whether a
  recomputation is queued; a missing or stale copy is scheduled.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from common.jobs import task_send
from monitoring.models import StoppingPanelFigures
from monitoring.selectors.stopping_panel import (
    FIGURES_VERSION,
    PANEL_BOOTSTRAP,
    stopping_panel_figures,
    stopping_panel_fingerprint,
    stopping_panel_from_figures,
    stored_stopping_panel,
)
from training.models import TrainingRun

logger = logging.getLogger(__name__)
REFRESH_DELAY_SECONDS = 10  # ratings arriving within this window share one recomputation
REFRESH_TASK = "monitoring.tasks.stopping_panel_refresh"


def refresh_pending_key(run_id: int) -> str:
    return f"concord:stopping-panel:pending:{run_id}"


def stopping_panel_refresh(
    *, run: TrainingRun, n_boot: int = PANEL_BOOTSTRAP
) -> StoppingPanelFigures:
    """Compute the run's figures and store them (one row per run, replaced). The pending mark is
    cleared first, so a rating that arrives while this runs schedules another run. The fingerprint
    is read before the figures: a change in between leaves the row stale, never wrongly fresh."""
    cache.delete(refresh_pending_key(run.pk))
    fingerprint = stopping_panel_fingerprint(run)
    payload = stopping_panel_figures(run, n_boot=n_boot)
    figures, _ = StoppingPanelFigures.objects.update_or_create(
        run=run,
        defaults={
            "payload": payload,
            "fingerprint": fingerprint,
            "version": FIGURES_VERSION,
            "computed_at": timezone.now(),
        },
    )
    return figures


def stopping_panel_refresh_schedule(*, run_id: int, delay: int = REFRESH_DELAY_SECONDS) -> bool:
    """Ask the worker to recompute the run's figures in ``delay`` seconds unless a run is already
    pending. True when a run was queued. A broker error reaches the caller (and clears the mark,
    so the next call tries again)."""
    if not cache.add(refresh_pending_key(run_id), "1", timeout=delay + 600):
        return False
    try:
        task_send(REFRESH_TASK, args=[run_id], countdown=delay, on_commit=False)
    except Exception:
        cache.delete(refresh_pending_key(run_id))
        raise
    return True


def stopping_inputs_changed(run_id: int) -> None:
    """After the current transaction commits, schedule the run's figures for recomputation
    (debounced). A broker that is down is logged, never raised: the page finds the copy stale."""

    def schedule() -> None:
        try:
            stopping_panel_refresh_schedule(run_id=run_id)
        except Exception:
            logger.warning("could not schedule the stopping panel of run %s", run_id, exc_info=True)

    transaction.on_commit(schedule)


def stopping_panel_state(
    *, run: TrainingRun, kappa_threshold: float | None = None, schedule: bool = True
) -> dict[str, Any]:
    """The run page's panel: ``stopping_panel_from_figures`` of the stored figures (its panel
    None before the first computation) with stale (missing, another layout version, or inputs changed
    since), refreshing (a recomputation is queued), computed_at}. A missing or stale copy is
    scheduled (at once when missing, debounced otherwise) when ``schedule``; a broker that is down
    is logged and the page still shows what is stored. No bootstrap; a bounded number of queries."""
    stored = stored_stopping_panel(run)
    stale = (
        stored is None
        or stored.version != FIGURES_VERSION
        or stored.fingerprint != stopping_panel_fingerprint(run)
    )
    if stale and schedule:
        try:
            stopping_panel_refresh_schedule(
                run_id=run.pk, delay=0 if stored is None else REFRESH_DELAY_SECONDS
            )
        except Exception:
            logger.warning("could not schedule the stopping panel of run %s", run.pk, exc_info=True)
    usable = stored is not None and stored.version == FIGURES_VERSION
    figures = stored.payload if usable else None
    return {
        **stopping_panel_from_figures(run, figures, kappa_threshold=kappa_threshold),
        "stale": stale,
        "refreshing": cache.get(refresh_pending_key(run.pk)) is not None,
        "computed_at": stored.computed_at if stored is not None else None,
    }
