"""The agreement dashboard's incremental refresh (issue 30): the rows its last refresh read, kept in
files, patched with the judgements changed since, and checked against the database.

``refresh_read`` gives ``dashboard_refresh`` the arrays to compute the report from. A full read
(``project_rows(ids=True)``) keeps its rows in ``AGREEMENT_STATE_DIR`` (``state_paths``: the
judgements in one file, the comparisons, responses and prompts in another) with their checksums
(``annotation.selectors.agreement_changes``) and a watermark. The next refresh:

1. reads the judgements with an id above the largest kept (the primary key's index: milliseconds)
   and puts them in place (same id) or adds them;
2. takes the database's checksums (one aggregate per table, no rows come back), on a connection of
   its own while this one computes the report from the patched rows (outside a transaction);
3. when the judgements' checksum differs (an edit), reads the judgements edited since the
   watermark (``updated_at`` from EDIT_MARGIN before the last check), patches again and computes
   again;
4. uses the patched rows (and what was computed from them) only when every checksum is the
   database's; anything else (a judgement deleted, a comparison removed, gold, a cluster or a
   response changed, an edit the watermark missed, no file, another format) reads everything
   again, and keeps that.

The rows are then the database's rows, in the same order (judgements by id) as a full read gives
them, so the report computed from them is the full recomputation's, every figure and bootstrap
interval (same seeds) alike (tests/annotation/agreement/test_dashboard_incremental.py).

Why files: the rows of a 1,000,000-comparison project take tens of MB (each column stored in the
narrowest integer type that holds it); the shared cache (Redis) would hold them in memory and
block while they travel, and a table would be a second copy of the judgements to rewrite on every
refresh. The judgements' file is written by each refresh that changed some, the other by full
reads only; losing either (another worker's disk, a cleared var dir) costs one full read.
PostgreSQL only: elsewhere (the demo's SQLite, small projects) every refresh reads everything.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings
from django.db import connection
from django.utils import timezone

from annotation.models import Project, RepeatJudgement
from annotation.selectors.agreement import (
    ProjectJudgements,
    ProjectRows,
    judgements_fingerprint,
    judgements_from_rows,
    project_rows,
)
from annotation.selectors.agreement_changes import (
    ProjectChecksums,
    TableChecksum,
    changed_judgements,
    judgement_hashes,
    repeat_rows,
    rows_checksum,
    table_checksums,
)

STATE_VERSION = 2
# Edits are read again from this long before the last check: an edit saved before the check but
# committed after it (a slow transaction), or stamped by a web server whose clock runs behind the
# worker's, is still read. One older than that changes the checksum and costs a full read; a
# longer margin reads more rows again (an import of many judgements just before an edit is read
# again whole: the bench's 600,000 rows made that refresh slower than a full read).
EDIT_MARGIN = timedelta(minutes=2)
_TABLES = ("judgements", "comparisons", "responses", "prompts")
_WIDTHS = {"judgements": 7, "comparisons": 6, "responses": 2, "prompts": 2}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The report's maths on the arrays, run beside the database's checksums (``dashboard_refresh``'s).
Compute = Callable[[ProjectJudgements], dict[str, Any]]


@dataclass(frozen=True)
class RefreshRead:
    """What a refresh computes the report from: the arrays (``data``), the judgements'
    fingerprint (as ``judgements_fingerprint``, taken before they were read), how the rows were
    read (``how`` "full" or "incremental", ``reason`` why, ``changed`` judgements read for the
    patch), and ``computed``: the maths' result when it ran beside the checksums (else None)."""

    data: ProjectJudgements
    fingerprint: list[Any]
    how: str
    reason: str
    changed: int = 0
    computed: dict[str, Any] | None = None


@dataclass(frozen=True)
class _Kept:
    rows: ProjectRows
    checksums: ProjectChecksums
    since: datetime  # edits at or after this are read again


def state_paths(project: Project) -> tuple[Path, Path]:
    """Where the project's kept rows live: the judgements (rewritten when they change) and the
    comparisons, responses and prompts (written by a full read only)."""
    folder = Path(settings.AGREEMENT_STATE_DIR)
    return (
        folder / f"project-{project.pk}.judgements.npz",
        folder / f"project-{project.pk}.comparisons.npz",
    )


def _narrow(column: np.ndarray) -> np.ndarray:
    """The column in the narrowest signed integer type that holds every value."""
    if column.size == 0:
        return column.astype(np.int8)
    low, high = int(column.min()), int(column.max())
    for dtype in (np.int8, np.int16, np.int32):
        if np.iinfo(dtype).min <= low and high <= np.iinfo(dtype).max:
            return column.astype(dtype)
    return column.astype(np.int64)


def _write(path: Path, project: Project, tables: dict[str, tuple[np.ndarray, TableChecksum]],
           since: datetime) -> None:  # fmt: skip
    """One file of tables (each column narrowed) with their checksums, written atomically (a reader
    sees the old file or the new one). Each file is checked against the database on its own, so
    the two need not come from the same refresh."""
    arrays: dict[str, np.ndarray] = {}
    for table, (rows, checksum) in tables.items():
        for j in range(rows.shape[1]):
            arrays[f"{table}_{j}"] = _narrow(rows[:, j])
        arrays[f"{table}_checksum"] = np.array([checksum.n, checksum.hash_sum, checksum.max_id])
    micros = (since - _EPOCH) // timedelta(microseconds=1)
    arrays["meta"] = np.array([STATE_VERSION, project.pk, micros])
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".npz.part")
    try:
        with os.fdopen(handle, "wb") as out:
            np.savez(out, **arrays)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _save_judgements(project: Project, judgements: np.ndarray, checksum: TableChecksum,
                     since: datetime) -> None:  # fmt: skip
    _write(state_paths(project)[0], project, {"judgements": (judgements, checksum)}, since)


def _save(project: Project, kept: _Kept) -> None:
    """Write both files (a full read)."""
    _save_judgements(project, kept.rows.judgements, kept.checksums.judgements, kept.since)
    others = {t: (getattr(kept.rows, t), getattr(kept.checksums, t)) for t in _TABLES[1:]}
    _write(state_paths(project)[1], project, others, kept.since)


def _read(path: Path, project: Project, tables: tuple[str, ...]) -> tuple[dict, dict, int] | None:
    """A file's tables [n, width] int64 (column-major), checksums and watermark (microseconds), or
    None when it is missing, unreadable, or another version's or project's."""
    try:
        with np.load(path) as stored:
            version, pk, micros = (int(v) for v in stored["meta"])
            if (version, pk) != (STATE_VERSION, project.pk):
                return None
            rows, checksums = {}, {}
            for table in tables:
                columns = [stored[f"{table}_{j}"] for j in range(_WIDTHS[table])]
                # column by column into a column-major array: contiguous copies (np.stack writes
                # strided rows: 0.7 s against 0.1 s for 3,000,000 judgements)
                rows[table] = np.empty((columns[0].size, len(columns)), np.int64, order="F")
                for j, column in enumerate(columns):
                    rows[table][:, j] = column
                checksums[table] = TableChecksum(*(int(v) for v in stored[f"{table}_checksum"]))
    except (OSError, KeyError, ValueError):
        return None
    return rows, checksums, micros


def _load(project: Project) -> _Kept | None:
    """The kept rows (both files), or None when either cannot be used."""
    judgements = _read(state_paths(project)[0], project, _TABLES[:1])
    others = _read(state_paths(project)[1], project, _TABLES[1:])
    if judgements is None or others is None:
        return None
    return _Kept(
        rows=ProjectRows(**judgements[0], **others[0], repeats=np.zeros((0, 3), np.int64)),
        checksums=ProjectChecksums(**judgements[1], **others[1], latest=None),
        since=_EPOCH + timedelta(microseconds=judgements[2]),
    )


def _patch(
    judgements: np.ndarray, checksum: TableChecksum, changed: np.ndarray
) -> tuple[np.ndarray, TableChecksum]:
    """Judgement rows by id [J, 7] with ``changed`` [n, 7] in place of the rows of the same id and
    the others added (by id), and their checksum, worked out from ``checksum`` and the rows
    replaced and added (not from every row). Writes into ``judgements``."""
    if changed.size == 0:
        return judgements, checksum
    changed = changed[np.argsort(changed[:, 6], kind="stable")]
    ids = judgements[:, 6]
    position = np.clip(np.searchsorted(ids, changed[:, 6]), 0, max(ids.size - 1, 0))
    found = ids[position] == changed[:, 6] if ids.size else np.zeros(changed.shape[0], bool)
    hash_sum = checksum.hash_sum - int(judgement_hashes(judgements[position[found]]).sum())
    hash_sum += int(judgement_hashes(changed).sum())
    judgements[position[found]] = changed[found]
    added = changed[~found]
    if added.size:
        judgements = np.concatenate([judgements, added])
        if ids.size and added[0, 6] < ids[-1]:  # an id below the largest kept: a late commit
            judgements = judgements[np.argsort(judgements[:, 6], kind="stable")]
    return judgements, TableChecksum(
        n=checksum.n + int(added.shape[0]),
        hash_sum=hash_sum,
        max_id=max(checksum.max_id, int(changed[:, 6].max())),
    )


def _full(project: Project, reason: str, *, keep: bool) -> RefreshRead:
    """Read everything; keep the rows (judgements by id) when ``keep``."""
    started = timezone.now()
    fingerprint = judgements_fingerprint(project=project)  # before the read: see dashboard_refresh
    rows = project_rows(project=project, ids=True)
    judgements = rows.judgements[np.argsort(rows.judgements[:, 6], kind="stable")]
    rows = ProjectRows(judgements, rows.comparisons, rows.responses, rows.prompts, rows.repeats)
    if keep:
        checksums = rows_checksum(
            judgements=rows.judgements,
            comparisons=rows.comparisons,
            responses=rows.responses,
            prompts=rows.prompts,
        )
        _save(project, _Kept(rows=rows, checksums=checksums, since=started - EDIT_MARGIN))
    data = judgements_from_rows(project=project, rows=rows)
    return RefreshRead(data=data, fingerprint=fingerprint, how="full", reason=reason)


def _check(
    project: Project, kept: ProjectChecksums, patched: TableChecksum, after_id: int, since: datetime
) -> tuple[ProjectChecksums, np.ndarray | None]:
    """The database's checksums and, when only the judgements' differs from ``patched`` (the rows
    patched by id: an edit, or a delete), the judgements with an id above ``after_id`` or edited
    at or after ``since`` (else None)."""
    database = table_checksums(project=project)
    others = all(getattr(database, t) == getattr(kept, t) for t in _TABLES[1:])
    if others and database.judgements != patched:
        return database, changed_judgements(project=project, after_id=after_id, since=since)
    return database, None


def _check_apart(*args: Any) -> tuple[ProjectChecksums, np.ndarray | None]:
    """``_check`` on this thread's own connection, closed after."""
    try:
        return _check(*args)
    finally:
        connection.close()


def _unknown_comparisons(
    comparisons: np.ndarray, judgements: np.ndarray, repeats: np.ndarray
) -> bool:
    """Whether any of ``judgements`` [n, 7] or ``repeats`` [S, 3] (comparison id first) names a
    comparison the kept ``comparisons`` [I, 6] (sorted by id) lack: one added since they were
    kept. Their arrays could not be made; a full read follows."""
    named = np.concatenate([judgements[:, 0], repeats[:, 0]])
    return bool(named.size) and not np.isin(named, comparisons[:, 0]).all()


def _incremental(project: Project, compute: Compute | None) -> RefreshRead | str:
    """The kept rows patched (module doc), or why they cannot be (then a full read follows).

    The arrays are made from the rows patched by id first; with ``compute`` and outside a
    transaction (another connection sees only what is committed) the maths runs on them while
    another connection takes the database's checksums, and its result stands when the checksums
    match: same rows, same figures. An edit means patching again (with the rows edited since, read
    beside too) and computing again.
    """
    kept = _load(project)
    if kept is None:
        return "no kept rows"
    # counted before they are read, as judgements_fingerprint is taken before a full read
    n_repeats = RepeatJudgement.objects.filter(comparison__project=project).count()
    sums, since, repeats = kept.checksums, kept.since, repeat_rows(project=project)
    after_id = sums.judgements.max_id
    new = changed_judgements(project=project, after_id=after_id, since=None)
    judgements, checksum = _patch(kept.rows.judgements, sums.judgements, new)
    changed = new.shape[0]
    tables = (kept.rows.comparisons, kept.rows.responses, kept.rows.prompts)
    if _unknown_comparisons(tables[0], new, repeats):
        return "comparisons added"  # judged since the rows were kept: the checksums would say so
    del kept  # the raw comparison columns live on in ``tables`` only until the arrays are made
    checked_at = timezone.now()
    data = judgements_from_rows(project=project, rows=ProjectRows(judgements, *tables, repeats))
    del tables
    computed = None
    check = (project, sums, checksum, after_id, since)
    if compute is not None and not connection.in_atomic_block:
        with ThreadPoolExecutor(max_workers=1) as pool:
            checking = pool.submit(_check_apart, *check)
            computed = compute(data)
            database, edited = checking.result()
    else:
        database, edited = _check(*check)
    if any(getattr(database, t) != getattr(sums, t) for t in _TABLES[1:]):
        return "comparisons, responses or prompts changed"
    if edited is not None:  # edits (or a delete): patch with what was edited since
        data = computed = None  # let the first arrays go before the second are made
        judgements, checksum = _patch(judgements, checksum, edited)
        changed = edited.shape[0]
        if checksum != database.judgements:
            return "judgements deleted or changed unseen"
        others = _read(state_paths(project)[1], project, _TABLES[1:])
        if others is None:
            return "no kept rows"
        rows = ProjectRows(judgements, *(others[0][t] for t in _TABLES[1:]), repeats)
        data, computed = judgements_from_rows(project=project, rows=rows), None
    if changed:
        _save_judgements(project, judgements, checksum, checked_at - EDIT_MARGIN)
    latest = database.latest.isoformat() if database.latest else None
    return RefreshRead(
        data=data,
        fingerprint=[database.judgements.n, latest, n_repeats],
        how="incremental",
        reason="judgements changed" if changed else "nothing changed",
        changed=changed,
        computed=computed,
    )


def refresh_read(
    *, project: Project, incremental: bool = True, compute: Compute | None = None
) -> RefreshRead:
    """The arrays for the dashboard's refresh: from the kept rows patched with what changed when
    that gives the database's rows (``incremental`` and PostgreSQL), else from a full read (kept on
    PostgreSQL for the next refresh). ``compute``: the maths, run beside the database's checksums
    when it can be (``RefreshRead.computed``)."""
    if connection.vendor != "postgresql":
        return _full(project, "not PostgreSQL", keep=False)
    if not incremental:
        return _full(project, "asked for", keep=True)
    patched = _incremental(project, compute)
    if isinstance(patched, str):
        return _full(project, patched, keep=True)
    return patched
