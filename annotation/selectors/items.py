"""Reads of the item browser: a project's comparisons, filtered, sorted and paged by keyset.

Paging never uses OFFSET: a page is "the ``PAGE_SIZE`` rows after (or before) the cursor", where a
cursor encodes the sort key and primary key of the row at the page's edge. Page 20,000 of a project
of 1,000,000 comparisons costs what page 1 costs, and a comparison added while a lead pages through
never shifts a page (no row is shown twice or skipped).

Filters are independent ``Q`` builders: each status is one entry of ``STATUS_FILTERS`` ("adjudicated":
a current verdict exists), origin is ``Exists`` over judgements and assignments. On PostgreSQL the
vote counts (status, agreement, the table's columns) and the Dawid-Skene margin are read from each
comparison's ``StoredConsensus`` row (kept by triggers in the transaction that changes
judgements), so the margin and agreement filters are scans of its indexes; elsewhere the counts are
counted, and the margin read from the rows the refit task wrote. Search (words, phrases, ``or``,
-word, ``*substring*``) is ``annotation.selectors.search``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import (
    Count,
    Exists,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.functions import Coalesce, Substr
from django.utils import timezone

from annotation.models import (
    Adjudication,
    Assignment,
    Comparison,
    Judgement,
    Project,
    StoredConsensus,
)
from annotation.selectors.search import (  # noqa: F401 - contains_search, websearch_terms: re-exported
    contains_search,
    planner_estimate,
    search_filter,
    websearch_terms,
)
from common.errors import ConcordError
from common.roles import human_judgements


def _people_judgements() -> QuerySet:
    """Every judgement by a person (machine judges' are left out of the browser's figures)."""
    return human_judgements(Judgement.objects.all())


PAGE_SIZE = 50
COUNT_CAP = 1_000  # matching rows are counted up to here ("more than 1000": counting costs a scan)
# Above this many rows by the planner's estimate, the count shown is the estimate ("about N"): it
# costs planning only, where counting a sparse filter walks the whole project (PostgreSQL only).
ESTIMATE_FROM = 10_000
PROMPT_PREVIEW_CHARS = 140


AGREEMENTS = ("unjudged", "single", "unanimous", "disagreement")
# Older names of AGREEMENTS still accepted in a URL: "split" was "disagreement" before the word was
# kept for the adjudication queue's "no majority".
AGREEMENT_ALIASES = {"split": "disagreement"}
ORIGINS = ("imported", "here")
GOLD = ("yes", "no")
# Sortable columns: name -> the annotation or field the keyset runs on.
SORTS = {"id": "id", "queue": "queue_position", "judgements": "n_judged", "cluster": "cluster_key"}


def _active_lease(now: datetime) -> Exists:
    return Exists(
        Assignment.objects.filter(
            comparison=OuterRef("pk"), status=Assignment.Status.ACTIVE, expires_at__gte=now
        )
    )


def _stored() -> bool:
    """Whether the database keeps ``StoredConsensus`` in step with judgements (its triggers)."""
    return connection.vendor == "postgresql"


def _status_open(project: Project, now: datetime) -> Q:
    # NOT EXISTS rather than n_judged = 0: an anti-join the planner merges along both id indexes
    # (the stored consensus's primary key: a narrow table of judged comparisons only).
    judged = (
        StoredConsensus.objects.filter(comparison=OuterRef("pk"))
        if _stored()
        else _people_judgements().filter(comparison=OuterRef("pk"))
    )
    return ~Q(Exists(judged)) & ~Q(_active_lease(now))


def _needed(project: Project) -> Coalesce:
    """Judgements a comparison needs: its own ``target_overlap`` (overlap reduction gave it fewer)
    or the project's overlap."""
    return Coalesce(F("target_overlap"), Value(project.overlap))


def _status_in_progress(project: Project, now: datetime) -> Q:
    started = Q(n_judged__gt=0) | Q(_active_lease(now))
    return started & Q(n_judged__lt=_needed(project))


def _status_complete(project: Project, now: datetime) -> Q:
    return Q(n_judged__gte=_needed(project))


def _status_adjudicated(project: Project, now: datetime) -> Q:
    current = Adjudication.objects.filter(comparison=OuterRef("pk"), superseded_at__isnull=True)
    return Q(Exists(current))


# status name -> (project, now) -> Q over the annotated queryset (``n_judged`` is available).
STATUS_FILTERS: dict[str, Callable[[Project, datetime], Q]] = {
    "open": _status_open,
    "in_progress": _status_in_progress,
    "complete": _status_complete,
    "adjudicated": _status_adjudicated,
}
# What the page shows for each status (the URL keeps the key).
STATUS_LABELS = {
    "open": "open",
    "in_progress": "in progress",
    "complete": "complete",
    "adjudicated": "adjudicated",
}


@dataclass(frozen=True)
class ItemFilters:
    """The browser's filters and sort, as the GET parameters of the items page carry them.

    q: search words; status: a STATUS_FILTERS key; cluster: a Prompt.cluster label; agreement: one
    of AGREEMENTS (no judgement, one, several that all agree, several that differ; "split", its old
    name, is read as "disagreement"); margin_min /
    margin_max: Dawid-Skene margin P(chosen) - P(rejected), 0..1, inclusive; gold: "yes"/"no";
    annotator: a username who judged it; model: a model name on either side, or "m1 vs m2" for the
    pair in either order; origin: "imported" (a judgement made outside the labelling screen) or
    "here" (one made on it); sort: a SORTS key, descending when ``descending``.
    """

    q: str = ""
    status: str = ""
    cluster: int | None = None
    agreement: str = ""
    margin_min: float | None = None
    margin_max: float | None = None
    gold: str = ""
    annotator: str = ""
    model: str = ""
    origin: str = ""
    sort: str = "id"
    descending: bool = False

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> ItemFilters:
        """Filters from GET parameters; ConcordError naming the parameter for a bad value."""

        def choice(
            name: str, allowed: tuple[str, ...] | list[str], aliases: Mapping[str, str] = {}
        ) -> str:
            value = params.get(name, "").strip()
            value = aliases.get(value, value)
            if value and value not in allowed:
                raise ConcordError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
            return value

        def number(name: str, kind: type) -> Any:
            raw = params.get(name, "").strip()
            if not raw:
                return None
            try:
                return kind(raw)
            except ValueError:
                raise ConcordError(f"{name} must be a number; got {raw!r}") from None

        order = params.get("order", "").strip() or "id"
        if order.removeprefix("-") not in SORTS:
            raise ConcordError(f"order must be one of {', '.join(SORTS)} (- for descending)")
        filters = cls(
            q=params.get("q", "").strip()[:200],
            status=choice("status", list(STATUS_FILTERS)),
            cluster=number("cluster", int),
            agreement=choice("agreement", AGREEMENTS, AGREEMENT_ALIASES),
            margin_min=number("margin_min", float),
            margin_max=number("margin_max", float),
            gold=choice("gold", GOLD),
            annotator=params.get("annotator", "").strip(),
            model=params.get("model", "").strip(),
            origin=choice("origin", ORIGINS),
            sort=order.removeprefix("-"),
            descending=order.startswith("-"),
        )
        for name in ("margin_min", "margin_max"):
            value = getattr(filters, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise ConcordError(f"{name} must be between 0 and 1; got {value}")
        return filters

    @property
    def order(self) -> str:
        return ("-" if self.descending else "") + self.sort


@dataclass(frozen=True)
class ItemRow:
    """One line of the table: the comparison, a prompt preview, the model names, judgements made,
    distinct choices among them, the prompt's cluster and the item's status."""

    id: int
    external_id: str
    prompt: str
    model_a: str
    model_b: str
    gold: str
    n_judged: int
    n_choices: int
    cluster: int | None
    status: str
    sort_value: Any = field(repr=False, default=None)

    @property
    def status_label(self) -> str:
        """The status in words ("in progress", not the URL's ``in_progress``)."""
        return STATUS_LABELS[self.status]

    @property
    def agreement(self) -> str:
        if self.n_judged == 0:
            return "unjudged"
        if self.n_judged == 1:
            return "single"
        return "unanimous" if self.n_choices == 1 else "disagreement"


@dataclass(frozen=True)
class ItemPage:
    """A page of rows and the cursors of its neighbours (None at either end); ``matching`` counts
    the rows that pass the filters up to COUNT_CAP (``matching_capped``: there are more), or is
    the planner's estimate, rounded, when that is above ESTIMATE_FROM (``matching_estimated``).
    ``total``: the project's comparisons, estimated the same way (counting 1M rows costs 100 ms
    or more on every page)."""

    rows: list[ItemRow]
    next_cursor: str | None
    previous_cursor: str | None
    total: int
    matching: int
    matching_capped: bool
    matching_estimated: bool = False
    # ``total`` is the planner's estimate, rounded (above ESTIMATE_FROM)
    total_estimated: bool = False


def cursor_encode(sort_value: Any, pk: int) -> str:
    """An opaque cursor for the row with this sort key and primary key (url-safe base64 of JSON)."""
    return base64.urlsafe_b64encode(json.dumps([sort_value, pk]).encode()).decode().rstrip("=")


def cursor_decode(cursor: str) -> tuple[Any, int]:
    """(sort value, pk) from a cursor; ConcordError if it was not made by ``cursor_encode``."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value, pk = json.loads(raw)
    except (ValueError, TypeError, binascii.Error):
        raise ConcordError("the page cursor is damaged; start again from the first page") from None
    if not isinstance(pk, int) or not (value is None or isinstance(value, int)):
        raise ConcordError("the page cursor is damaged; start again from the first page")
    return value, pk


def _count_of(queryset: QuerySet, field_name: str, *, distinct: bool = False) -> Coalesce:
    counted = (
        queryset.filter(comparison=OuterRef("pk"))
        .order_by()
        .values("comparison")
        .annotate(n=Count(field_name, distinct=distinct))
        .values("n")
    )
    return Coalesce(Subquery(counted, output_field=IntegerField()), Value(0))


def _model_filter(model: str) -> Q:
    first, sep, second = model.partition(" vs ")
    if not sep:
        return Q(response_a__model_name=model) | Q(response_b__model_name=model)
    first, second = first.strip(), second.strip()
    return Q(response_a__model_name=first, response_b__model_name=second) | Q(
        response_a__model_name=second, response_b__model_name=first
    )


def _origin_filter(origin: str) -> Q:
    """A judgement made on the labelling screen has the annotator's finished assignment on the
    comparison; an imported one has none (the import service writes judgements only)."""
    on_screen = Assignment.objects.filter(
        comparison=OuterRef("comparison"),
        annotator=OuterRef("annotator"),
        status=Assignment.Status.DONE,
    )
    judgements = _people_judgements().filter(comparison=OuterRef("pk"))
    if origin == "here":
        return Q(Exists(judgements.filter(Exists(on_screen))))
    return Q(Exists(judgements.filter(~Exists(on_screen))))


def _agreement_filter(agreement: str) -> Q:
    """One of AGREEMENTS as a Q: on the stored consensus's columns where the database keeps it
    (its (project, n_votes, n_choices) index), else on the counted ``n_judged`` and ``n_choices``."""
    if _stored():
        if agreement == "unjudged":
            return ~Q(Exists(StoredConsensus.objects.filter(comparison=OuterRef("pk"))))
        votes, choices = "stored_consensus__n_votes", "stored_consensus__n_choices"
    else:
        votes, choices = "n_judged", "n_choices"
    return {
        "unjudged": Q(**{votes: 0}),
        "single": Q(**{votes: 1}),
        "unanimous": Q(**{f"{votes}__gte": 2, choices: 1}),
        "disagreement": Q(**{f"{votes}__gte": 2, f"{choices}__gt": 1}),
    }[agreement]


def _with_counts(queryset: QuerySet) -> QuerySet:
    """``n_judged`` and ``n_choices`` (distinct choices) per comparison, once: the stored
    consensus's (a left join on its primary key) where the database keeps it, else counted."""
    if "n_judged" in queryset.query.annotations:
        return queryset
    if _stored():
        return queryset.annotate(
            n_judged=Coalesce(F("stored_consensus__n_votes"), Value(0)),
            n_choices=Coalesce(F("stored_consensus__n_choices"), Value(0)),
        )
    judgements = _people_judgements()
    return queryset.annotate(
        n_judged=_count_of(judgements, "id"),
        n_choices=_count_of(judgements, "choice", distinct=True),
    )


def items_queryset(
    *, project: Project, filters: ItemFilters, id_bound: tuple[str, int] | None = None
) -> QuerySet:
    """The project's comparisons with the filters applied, unordered. Only what a filter needs is
    annotated (``n_judged``, ``n_choices`` for status and agreement), so counting stays cheap.

    ``id_bound``: ("gt" or "lt", id) when only comparisons past that id are wanted (a page after
    a keyset cursor in id order). The caller still filters the comparisons by it; it is repeated
    inside the search and margin subqueries, where PostgreSQL does not carry it over from the
    outer id and would read those tables from their first row up to the cursor.
    """
    queryset = Comparison.objects.filter(project=project)
    if filters.status or filters.agreement:
        queryset = _with_counts(queryset)
    bound = {f"comparison_id__{id_bound[0]}": id_bound[1]} if id_bound else {}
    if filters.q:
        queryset = queryset.filter(search_filter(project, filters.q, bound=bound))
    if filters.status:
        queryset = queryset.filter(STATUS_FILTERS[filters.status](project, timezone.now()))
    if filters.cluster is not None:
        queryset = queryset.filter(prompt__cluster=filters.cluster)
    if filters.agreement:
        queryset = queryset.filter(
            _agreement_filter(AGREEMENT_ALIASES.get(filters.agreement, filters.agreement))
        )
    if filters.margin_min is not None or filters.margin_max is not None:
        low = filters.margin_min if filters.margin_min is not None else 0.0
        high = filters.margin_max if filters.margin_max is not None else 1.0
        queryset = queryset.filter(
            pk__in=StoredConsensus.objects.filter(
                project=project, ds_margin__gte=low, ds_margin__lte=high, **bound
            ).values("comparison_id")
        )
    if filters.gold:
        queryset = queryset.exclude(gold="") if filters.gold == "yes" else queryset.filter(gold="")
    if filters.annotator:
        people = human_judgements(get_user_model().objects.all(), "pk")
        user = people.filter(username=filters.annotator).first()
        if user is None:
            raise ConcordError(f"annotator: no user named {filters.annotator!r}")
        queryset = queryset.filter(
            Exists(Judgement.objects.filter(comparison=OuterRef("pk"), annotator=user))
        )
    if filters.model:
        queryset = queryset.filter(_model_filter(filters.model))
    if filters.origin:
        queryset = queryset.filter(_origin_filter(filters.origin))
    return queryset


def _after(key: str, value: Any, pk: int, *, descending: bool) -> Q:
    """Rows strictly after (key, pk) = (value, pk) in the (key, id) order, ascending or not. The
    extra ``key >= value`` bound lets an index on the key start at the cursor instead of at the top."""
    cmp = "lt" if descending else "gt"
    if key == "id":
        return Q(**{f"id__{cmp}": pk})
    bound = Q(**{f"{key}__{cmp}e": value})
    return bound & (Q(**{f"{key}__{cmp}": value}) | Q(**{key: value, f"id__{cmp}": pk}))


def _status_of(n_judged: int, leased: bool, overlap: int) -> str:
    if n_judged >= overlap:
        return "complete"
    return "in_progress" if n_judged or leased else "open"


def items_page(
    *,
    project: Project,
    filters: ItemFilters,
    after: str | None = None,
    before: str | None = None,
    page_size: int | None = None,
) -> ItemPage:
    """One page of the browser: the ``page_size`` rows after cursor ``after`` (or before cursor
    ``before``; the first page when neither) in the order of ``filters.sort``, ties broken by id.
    ``page_size``: rows per page, PAGE_SIZE when None."""
    page_size = page_size or PAGE_SIZE
    if after and before:
        raise ConcordError("give either a next or a previous cursor, not both")
    key = SORTS[filters.sort]
    backwards = before is not None
    descending = filters.descending != backwards
    cursor = cursor_decode(after or before) if after or before else None
    # The page in two reads: the ids of its rows (filters, keyset and order only, so the filters'
    # anti- and semi-joins walk indexes beside each other), then those rows' columns by id. In
    # one read, every comparison the walk passed had its row fetched and joined first (on 1M
    # comparisons, status "open" read 266,717 rows for 51).
    id_bound = (("lt" if descending else "gt"), cursor[1]) if cursor and key == "id" else None
    queryset = items_queryset(project=project, filters=filters, id_bound=id_bound)
    if key == "n_judged":
        queryset = _with_counts(queryset)
    elif key == "cluster_key":
        queryset = queryset.annotate(cluster_key=Coalesce(F("prompt__cluster"), Value(-1)))
    if cursor is not None:
        queryset = queryset.filter(_after(key, cursor[0], cursor[1], descending=descending))
    ordering = [f"-{key}", "-id"] if descending else [key, "id"]
    if key == "id":
        ordering = ordering[1:]
    page_ids = list(queryset.order_by(*ordering).values_list("id", flat=True)[: page_size + 1])
    values = (
        _with_counts(Comparison.objects.filter(pk__in=page_ids))
        .annotate(
            cluster_key=Coalesce(F("prompt__cluster"), Value(-1)),
            prompt_preview=Substr("prompt__text", 1, PROMPT_PREVIEW_CHARS),
            leased=_active_lease(timezone.now()),
        )
        .values(
            "id",
            "external_id",
            "prompt_preview",
            "response_a__model_name",
            "response_b__model_name",
            "gold",
            "n_judged",
            "n_choices",
            "prompt__cluster",
            "leased",
            "target_overlap",
            key,
        )
    )
    by_id = {v["id"]: v for v in values}
    fetched = [by_id[pk] for pk in page_ids]
    more = len(fetched) > page_size
    fetched = fetched[:page_size]
    if backwards:
        fetched.reverse()
    rows = [
        ItemRow(
            id=v["id"],
            external_id=v["external_id"],
            prompt=v["prompt_preview"],
            model_a=v["response_a__model_name"],
            model_b=v["response_b__model_name"],
            gold=v["gold"],
            n_judged=v["n_judged"],
            n_choices=v["n_choices"],
            cluster=v["prompt__cluster"],
            status=_status_of(v["n_judged"], v["leased"], v["target_overlap"] or project.overlap),
            sort_value=v[key],
        )
        for v in fetched
    ]
    has_next = (more and not backwards) or backwards
    has_previous = (more and backwards) or (after is not None)
    matching, capped, estimated = _matching_count(
        items_queryset(project=project, filters=filters).order_by(),
        only_page=len(rows) if not has_next and not has_previous else None,
    )
    total, total_estimated = _project_total(project)
    return ItemPage(
        rows=rows,
        next_cursor=cursor_encode(rows[-1].sort_value, rows[-1].id) if rows and has_next else None,
        previous_cursor=(
            cursor_encode(rows[0].sort_value, rows[0].id) if rows and has_previous else None
        ),
        total=total,
        matching=matching,
        matching_capped=capped,
        matching_estimated=estimated,
        total_estimated=total_estimated,
    )


def _about(n: int) -> int:
    """``n`` to two significant figures (an estimate shown as "about 270000", not "about 271,493")."""
    digits = max(0, len(str(n)) - 2)
    return round(n, -digits)


def _large_estimate(queryset: QuerySet) -> int | None:
    """The planner's rounded estimate of ``queryset``'s rows when above ESTIMATE_FROM (EXPLAIN:
    nothing scanned), else None (count them)."""
    estimate = planner_estimate(queryset)
    return _about(estimate) if estimate is not None and estimate > ESTIMATE_FROM else None


def _project_total(project: Project) -> tuple[int, bool]:
    """(total, estimated): the project's comparisons, the planner's rounded estimate above
    ESTIMATE_FROM, else counted."""
    queryset = Comparison.objects.filter(project=project)
    estimate = _large_estimate(queryset)
    return (estimate, True) if estimate is not None else (queryset.count(), False)


def _matching_count(queryset: QuerySet, *, only_page: int | None) -> tuple[int, bool, bool]:
    """(matching, capped, estimated) for the count line. ``only_page``: the rows of a page that has
    no neighbour, which are all the matches, exactly. Else the planner's estimate above
    ESTIMATE_FROM (about), else a count up to COUNT_CAP."""
    if only_page is not None:
        return only_page, False, False
    estimate = _large_estimate(queryset)
    if estimate is not None:
        return estimate, False, True
    counted = queryset[: COUNT_CAP + 1].count()
    return min(counted, COUNT_CAP), counted > COUNT_CAP, False
