"""Agreement reports of a project: judgements read as arrays, the pure maths, names put back.

``project_judgements`` reads a project's judgements and comparisons as integer columns (one narrow query
each: PostgreSQL packs each column into one bytea that NumPy reads directly, other databases go
through ``values_list``; never one model object per row). ``project_agreement`` runs
``annotation.agreement.agreement_report`` on them; ``agreement_summary`` shapes the result as the
``agreement --json`` object of ARCHITECTURE.md, ``agreement_dashboard`` as the dashboard's data.
The dashboard's copy is computed by a Celery task and kept in the shared cache (``cached_dashboard``).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import numpy as np
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.exceptions import EmptyResultSet
from django.db import connection, transaction
from django.db.models import BigIntegerField, Case, Count, Func, Max, QuerySet, Value, When
from django.db.models.functions import (
    Cast,
    Coalesce,
    Length,
)

from annotation import agreement
from annotation.models import (
    Choice,
    Comparison,
    Judgement,
    Project,
    Prompt,
    RepeatJudgement,
    Response,
    Side,
)
from annotation.selectors import BATCH_SIZE
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
_BIG = BigIntegerField()


def _code(field: str, codes: dict[str, int]) -> Cast:
    """SQL CASE mapping a text column's values to integer codes; anything else -> MISSING (-1).

    Cast to int8 explicitly: psycopg binds small Python ints as int2, which would make the CASE int2.
    """
    return Cast(
        Case(
            *(When(**{field: value}, then=Value(code)) for value, code in codes.items()),
            default=Value(agreement.MISSING),
            output_field=_BIG,
        ),
        _BIG,
    )


CHOICE_CODES = {value: agreement.CHOICES.index(value) for value in Choice.values}
SIDE_CODES = {Side.A.value: agreement.A, Side.B.value: agreement.B}


def _int_columns(queryset: QuerySet, columns: list[str]) -> np.ndarray:
    """Integer annotations of a queryset (BigInteger, never NULL) as an int64 array [rows, C].

    On PostgreSQL the database packs each column into one bytea of big-endian int8s
    (``string_agg(int8send(column), '')`` over Django's compiled query) and NumPy reads it with
    ``frombuffer``: one result row instead of one Python object per value, which costs less than
    ``values_list`` or a row-by-row COPY. All aggregates of one (non-parallel, see _bulk_reads)
    aggregation see the rows in the same order, so the columns stay aligned. Elsewhere
    ``values_list``.
    """
    rows = queryset.values_list(*columns)
    if connection.vendor != "postgresql":
        return np.array(list(rows), dtype=np.int64).reshape(-1, len(columns))
    try:
        sql, params = rows.query.sql_with_params()
    except EmptyResultSet:  # e.g. .none() or pk__in=[]: nothing to read
        return np.zeros((0, len(columns)), dtype=np.int64)
    packed = ", ".join(f"string_agg(int8send(q.{column}), '')" for column in columns)
    statement = f"SELECT count(*), {packed} FROM ({sql}) AS q"  # noqa: S608 - Django's compiled SQL  # nosec B608
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        count, *blobs = cursor.fetchone()
    arrays = [np.frombuffer(blob or b"", dtype=">i8").astype(np.int64) for blob in blobs]
    if any(array.size != count for array in arrays):
        raise ValueError(f"a column of {columns} holds NULLs; wrap it in Coalesce")
    return np.stack(arrays, axis=1)


@dataclass(frozen=True)
class ProjectJudgements:
    """A project's judgements as a JudgementTable plus what maps indices back to the database.

    comparison_ids [I]: the comparison of each item index (all the project's comparisons, by id);
    annotator_ids / annotator_names [R]; item_cluster [I] (prompt cluster, MISSING if none);
    item_batch [I] (batch number as on the lead's page, MISSING for gold items); item_day [I]
    (DayNumber of the item's latest judgement, MISSING if unjudged); n_categories: the choices the
    project offers (and any used anyway), AC1's q.
    """

    table: agreement.JudgementTable
    comparison_ids: np.ndarray
    annotator_ids: np.ndarray
    annotator_names: list[str]
    item_cluster: np.ndarray
    item_batch: np.ndarray
    item_day: np.ndarray
    n_categories: int


class DayNumber(Func):
    """Whole days from 2000-01-01 to a datetime's UTC date (PostgreSQL and SQLite): one cheap
    expression per row where three EXTRACTs cost PostgreSQL more than the rest of the query."""

    output_field = BigIntegerField()

    def as_postgresql(self, compiler, connection, **extra):
        template = "(((%(expressions)s) AT TIME ZONE 'UTC')::date - DATE '2000-01-01')::bigint"
        return self.as_sql(compiler, connection, template=template, **extra)

    def as_sqlite(self, compiler, connection, **extra):
        template = "CAST(julianday(date(%(expressions)s)) - julianday('2000-01-01') AS INTEGER)"
        return self.as_sql(compiler, connection, template=template, **extra)


def day_label(day_number: int) -> str:
    """DayNumber back to an ISO date: 0 -> '2000-01-01'."""
    return (date(2000, 1, 1) + timedelta(days=int(day_number))).isoformat()


def _judgement_columns(project: Project) -> np.ndarray:
    """[J, 6]: comparison id, annotator id, choice code, shown-left code, elapsed ms (-1), DayNumber."""
    queryset = (
        Judgement.objects.filter(comparison__project=project)
        .order_by()
        .annotate(
            c_comparison=Cast("comparison_id", _BIG),
            c_annotator=Cast("annotator_id", _BIG),
            c_choice=_code("choice", CHOICE_CODES),
            c_side=_code("shown_left", SIDE_CODES),
            c_elapsed=Cast(Coalesce(Cast("elapsed_ms", _BIG), Value(-1)), _BIG),
            c_day=DayNumber("created_at"),
        )
    )
    columns = ["c_comparison", "c_annotator", "c_choice", "c_side", "c_elapsed", "c_day"]
    return _int_columns(queryset, columns)


def _comparison_columns(project: Project) -> np.ndarray:
    """[I, 6] by id: id, gold code, len(response A), len(response B), prompt cluster, queue position.

    Three narrow scans (comparisons; response lengths; prompt clusters) joined here by id: carrying
    response texts through SQL joins costs PostgreSQL several times more.
    """
    comparisons = _int_columns(
        Comparison.objects.filter(project=project)
        .order_by("id")
        .annotate(
            c_id=Cast("id", _BIG),
            c_gold=_code("gold", CHOICE_CODES),
            c_a=Cast("response_a_id", _BIG),
            c_b=Cast("response_b_id", _BIG),
            c_prompt=Cast("prompt_id", _BIG),
            c_queue=Cast("queue_position", _BIG),
        ),
        ["c_id", "c_gold", "c_a", "c_b", "c_prompt", "c_queue"],
    )
    responses = _int_columns(
        Response.objects.filter(prompt__project=project)
        .order_by("id")
        .annotate(c_id=Cast("id", _BIG), c_length=Cast(Length("text"), _BIG)),
        ["c_id", "c_length"],
    )
    prompts = _int_columns(
        Prompt.objects.filter(project=project)
        .order_by("id")
        .annotate(
            c_id=Cast("id", _BIG),
            c_cluster=Cast(Coalesce(Cast("cluster", _BIG), Value(-1)), _BIG),
        ),
        ["c_id", "c_cluster"],
    )

    def lookup(table: np.ndarray, keys: np.ndarray) -> np.ndarray:
        position = np.clip(np.searchsorted(table[:, 0], keys), 0, max(len(table) - 1, 0))
        found = table[position, 0] == keys if len(table) else np.zeros(keys.size, bool)
        return np.where(found, table[position, 1] if len(table) else 0, agreement.MISSING)

    return np.stack(
        [
            comparisons[:, 0],
            comparisons[:, 1],
            lookup(responses, comparisons[:, 2]),
            lookup(responses, comparisons[:, 3]),
            lookup(prompts, comparisons[:, 4]),
            comparisons[:, 5],
        ],
        axis=1,
    ).reshape(-1, 6)


@contextmanager
def _bulk_reads():
    """One transaction (one snapshot) for the reads. On PostgreSQL: room to hash 1M rows in memory
    (no temp files), no JIT compilation (it costs more than it saves on these scans), and no
    parallel aggregation, so _int_columns' aggregates run in one pass over one row order."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL work_mem = '64MB'")
                cursor.execute("SET LOCAL jit = off")
                cursor.execute("SET LOCAL max_parallel_workers_per_gather = 0")
        yield


def project_judgements(*, project: Project) -> ProjectJudgements:
    """Read the project's judgements, comparisons and swap repeats as arrays (a few narrow queries)."""
    with _bulk_reads():
        judgements = _judgement_columns(project)
        comparisons = _comparison_columns(project)
        repeats = _int_columns(
            RepeatJudgement.objects.filter(comparison__project=project)
            .order_by()
            .annotate(
                c_comparison=Cast("comparison_id", _BIG),
                c_annotator=Cast("annotator_id", _BIG),
                c_choice=_code("choice", CHOICE_CODES),
            ),
            ["c_comparison", "c_annotator", "c_choice"],
        )
    comparison_ids = comparisons[:, 0]
    annotator_ids, annotator = np.unique(judgements[:, 1], return_inverse=True)
    names = dict(
        get_user_model()
        .objects.filter(pk__in=annotator_ids.tolist())
        .values_list("pk", get_user_model().USERNAME_FIELD)
    )
    item = np.searchsorted(comparison_ids, judgements[:, 0])
    # Swap repeats by annotators with no judgement here cannot be matched: leave them out.
    known = np.isin(repeats[:, 1], annotator_ids)
    repeats = repeats[known]
    n_items = comparison_ids.size
    elapsed = judgements[:, 4].astype(float)
    elapsed[judgements[:, 4] < 0] = np.nan
    table = agreement.JudgementTable(
        item=item,
        annotator=annotator.ravel(),
        choice=judgements[:, 2],
        n_items=n_items,
        n_annotators=annotator_ids.size,
        shown_left=judgements[:, 3],
        elapsed_ms=elapsed,
        gold=comparisons[:, 1],
        length_a=comparisons[:, 2],
        length_b=comparisons[:, 3],
        repeat_item=np.searchsorted(comparison_ids, repeats[:, 0]),
        repeat_annotator=np.searchsorted(annotator_ids, repeats[:, 1]),
        repeat_choice=repeats[:, 2],
    )
    item_day = np.full(n_items, agreement.MISSING, dtype=np.int64)
    _max_by_group(item_day, item, judgements[:, 5])
    # Batches as on the project lead's page (selectors.batch_progress): the non-gold comparisons in
    # queue order (queue position, then id), cut into blocks of BATCH_SIZE, numbered from 1.
    regular = comparisons[:, 1] == agreement.MISSING
    order = np.lexsort((comparison_ids[regular], comparisons[regular, 5]))
    item_batch = np.full(n_items, agreement.MISSING, dtype=np.int64)
    item_batch[np.flatnonzero(regular)[order]] = np.arange(order.size) // BATCH_SIZE + 1
    used = int(np.bincount(judgements[:, 2], minlength=agreement.N_CHOICES).astype(bool).sum())
    offered = 2 + int(project.allow_ties) + int(project.allow_both_bad)
    return ProjectJudgements(
        table=table,
        comparison_ids=comparison_ids,
        annotator_ids=annotator_ids,
        annotator_names=[names.get(int(pk), str(pk)) for pk in annotator_ids],
        item_cluster=comparisons[:, 4],
        item_batch=item_batch,
        item_day=item_day,
        n_categories=max(offered, used, 2),
    )


def _max_by_group(out: np.ndarray, group: np.ndarray, values: np.ndarray) -> None:
    """out[g] = max(out[g], values where group == g), by sorting (np.maximum.at is slow at scale)."""
    if group.size == 0:
        return
    order = np.lexsort((values, group))
    last = np.r_[group[order][1:] != group[order][:-1], True]
    targets = group[order][last]
    out[targets] = np.maximum(out[targets], values[order][last])


@dataclass(frozen=True)
class ProjectAgreement:
    """The report of one project, with the arrays it was computed from and when."""

    project: Project
    data: ProjectJudgements
    report: agreement.AgreementReport
    computed_at: datetime


def project_agreement(
    *, project: Project, n_boot: int = 1000, pair_boot: int = 0, seed: int = 0
) -> ProjectAgreement:
    """Compute the project's agreement report. Fleiss' kappa uses the comparisons with the project's
    full overlap; alpha and AC1 use every judgement (ARCHITECTURE.md)."""
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
            alerts.append(f"{name}: {', '.join(flag.replace('_', ' ') for flag in flags)}.")
    return alerts


# --- Cached dashboard data (computed by the Celery task, debounced) ----------------------------------
REFRESH_DELAY_SECONDS = 30  # judgements arriving within this window share one recomputation


def dashboard_cache_key(project: Project) -> str:
    return f"concord:agreement:dashboard:{project.pk}"


def _pending_key(project: Project) -> str:
    return f"concord:agreement:pending:{project.pk}"


def judgements_fingerprint(*, project: Project) -> list[Any]:
    """What the report depends on, cheaply: judgement and repeat counts and the latest change."""
    judged = Judgement.objects.filter(comparison__project=project).aggregate(
        n=Count("id"), latest=Max("updated_at")
    )
    repeats = RepeatJudgement.objects.filter(comparison__project=project).count()
    latest = judged["latest"].isoformat() if judged["latest"] else None
    return [judged["n"], latest, repeats]


def dashboard_refresh(*, project: Project, n_boot: int = 1000, pair_boot: int = 200) -> dict:
    """Compute the dashboard data (with every pair's bootstrap interval) and store it in the cache.

    Clears the pending mark first, so judgements that arrive while it runs schedule another run.
    """
    cache.delete(_pending_key(project))
    fingerprint = judgements_fingerprint(project=project)
    result = project_agreement(project=project, n_boot=n_boot, pair_boot=pair_boot)
    payload = {**agreement_dashboard(result), "fingerprint": fingerprint}
    cache.set(dashboard_cache_key(project), payload, CACHE_SECONDS)
    return payload


def dashboard_refresh_schedule(*, project: Project, delay: int = REFRESH_DELAY_SECONDS) -> bool:
    """Ask the worker (default queue) to recompute the report in ``delay`` seconds, unless a run is
    already pending: calls in the same window collapse into one. True when a run was queued.

    Call it after judgements change (the labelling and import services, or the dashboard when it
    finds its copy stale).
    """
    if not cache.add(_pending_key(project), "1", timeout=delay + 600):
        return False
    try:
        task_send(
            "annotation.tasks.agreement_report_refresh",
            args=[project.pk],
            countdown=delay,
            on_commit=False,
        )
    except Exception:
        cache.delete(_pending_key(project))  # the broker is down: let the next call try again
        raise
    return True


def cached_dashboard(*, project: Project) -> dict | None:
    """The last computed dashboard data (with its ``computed_at``), or None if never computed."""
    return cache.get(dashboard_cache_key(project))


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
    refreshing = cache.get(_pending_key(project)) is not None
    return DashboardState(payload=payload, stale=stale, refreshing=refreshing)


def agreement_alerts(*, project: Project) -> list[str]:
    """The alerts of the last computed report (for the project page); empty if none computed."""
    payload = cached_dashboard(project=project)
    return list(payload["alerts"]) if payload else []


# --- Drill-down ---------------------------------------------------------------------------------------
def annotator_disagreements(
    *, project: Project, username: str, limit: int = 50
) -> list[dict[str, Any]]:
    """The comparisons where the annotator's choice differs from the others' majority (leave-one-out),
    newest first: comparison id, external id, prompt, their choice, the others' votes."""
    user = get_user_model().objects.get(**{get_user_model().USERNAME_FIELD: username})
    mine = dict(
        Judgement.objects.filter(comparison__project=project, annotator=user).values_list(
            "comparison_id", "choice"
        )
    )
    others: dict[int, dict[str, int]] = {}
    for comparison_id, choice in (
        Judgement.objects.filter(comparison_id__in=list(mine))
        .exclude(annotator=user)
        .values_list("comparison_id", "choice")
    ):
        others.setdefault(comparison_id, {}).setdefault(choice, 0)
        others[comparison_id][choice] += 1
    disputed = []
    for comparison_id, votes in others.items():
        top = max(votes.values())
        leaders = [choice for choice, n in votes.items() if n == top]
        if len(leaders) == 1 and leaders[0] != mine[comparison_id]:
            disputed.append(comparison_id)
    rows = (
        Comparison.objects.filter(id__in=disputed)
        .order_by("-id")
        .values("id", "external_id", "prompt__text")[:limit]
    )
    return [
        {
            "comparison": row["id"],
            "external_id": row["external_id"],
            "prompt": row["prompt__text"][:200],
            "choice": mine[row["id"]],
            "others": others[row["id"]],
        }
        for row in rows
    ]


# --- Consensus for exports ----------------------------------------------------------------------------
def project_consensus(
    *, project: Project, method: str = "dawid_skene"
) -> dict[int, dict[str, Any]]:
    """Consensus per judged comparison id: {"choice", "posterior": {choice: p}, "margin"}.

    method "majority" (vote shares) or "dawid_skene" (annotator confusion matrices learned by EM; the
    posterior is the soft label, margin = top posterior minus the runner-up).
    """
    data = project_judgements(project=project)
    table = data.table
    if method == "majority":
        counts = agreement.item_counts(table.item, table.choice, n_items=table.n_items)
        consensus = agreement.majority_vote(counts)
    elif method == "dawid_skene":
        consensus = agreement.dawid_skene(
            table.item,
            table.annotator,
            table.choice,
            n_items=table.n_items,
            n_annotators=table.n_annotators,
        ).consensus
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
