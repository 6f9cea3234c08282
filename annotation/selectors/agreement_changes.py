"""Reads for the dashboard's incremental refresh: what changed in a project's judgements since the
rows were last read, and checksums that say whether rows kept and patched are the database's.

The refresh (``annotation.services.agreement_state``) keeps the rows it last read
(``project_rows(ids=True)``) with a watermark: the largest judgement id and the latest
``updated_at`` it saw. The next refresh reads only the judgements past the watermark
(``changed_judgements``: a new id, or edited since a margin before the latest edit seen), puts
them in place of the kept rows of the same id, and compares checksums of what it holds (NumPy,
``rows_checksum``) with the database's (``table_checksums``, one aggregate per table in SQL: a few
numbers come back): the same count, largest id and sum of per-row hashes for the judgements, the
comparisons, the responses' lengths and the prompts' clusters, or it reads everything again. So
whatever the watermark cannot see (a judgement deleted, an annotator becoming a machine account, a
row changed without its ``updated_at``, an edit committed after the margin, a comparison removed,
gold or a cluster changed) only costs a full read.

The per-row hash mixes the row's identity columns (its id first) with its value columns by a
product modulo a prime, so moving a value from one row to another changes the sum as surely as
changing it: h = (k1 * (k2 + 1)) % M with k1 = (sum of identity column i * I_i) % M and k2 = (sum
of value column j * V_j) % M, in 64-bit integers with C's remainder (the sign of the dividend),
which PostgreSQL's ``%`` and ``np.fmod`` both are. A text code (choice, side, gold) enters as
ascii(first letter) + length, '' as 0. A change goes unseen only if it leaves every sum as it was
(about one chance in 2**31 for a changed row). PostgreSQL only: elsewhere (the demo's SQLite) the
refresh reads everything.
"""

# The SQL below is built from this module's constants and Django's compiled queries only.
# ruff: noqa: S608

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np
from django.db import connection, transaction
from django.db.models import F, Q, QuerySet, Value
from django.db.models.functions import Cast, Coalesce, Length

from annotation.models import Comparison, Judgement, Project, Prompt, RepeatJudgement, Response
from annotation.selectors.agreement import (
    _BIG,
    DayNumber,
    _bulk_reads,
    _vote_columns,
    judgement_rows,
)
from common.roles import human_judgements

_M = 2_147_483_647  # 2**31 - 1, prime: every product below stays under 2**62
_IDENTITY = (1_000_003, 999_983, 65_537, 8_191)  # I_i
_VALUES = (7_919, 104_729, 1_299_709, 15_485_863)  # V_j
# A text code's number in the hash, by the code (MISSING, a, b, tie, both_bad): ascii + length.
_TEXT_CODE = np.array([0, ord("a") + 1, ord("b") + 1, ord("t") + 3, ord("b") + 8], np.int64)


@dataclass(frozen=True)
class TableChecksum:
    """Rows in three numbers: how many, the sum of their hashes (module doc), the largest id."""

    n: int
    hash_sum: int
    max_id: int


@dataclass(frozen=True)
class ProjectChecksums:
    """The checksums of what the report reads of a project (judgements: people's only), and the
    latest ``updated_at`` of those judgements (None when there are none)."""

    judgements: TableChecksum
    comparisons: TableChecksum
    responses: TableChecksum
    prompts: TableChecksum
    latest: datetime | None

    def same_rows(self, other: ProjectChecksums) -> bool:
        """Whether two sets of checksums describe the same rows (``latest`` aside)."""
        tables = ("judgements", "comparisons", "responses", "prompts")
        return all(getattr(self, t) == getattr(other, t) for t in tables)


def _people(project: Project) -> QuerySet:
    return human_judgements(Judgement.objects.filter(comparison__project=project))


def _text(column: str) -> str:
    return f"(ascii(q.{column}) + length(q.{column}))"


# Per table: the queryset's columns (aliases), the identity and value columns of the hash as SQL
# over them (``q.``; text columns through _text), in the order rows_checksum gives them.
def _tables(project: Project) -> dict[str, tuple[QuerySet, list[str], list[str]]]:
    return {
        "judgements": (
            _people(project).annotate(
                c_id=Cast("id", _BIG), c_comparison=Cast("comparison_id", _BIG),
                c_annotator=Cast("annotator_id", _BIG), c_choice=F("choice"),
                c_side=F("shown_left"),
                c_elapsed=Cast(Coalesce(Cast("elapsed_ms", _BIG), Value(-1)), _BIG),
                c_day=DayNumber("created_at"), c_updated=F("updated_at"),
            ),
            ["q.c_id", "q.c_comparison", "q.c_annotator"],
            [_text("c_choice"), _text("c_side"), "q.c_elapsed", "q.c_day"],
        ),
        "comparisons": (
            Comparison.objects.filter(project=project).annotate(
                c_id=Cast("id", _BIG), c_prompt=Cast("prompt_id", _BIG),
                c_a=Cast("response_a_id", _BIG), c_b=Cast("response_b_id", _BIG),
                c_gold=F("gold"), c_queue=Cast("queue_position", _BIG),
            ),
            ["q.c_id", "q.c_prompt", "q.c_a", "q.c_b"],
            [_text("c_gold"), "q.c_queue"],
        ),
        "responses": (
            Response.objects.filter(prompt__project=project).annotate(
                c_id=Cast("id", _BIG), c_length=Cast(Length("text"), _BIG)
            ),
            ["q.c_id"],
            ["q.c_length"],
        ),
        "prompts": (
            Prompt.objects.filter(project=project).annotate(
                c_id=Cast("id", _BIG),
                c_cluster=Cast(Coalesce(Cast("cluster", _BIG), Value(-1)), _BIG),
            ),
            ["q.c_id"],
            ["q.c_cluster"],
        ),
    }  # fmt: skip


def _hash_sql(identity: list[str], values: list[str]) -> str:
    k1 = " + ".join(f"{c}::bigint * {m}" for c, m in zip(identity, _IDENTITY, strict=False))
    k2 = " + ".join(f"{c}::bigint * {m}" for c, m in zip(values, _VALUES, strict=False))
    return (
        f"((({k1}) %% {_M}) * ((({k2}) %% {_M}) + 1)) %% {_M}"  # %% : a parameter marker's escape
    )


def table_checksums(*, project: Project) -> ProjectChecksums:
    """The checksums of the project's judgements (people's), comparisons, responses and prompts,
    each one aggregate in the database (PostgreSQL)."""
    found: dict[str, TableChecksum] = {}
    latest = None
    # No _bulk_reads: sums need no row order, so PostgreSQL may scan in parallel.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL jit = off")  # compiling costs more than it saves on these scans
        cursor.execute("SET LOCAL work_mem = '64MB'")  # the join's hash in memory, not temp files
        for name, (queryset, identity, values) in _tables(project).items():
            aliases = [a for a in queryset.query.annotations if a.startswith("c_")]
            inner, params = queryset.order_by().values_list(*aliases).query.sql_with_params()
            extra = ", max(q.c_updated)" if name == "judgements" else ""
            cursor.execute(
                f"SELECT count(*), coalesce(sum({_hash_sql(identity, values)}), 0), "
                f"coalesce(max(q.c_id), 0){extra} FROM ({inner}) AS q",  # nosec B608
                params,
            )
            n, hash_sum, max_id, *rest = cursor.fetchone()
            found[name] = TableChecksum(int(n), int(hash_sum), int(max_id))
            latest = rest[0] if rest else latest
    return ProjectChecksums(**found, latest=latest)


def _hash_rows(identity: list[np.ndarray], values: list[np.ndarray]) -> np.ndarray:
    k1 = sum(np.asarray(c, np.int64) * m for c, m in zip(identity, _IDENTITY, strict=False))
    k2 = sum(np.asarray(c, np.int64) * m for c, m in zip(values, _VALUES, strict=False))
    return np.fmod(np.fmod(k1, _M) * (np.fmod(k2, _M) + 1), _M)


def _checksum(ids: np.ndarray, hashes: np.ndarray) -> TableChecksum:
    if ids.size == 0:
        return TableChecksum(0, 0, 0)
    return TableChecksum(int(ids.size), int(hashes.sum(dtype=np.int64)), int(ids.max()))


def judgement_hashes(judgements: np.ndarray) -> np.ndarray:
    """The per-row hash of judgement rows [J, 7] (``judgement_rows(ids=True)``) -> [J] int64."""
    comparison, annotator, choice, side, elapsed, day, ids = np.asarray(judgements, np.int64).T
    return _hash_rows(
        [ids, comparison, annotator],
        [_TEXT_CODE[choice + 1], _TEXT_CODE[side + 1], elapsed, day],
    )


def rows_checksum(
    *,
    judgements: np.ndarray,
    comparisons: np.ndarray,
    responses: np.ndarray,
    prompts: np.ndarray,
    latest: datetime | None = None,
) -> ProjectChecksums:
    """The checksums of rows held in memory, as ``table_checksums`` computes them in SQL:
    judgements [J, 7] (``judgement_rows(ids=True)``), comparisons [I, 6], responses [N, 2] and
    prompts [P, 2] (``comparison_tables``). ``latest`` is passed through."""
    j = np.asarray(judgements, np.int64).reshape(-1, 7)
    c = np.asarray(comparisons, np.int64).reshape(-1, 6)
    r = np.asarray(responses, np.int64).reshape(-1, 2)
    p = np.asarray(prompts, np.int64).reshape(-1, 2)
    return ProjectChecksums(
        judgements=_checksum(j[:, 6], judgement_hashes(j)),
        comparisons=_checksum(
            c[:, 0],
            _hash_rows([c[:, 0], c[:, 4], c[:, 2], c[:, 3]], [_TEXT_CODE[c[:, 1] + 1], c[:, 5]]),
        ),
        responses=_checksum(r[:, 0], _hash_rows([r[:, 0]], [r[:, 1]])),
        prompts=_checksum(p[:, 0], _hash_rows([p[:, 0]], [p[:, 1]])),
        latest=latest,
    )


def changed_judgements(*, project: Project, after_id: int, since: datetime | None) -> np.ndarray:
    """People's judgements of the project with an id above ``after_id`` or edited at or after
    ``since`` (None: by id only) as ``judgement_rows(ids=True)`` [n, 7]."""
    changed = Q(id__gt=after_id)
    if since is not None:
        changed |= Q(updated_at__gte=since)
    with _bulk_reads():
        return judgement_rows(_people(project).filter(changed), ids=True)


def repeat_rows(*, project: Project) -> np.ndarray:
    """People's swap repeats of the project [S, 3] (comparison id, annotator id, choice code): read
    whole by every refresh (a few rows beside the judgements)."""
    with _bulk_reads():
        return _vote_columns(RepeatJudgement.objects.filter(comparison__project=project))
