"""Reads for the agreement reports: a project's judgements as arrays, the cached dashboard, drill-downs.

``project_judgements`` reads a project's judgements and comparisons as integer columns (one narrow query
each: PostgreSQL packs each column into one bytea that NumPy reads directly, other databases go
through ``values_list``; never one model object per row). The dashboard's copy of the report is
computed by a Celery task (``annotation.services.agreement.dashboard_refresh``) and kept in the
shared cache, read here by ``cached_dashboard``.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

import numpy as np
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.exceptions import EmptyResultSet
from django.db import connection, transaction
from django.db.models import BigIntegerField, Case, Count, Func, Max, QuerySet, Value, When
from django.db.models.functions import Cast, Coalesce, Length
from django.utils.module_loading import import_string

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
from annotation.selectors.labelling import BATCH_SIZE
from common.roles import human_judgements, machine_account_label

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


# Rows per packed group, by the first column's value (its high bits): the result comes back one
# group at a time, so the client holds one group's bytes beside the arrays, not every column's.
_GROUP_SHIFT = 16
_FIRST_ROWS = 4096  # rows first allocated for a read; doubled as needed


@contextmanager
def _server_cursor():
    """A psycopg server-side cursor with binary results on Django's connection, fetching one row
    at a time (PostgreSQL; call inside a transaction)."""
    connection.ensure_connection()
    with connection.connection.cursor(name="concord_int_columns", binary=True) as cursor:
        cursor.itersize = 1
        yield cursor


def _int_columns(queryset: QuerySet, columns: list[str]) -> np.ndarray:
    """Integer annotations of a queryset (BigInteger, never NULL) as an int64 array [rows, C].

    On PostgreSQL the database packs each column into bytea of big-endian int8s
    (``string_agg(int8send(column), '')`` over Django's compiled query), one result row per group
    of the first column's values (``>> _GROUP_SHIFT``), and NumPy reads them with ``frombuffer``:
    a few result rows instead of one Python object per value, which costs less than
    ``values_list`` or a row-by-row COPY. All aggregates of one (non-parallel, see _bulk_reads)
    aggregation see a group's rows in the same order, so the columns stay aligned. The groups are
    fetched one at a time through a server-side cursor in binary (bytes, not hex text to decode)
    and written into one array as they come: 3,000,000 rows of 6 columns take the array's 144 MB
    and one group's bytes, where parsing hex text took 1 GB. An
    ordered queryset must be ordered by its first column, ascending: the rows are returned sorted
    by it (the groups arrive in any order); an unordered one's rows come in no particular order.
    Elsewhere ``values_list``.
    """
    rows = queryset.values_list(*columns)
    if connection.vendor != "postgresql":
        return np.array(list(rows), dtype=np.int64).reshape(-1, len(columns))
    try:
        sql, params = rows.query.sql_with_params()
    except EmptyResultSet:  # e.g. .none() or pk__in=[]: nothing to read
        return np.zeros((0, len(columns)), dtype=np.int64)
    packed = ", ".join(f"string_agg(int8send(q.{column}), '')" for column in columns)
    statement = (
        f"SELECT count(*), {packed} FROM ({sql}) AS q"  # noqa: S608 - Django's compiled SQL  # nosec B608
        f" GROUP BY q.{columns[0]} >> {_GROUP_SHIFT}"
    )
    # Filled in place group by group and grown by ``resize`` (a realloc: a large block is remapped,
    # not copied, and the rows not yet written are never touched), so the read peaks at about the
    # array itself plus one group, not the groups and their concatenation.
    out = np.empty((_FIRST_ROWS, len(columns)), dtype=np.int64)
    n = 0
    # A server-side cursor lives in a transaction (a savepoint inside the caller's).
    with transaction.atomic(), _server_cursor() as cursor:
        cursor.execute(statement, params)
        for count, *blobs in cursor:
            if n + count > out.shape[0]:
                out.resize((max(2 * out.shape[0], n + count), len(columns)), refcheck=False)
            for j, blob in enumerate(blobs):
                if len(blob) != 8 * count:
                    raise ValueError(f"a column of {columns} holds NULLs; wrap it in Coalesce")
                out[n : n + count, j] = np.frombuffer(blob, dtype=">i8")
            n += count
    out.resize((n, len(columns)), refcheck=False)
    if queryset.query.order_by:  # the groups come in any order: put the rows back in order
        out = out[np.argsort(out[:, 0], kind="stable")]
    return out


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


def judgement_columns() -> dict[str, Any]:
    """The judgement columns the report reads, as integer expressions in ``JUDGEMENT_COLUMNS``
    order: comparison id, annotator id, choice code, shown-left code, elapsed ms (-1 when
    unknown), DayNumber of its creation."""
    return {
        "c_comparison": Cast("comparison_id", _BIG),
        "c_annotator": Cast("annotator_id", _BIG),
        "c_choice": _code("choice", CHOICE_CODES),
        "c_side": _code("shown_left", SIDE_CODES),
        "c_elapsed": Cast(Coalesce(Cast("elapsed_ms", _BIG), Value(-1)), _BIG),
        "c_day": DayNumber("created_at"),
    }


JUDGEMENT_COLUMNS = ("comparison", "annotator", "choice", "side", "elapsed", "day")


def judgement_rows(judgements: QuerySet, *, ids: bool = False) -> np.ndarray:
    """``judgements`` (a queryset of Judgement) as an int64 array [J, 6] of ``judgement_columns``,
    [J, 7] with ``ids`` (the judgement's id last), in no particular order."""
    expressions = judgement_columns()
    if ids:
        expressions["c_id"] = Cast("id", _BIG)
    return _int_columns(judgements.order_by().annotate(**expressions), list(expressions))


def _judgement_columns(project: Project, *, ids: bool = False) -> np.ndarray:
    """People's judgements of the project as ``judgement_rows`` (machine judges' are left out)."""
    return judgement_rows(
        human_judgements(Judgement.objects.filter(comparison__project=project)), ids=ids
    )


def comparison_tables(project: Project) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The project's comparisons, responses and prompts as three narrow scans, each by id:
    comparisons [I, 6] (id, gold code, response A id, response B id, prompt id, queue position),
    responses [N, 2] (id, length of the text in characters), prompts [P, 2] (id, cluster or -1).
    Joined by ``joined_comparisons``: carrying response texts through SQL joins costs PostgreSQL
    several times more."""
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
    return comparisons, responses, prompts


def joined_comparisons(
    comparisons: np.ndarray, responses: np.ndarray, prompts: np.ndarray
) -> np.ndarray:
    """``comparison_tables``' three tables joined by id -> [I, 6] by comparison id: id, gold code,
    len(response A), len(response B), prompt cluster, queue position (MISSING where not found)."""

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


def _comparison_columns(project: Project) -> np.ndarray:
    """[I, 6] by id: id, gold code, len(response A), len(response B), prompt cluster, queue position."""
    return joined_comparisons(*comparison_tables(project))


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


@dataclass(frozen=True)
class ProjectRows:
    """What ``project_judgements`` reads, before items and annotators are numbered: judgements
    [J, 6] (``judgement_rows``; [J, 7] with ids) in no particular order; comparisons, responses,
    prompts as ``comparison_tables``; repeats [S, 3] (comparison id, annotator id, choice code)."""

    judgements: np.ndarray
    comparisons: np.ndarray
    responses: np.ndarray
    prompts: np.ndarray
    repeats: np.ndarray


def project_rows(*, project: Project, ids: bool = False) -> ProjectRows:
    """Read people's judgements of the project (``ids``: with their ids), its comparisons and swap
    repeats as integer columns, a few narrow queries in one snapshot."""
    with _bulk_reads():
        judgements = _judgement_columns(project, ids=ids)
        comparisons, responses, prompts = comparison_tables(project)
        repeats = _vote_columns(RepeatJudgement.objects.filter(comparison__project=project))
    return ProjectRows(judgements, comparisons, responses, prompts, repeats)


def project_judgements(*, project: Project) -> ProjectJudgements:
    """Read the project's judgements, comparisons and swap repeats as arrays (a few narrow queries).
    People only: machine judges' judgements are left out (monitoring reads a judge's verdicts
    from its own outputs)."""
    return judgements_from_rows(project=project, rows=project_rows(project=project))


def judgements_from_rows(*, project: Project, rows: ProjectRows) -> ProjectJudgements:
    """The report's arrays from the rows read (``project_rows``): items are all the comparisons by
    id, annotators the people who judged by id, whatever order the judgement rows come in, so
    rows kept and patched since (the incremental refresh) give the same arrays as a fresh read."""
    judgements, repeats = rows.judgements, rows.repeats
    comparisons = joined_comparisons(rows.comparisons, rows.responses, rows.prompts)
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


@dataclass(frozen=True)
class ProjectVotes:
    """People's votes of a project, the least a consensus fit needs. table: item over the judged
    comparisons only (I = len(comparison_ids)), annotator, choice [J]; comparison_ids [I] (sorted);
    annotator_ids [R] (sorted)."""

    table: agreement.JudgementTable
    comparison_ids: np.ndarray
    annotator_ids: np.ndarray


def _vote_columns(votes: QuerySet) -> np.ndarray:
    """People's rows of ``votes`` (judgements or repeats) as an int64 array [n, 3]: comparison id,
    annotator id, choice code (``CHOICE_CODES``)."""
    return _int_columns(
        human_judgements(votes)
        .order_by()
        .annotate(
            c_comparison=Cast("comparison_id", _BIG),
            c_annotator=Cast("annotator_id", _BIG),
            c_choice=_code("choice", CHOICE_CODES),
        ),
        ["c_comparison", "c_annotator", "c_choice"],
    )


def project_votes(*, project: Project) -> ProjectVotes:
    """People's judgements of the project as three integer columns (one packed query; no comparison,
    response or prompt scans: unjudged comparisons are not items here)."""
    with _bulk_reads():
        columns = _vote_columns(Judgement.objects.filter(comparison__project=project))
    comparison_ids, item = np.unique(columns[:, 0], return_inverse=True)
    annotator_ids, annotator = np.unique(columns[:, 1], return_inverse=True)
    table = agreement.JudgementTable(
        item=item.ravel(),
        annotator=annotator.ravel(),
        choice=columns[:, 2],
        n_items=comparison_ids.size,
        n_annotators=annotator_ids.size,
    )
    return ProjectVotes(table=table, comparison_ids=comparison_ids, annotator_ids=annotator_ids)


def _max_by_group(out: np.ndarray, group: np.ndarray, values: np.ndarray) -> None:
    """out[g] = max(out[g], values where group == g), by sorting (np.maximum.at is slow at scale)."""
    if group.size == 0:
        return
    order = np.lexsort((values, group))
    last = np.r_[group[order][1:] != group[order][:-1], True]
    targets = group[order][last]
    out[targets] = np.maximum(out[targets], values[order][last])


# --- Cached dashboard data (written by services.agreement.dashboard_refresh) -------------------------
def dashboard_cache_key(project: Project) -> str:
    return f"concord:agreement:dashboard:{project.pk}"


def refresh_pending_key(project: Project) -> str:
    return f"concord:agreement:pending:{project.pk}"


def judgements_fingerprint(*, project: Project) -> list[Any]:
    """What the report depends on, cheaply: people's judgement and repeat counts and the latest change."""
    judged = human_judgements(Judgement.objects.filter(comparison__project=project)).aggregate(
        n=Count("id"), latest=Max("updated_at")
    )
    repeats = RepeatJudgement.objects.filter(comparison__project=project).count()
    latest = judged["latest"].isoformat() if judged["latest"] else None
    return [judged["n"], latest, repeats]


def cached_dashboard(*, project: Project) -> dict | None:
    """The last computed dashboard data (with its ``computed_at``), or None if never computed."""
    return cache.get(dashboard_cache_key(project))


def agreement_alerts(*, project: Project) -> list[str]:
    """The alerts of the last computed report (for the project page); empty if none computed."""
    payload = cached_dashboard(project=project)
    return list(payload["alerts"]) if payload else []


# --- Suggestions and model judges ----------------------------------------------------------------------
def suggestion_report(*, project: Project) -> dict[str, Any] | None:
    """Anchoring on the project's suggestions (``agreement.suggestion_figures``), as plain numbers
    (None for an undefined figure): how often people kept the suggestion shown, and their kappa with
    the suggestion judge's current verdicts on judgements made with and without a suggestion.
    ``per_annotator``: {username: {"suggested", "kept"}}. None when the project names no suggestion
    judge and no judgement was ever made with a suggestion (the dashboard then says nothing)."""
    judgements = human_judgements(Judgement.objects.filter(comparison__project=project))
    judge_id = project.suggestion_judge_id
    if judge_id is None and not judgements.exclude(suggested_choice="").exists():
        return None
    with _bulk_reads():
        rows = _int_columns(
            judgements.order_by().annotate(
                c_comparison=Cast("comparison_id", _BIG),
                c_annotator=Cast("annotator_id", _BIG),
                c_choice=_code("choice", CHOICE_CODES),
                c_suggested=_code("suggested_choice", CHOICE_CODES),
            ),
            ["c_comparison", "c_annotator", "c_choice", "c_suggested"],
        )
        verdicts = _int_columns(
            Judgement.objects.filter(comparison__project=project, annotator_id=judge_id)
            .order_by()
            .annotate(
                c_comparison=Cast("comparison_id", _BIG), c_choice=_code("choice", CHOICE_CODES)
            ),
            ["c_comparison", "c_choice"],
        )
    verdicts = verdicts[np.argsort(verdicts[:, 0], kind="stable")]
    position = np.clip(np.searchsorted(verdicts[:, 0], rows[:, 0]), 0, max(len(verdicts) - 1, 0))
    found = verdicts[position, 0] == rows[:, 0] if len(verdicts) else np.zeros(len(rows), bool)
    judge = np.where(found, verdicts[position, 1] if len(verdicts) else 0, agreement.MISSING)
    annotator_ids, annotator = np.unique(rows[:, 1], return_inverse=True)
    figures = agreement.suggestion_figures(
        choice=rows[:, 2],
        suggested=rows[:, 3],
        judge=judge,
        annotator=annotator.ravel(),
        n_annotators=annotator_ids.size,
    )
    names = dict(
        get_user_model()
        .objects.filter(pk__in=annotator_ids.tolist())
        .values_list("pk", get_user_model().USERNAME_FIELD)
    )
    judge_name = None if judge_id is None else machine_account_label(_username(judge_id))

    def number(value: float) -> float | None:
        return None if np.isnan(value) else round(float(value), 4)

    return {
        "judge": judge_name,
        "n_suggested": figures.n_suggested,
        "kept": figures.kept,
        "kept_rate": number(figures.kept_rate),
        "kappa_suggested": number(figures.kappa_suggested),
        "n_with": figures.n_with,
        "kappa_unsuggested": number(figures.kappa_unsuggested),
        "n_without": figures.n_without,
        "anchoring_gap": number(figures.anchoring_gap),
        "per_annotator": {
            names.get(int(pk), str(pk)): {"suggested": int(n), "kept": int(k)}
            for pk, n, k in zip(
                annotator_ids.tolist(),
                figures.per_annotator_suggested,
                figures.per_annotator_kept,
                strict=True,
            )
            if n
        },
    }


def _username(user_id: int) -> str:
    user = get_user_model().objects.filter(pk=user_id).first()
    return "" if user is None else user.get_username()


def judges_beside_humans(*, project: Project) -> list[dict[str, Any]]:
    """Each model judge of the project measured like an annotator (kappa against each human and the
    human consensus, position bias, swap-flip rate, length bias, gold accuracy, its report's URL),
    from the callable ``settings.CONCORD_JUDGES_HOOK`` names (monitoring owns the judges; annotation
    never imports it). Empty when no hook is set."""
    hook = getattr(settings, "CONCORD_JUDGES_HOOK", "")
    return list(import_string(hook)(project=project)) if hook else []


def judges_vote_agreement(*, project: Project) -> list[dict[str, Any]]:
    """Each model judge beside the humans (``judges_beside_humans``) with the MT-Bench paper's
    agreement figures (``vote_agreement``: judge vs humans and humans vs humans, with and without
    ties) and its kappa with the human consensus; what ``agreement --json`` adds as "judges"."""
    keys = ("judge", "version", "kappa_consensus", "kappa_consensus_n", "vote_agreement")
    return [{key: row[key] for key in keys} for row in judges_beside_humans(project=project)]


# --- Drill-down ---------------------------------------------------------------------------------------
def annotator_disagreements(
    *, project: Project, username: str, limit: int = 50
) -> list[dict[str, Any]]:
    """The comparisons where the annotator's choice differs from the others' majority (leave-one-out),
    newest first: comparison id, external id, prompt, their choice, the others' votes."""
    user = human_judgements(get_user_model().objects.all(), "pk").get(
        **{get_user_model().USERNAME_FIELD: username}
    )
    mine = dict(
        Judgement.objects.filter(comparison__project=project, annotator=user).values_list(
            "comparison_id", "choice"
        )
    )
    others: dict[int, dict[str, int]] = {}
    for comparison_id, choice in (
        human_judgements(Judgement.objects.filter(comparison_id__in=list(mine)))
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
