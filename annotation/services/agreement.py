"""Agreement reports of a project: the judgements (selectors.agreement), the pure maths, names put back.

``project_agreement`` runs ``annotation.agreement.agreement_report`` on the arrays of
``annotation.selectors.agreement.project_judgements``; ``agreement_summary`` shapes the result as the
``agreement --json`` object of ARCHITECTURE.md, ``agreement_dashboard`` as the dashboard's data.
The dashboard's copy is computed by a Celery task (``dashboard_refresh``, scheduled and debounced by
``dashboard_refresh_schedule``) and kept in the shared cache. ``project_consensus``: consensus labels
for exports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from django.core.cache import cache

from annotation import agreement
from annotation.agreement.bias import flag_label
from annotation.models import Project
from annotation.selectors.agreement import (
    ProjectJudgements,
    cached_dashboard,
    dashboard_cache_key,
    day_label,
    judgements_fingerprint,
    project_judgements,
    refresh_pending_key,
)
from annotation.services.agreement_state import refresh_read
from annotation.services.consensus import consensus_refit_schedule
from common.jobs import task_send

KAPPA_TARGET = 0.7  # PIPELINE.md: inter-annotator agreement target, kappa above 0.7
CACHE_SECONDS = 7 * 24 * 3600
SUMMARY_KEYS = (
    "n_items",
    "n_judgements",
    "n_annotators",
    "percent_agreement",
    "percent_agreement_no_ties",
    "fleiss_kappa",
    "krippendorff_alpha",
    "gwet_ac1",
    "cohen_kappa",
    "annotators",
)


@dataclass(frozen=True)
class ProjectAgreement:
    """The report of one project, with the arrays it was computed from and when."""

    project: Project
    data: ProjectJudgements
    report: agreement.AgreementReport
    computed_at: datetime


def project_agreement(
    *,
    project: Project,
    n_boot: int = 1000,
    pair_boot: int = 0,
    seed: int = 0,
    data: ProjectJudgements | None = None,
) -> ProjectAgreement:
    """Compute the project's agreement report. Fleiss' kappa uses the comparisons with the project's
    full overlap; alpha and AC1 use every judgement (ARCHITECTURE.md). ``data``: the arrays already
    made (the dashboard's refresh, from the rows it read or patched), else they are read here."""
    if data is None:
        data = project_judgements(project=project)
    report = agreement.agreement_report(
        data.table,
        overlap=project.overlap,
        n_categories=data.n_categories,
        n_boot=n_boot,
        pair_boot=pair_boot,
        seed=seed,
    )
    return ProjectAgreement(
        project=project, data=data, report=report, computed_at=datetime.now(tz=UTC)
    )


def _number(value: float | np.floating | np.integer | None, digits: int = 6) -> float | int | None:
    """A JSON-safe number: NaN, infinities and None (an undefined interval bound) become None."""
    if value is None:
        return None
    if isinstance(value, int | np.integer):
        return int(value)
    value = float(value)
    return round(value, digits) if math.isfinite(value) else None


def _annotator_rows(result: ProjectAgreement) -> list[dict[str, Any]]:
    s = result.report.annotators
    pairs = result.report.pairs
    names = result.data.annotator_names
    against: list[list[dict[str, Any]]] = [[] for _ in names]
    for first, second, kappa, n in zip(
        pairs.first, pairs.second, pairs.kappa, pairs.n, strict=True
    ):
        against[first].append({"other": names[second], "kappa": _number(kappa), "n": int(n)})
        against[second].append({"other": names[first], "kappa": _number(kappa), "n": int(n)})
    rows = []
    for i, name in enumerate(names):
        rows.append(
            {
                "annotator": name,
                "n_judgements": int(s.n_judgements[i]),
                "flags": list(s.flags[i]),
                "left_share": _number(s.left_share[i]),
                "left_n": int(s.left_n[i]),
                "left_p_value": _number(s.left_p_value[i]),
                "left_p_adjusted": _number(s.left_p_adjusted[i]),
                "longer_share": _number(s.longer_share[i]),
                "consensus_longer_share": _number(s.consensus_longer_share[i]),
                "length_bias": _number(s.length_bias[i]),
                "longer_n": int(s.longer_n[i]),
                "longer_p_adjusted": _number(s.longer_p_adjusted[i]),
                "tie_rate": _number(s.tie_rate[i]),
                "loo_agreement": _number(s.loo_agreement[i]),
                "loo_n": int(s.loo_n[i]),
                "gold_accuracy": _number(s.gold_accuracy[i]),
                "gold_n": int(s.gold_n[i]),
                "repeat_consistency": _number(s.repeat_consistency[i]),
                "repeat_n": int(s.repeat_n[i]),
                "median_ms": _number(s.median_ms[i], 1),
                "fast_share": _number(s.fast_share[i]),
                "mean_kappa": _number(s.mean_kappa[i]),
                "cohen_kappa": sorted(against[i], key=lambda row: row["other"]),
            }
        )
    return rows


def agreement_summary(result: ProjectAgreement, *, intervals: bool = False) -> dict[str, Any]:
    """The ``agreement --json`` object: exactly SUMMARY_KEYS (ARCHITECTURE.md), plus "intervals"
    ({coefficient: [low, high]}, 95% bootstrap) when asked for."""
    report = result.report
    names = result.data.annotator_names
    summary: dict[str, Any] = {
        "n_items": report.n_items,
        "n_judgements": report.n_judgements,
        "n_annotators": report.n_annotators,
        **{name: _number(report.coefficients[name].estimate) for name in agreement.COEFFICIENTS},
        "cohen_kappa": [
            {"a": names[first], "b": names[second], "kappa": _number(kappa), "n": int(n)}
            for first, second, kappa, n in zip(
                report.pairs.first,
                report.pairs.second,
                report.pairs.kappa,
                report.pairs.n,
                strict=True,
            )
        ],
        "annotators": _annotator_rows(result),
    }
    assert tuple(summary) == SUMMARY_KEYS
    if intervals:
        summary["intervals"] = {
            name: [_number(v) for v in report.coefficients[name].as_list()]
            for name in agreement.COEFFICIENTS
        }
    return summary


def _groups(counts: np.ndarray, group: np.ndarray, labels: list[Any]) -> list[dict[str, Any]]:
    values = np.unique(group[group != agreement.MISSING])
    index = np.full(group.size, agreement.MISSING)
    index[group != agreement.MISSING] = np.searchsorted(values, group[group != agreement.MISSING])
    result = agreement.agreement_by_group(counts, index, n_groups=values.size)
    rows = []
    for g, value in enumerate(values):
        if result.n_items[g]:
            rows.append(
                {
                    "group": labels[g] if labels else int(value),
                    "n_items": int(result.n_items[g]),
                    "n_judgements": int(result.n_judgements[g]),
                    "percent_agreement": _number(result.percent_agreement[g]),
                    "fleiss_kappa": _number(result.fleiss_kappa[g]),
                }
            )
    return rows


def agreement_dashboard(result: ProjectAgreement) -> dict[str, Any]:
    """Everything the dashboard draws, JSON-ready: the summary, intervals and the kappa target, the
    pairwise kappa matrix, agreement per cluster / batch / day, and when it was computed."""
    report, data = result.report, result.data
    counts = report.counts
    days = data.item_day
    day_labels = [day_label(d) for d in np.unique(days[days != agreement.MISSING])]
    matrix = report.pairs.matrix(len(data.annotator_names))
    pair_intervals = [
        {"a": data.annotator_names[f], "b": data.annotator_names[s], "low": _number(lo),
         "high": _number(hi)}
        for f, s, lo, hi in zip(report.pairs.first, report.pairs.second, report.pairs.low,
                                report.pairs.high, strict=True)
    ]  # fmt: skip
    return {
        "project": {"slug": result.project.slug, "name": result.project.name},
        "computed_at": result.computed_at.isoformat(),
        "kappa_target": KAPPA_TARGET,
        "summary": agreement_summary(result, intervals=True),
        "n_items_full_overlap": report.n_items_full_overlap,
        "overlap": result.project.overlap,
        "heatmap": {
            "annotators": data.annotator_names,
            "kappa": [[_number(v) for v in row] for row in matrix],
        },
        "pair_intervals": pair_intervals,
        "by_cluster": _groups(counts, data.item_cluster, []),
        "by_batch": _groups(counts, np.where(counts.sum(axis=1) > 0, data.item_batch, -1), []),
        "by_day": _groups(counts, days, day_labels),
        "fast_threshold_ms": _number(report.annotators.fast_threshold_ms, 1),
        "alerts": dashboard_alerts(result),
    }


def dashboard_alerts(result: ProjectAgreement) -> list[str]:
    """Plain-language alerts: agreement under the kappa target, and each flagged annotator."""
    alerts = []
    fleiss = result.report.coefficients["fleiss_kappa"].estimate
    if math.isfinite(fleiss) and fleiss < KAPPA_TARGET:
        alerts.append(f"Fleiss' kappa {fleiss:.2f} is below the target of {KAPPA_TARGET}.")
    for name, flags in zip(
        result.data.annotator_names, result.report.annotators.flags, strict=True
    ):
        if flags:
            alerts.append(f"{name}: {', '.join(flag_label(flag) for flag in flags)}.")
    return alerts


# --- Cached dashboard data (computed by the Celery task, debounced) ----------------------------------
REFRESH_DELAY_SECONDS = 30  # judgements arriving within this window share one recomputation


def dashboard_refresh(
    *, project: Project, n_boot: int = 1000, pair_boot: int = 200, incremental: bool = True
) -> dict:
    """Compute the dashboard data (with every pair's bootstrap interval) and store it in the cache.

    Clears the pending mark first, so judgements that arrive while it runs schedule another run.
    The arrays come from ``agreement_state.refresh_read``: the last refresh's rows patched with
    the judgements changed since when the database's checksums say they are its rows (the maths
    then runs while the database sums), else a full read (``incremental=False``: always); the
    figures are the same either way. The payload's "read" says which ({"how", "reason",
    "changed", "beside": whether the maths ran beside the checksums}).
    """
    cache.delete(refresh_pending_key(project))

    def figures(data: ProjectJudgements) -> dict[str, Any]:
        return agreement_dashboard(
            project_agreement(project=project, n_boot=n_boot, pair_boot=pair_boot, data=data)
        )

    read = refresh_read(project=project, incremental=incremental, compute=figures)
    payload = read.computed if read.computed is not None else figures(read.data)
    payload["fingerprint"] = read.fingerprint
    payload["read"] = {"how": read.how, "reason": read.reason, "changed": read.changed,
                       "beside": read.computed is not None}  # fmt: skip
    cache.set(dashboard_cache_key(project), payload, CACHE_SECONDS)
    return payload


def dashboard_refresh_schedule(*, project: Project, delay: int = REFRESH_DELAY_SECONDS) -> bool:
    """Ask the worker (default queue) to recompute the report in ``delay`` seconds, unless a run is
    already pending: calls in the same window collapse into one. True when a run was queued.

    Call it after judgements change (the labelling and import services, or the dashboard when it
    finds its copy stale). It also schedules the stored consensus's Dawid-Skene refit
    (``consensus_refit_schedule``, debounced the same way).
    """
    consensus_refit_schedule(project=project, delay=delay)
    if not cache.add(refresh_pending_key(project), "1", timeout=delay + 600):
        return False
    try:
        task_send(
            "annotation.tasks.agreement_report_refresh",
            args=[project.pk],
            countdown=delay,
            on_commit=False,
        )
    except Exception:
        cache.delete(
            refresh_pending_key(project)
        )  # the broker is down: let the next call try again
        raise
    return True


@dataclass(frozen=True)
class DashboardState:
    """What the dashboard shows: the cached payload (or None), whether it is out of date, and
    whether a recomputation is queued."""

    payload: dict | None
    stale: bool
    refreshing: bool


def dashboard_state(*, project: Project, schedule: bool = True) -> DashboardState:
    """The cached report and whether it still matches the judgements; a missing or stale report is
    scheduled for recomputation (debounced) when ``schedule``."""
    payload = cached_dashboard(project=project)
    stale = payload is None or payload.get("fingerprint") != judgements_fingerprint(project=project)
    if stale and schedule:
        dashboard_refresh_schedule(project=project, delay=0 if payload is None else 5)
    refreshing = cache.get(refresh_pending_key(project)) is not None
    return DashboardState(payload=payload, stale=stale, refreshing=refreshing)


# --- Consensus for exports ----------------------------------------------------------------------------
def project_consensus(
    *, project: Project, method: str = "dawid_skene"
) -> dict[int, dict[str, Any]]:
    """Consensus per judged comparison id: {"choice", "posterior": {choice: p}, "margin"}.

    method "majority" (vote shares; margin = top share minus the runner-up) or "dawid_skene"
    (annotator confusion matrices learned by EM; the posterior is the soft label, margin =
    P(chosen) - P(rejected), as in the export: ``annotation.agreement.side_margin``). A split at the
    top is undecided: choice None.
    """
    data = project_judgements(project=project)
    table = data.table
    if method == "majority":
        counts = agreement.item_counts(table.item, table.choice, n_items=table.n_items)
        consensus = agreement.majority_vote(counts)
    elif method == "dawid_skene":
        consensus = agreement.table_dawid_skene(table).consensus
    else:
        raise ValueError(
            f"unknown consensus method {method!r}; expected 'majority' or 'dawid_skene'"
        )
    judged = np.unique(table.item)
    return {
        int(data.comparison_ids[i]): {
            "choice": agreement.CHOICES[consensus.label[i]] if consensus.label[i] >= 0 else None,
            "posterior": {
                name: round(float(p), 6)
                for name, p in zip(agreement.CHOICES, consensus.posterior[i], strict=True)
            },
            "margin": _number(consensus.margin[i]),
        }
        for i in judged
    }
