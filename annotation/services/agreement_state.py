"""The agreement dashboard's incremental refresh (issue 30): the rows its last refresh read, kept in
a file, patched with the judgements changed since, and checked against the database.

``refresh_rows`` gives ``dashboard_refresh`` the rows to compute the report from. A full read
(``project_rows(ids=True)``) keeps its rows in ``AGREEMENT_STATE_DIR/project-<pk>.npz`` with their
checksums (``annotation.selectors.agreement_changes``) and a watermark. The next refresh:

1. reads the judgements with an id above the largest kept (the primary key's index: milliseconds)
   and puts them in place (same id) or adds them;
2. takes the database's checksums (one aggregate per table, no rows come back);
3. when the judgements' checksum differs (an edit), reads the judgements edited since the
   watermark (``updated_at`` from EDIT_MARGIN before the last check) and patches again;
4. uses the patched rows only when every checksum is the database's; anything else (a judgement
   deleted, a comparison removed, gold, a cluster or a response changed, an edit the watermark
   missed, no file, another format) reads everything again, and keeps that.

The rows are then the database's rows, in the same order (judgements by id) as a full read gives
them, so the report computed from them is the full recomputation's, every figure and bootstrap
interval (same seeds) alike (tests/annotation/agreement/test_dashboard_incremental.py).

Why a file: the rows of a 1,000,000-comparison project take tens of MB (each column stored in the
narrowest integer type that holds it); the shared cache (Redis) would hold them in memory and
block while they travel, and a table would be a second copy of the judgements to rewrite on every
refresh. A file is written once per refresh that changed something; losing it (another worker's
disk, a cleared var dir) costs one full read. PostgreSQL only: elsewhere (the demo's SQLite, small
projects) every refresh reads everything.
"""

from __future__ import annotations

import os
import tempfile
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
    ProjectRows,
    _bulk_reads,
    _vote_columns,
    judgements_fingerprint,
    project_rows,
)
from annotation.selectors.agreement_changes import (
    ProjectChecksums,
    TableChecksum,
    changed_judgements,
    judgement_hashes,
    rows_checksum,
    table_checksums,
)

STATE_VERSION = 1
# Edits are read again from this long before the last check: an edit saved before the check but
# committed after it (a slow transaction), or stamped by a web server whose clock runs behind the
# worker's, is still read. One older than that changes the checksum and costs a full read; a
# longer margin reads more rows again (an import of many judgements just before an edit is read
# again whole: the bench's 600,000 rows made that refresh slower than a full read).
EDIT_MARGIN = timedelta(minutes=2)
_TABLES = ("judgements", "comparisons", "responses", "prompts")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class RefreshRows:
    """The rows a refresh computes the report from (``rows.judgements`` [J, 7] by id), the
    judgements' fingerprint (as ``judgements_fingerprint``, taken before they were read), and how
    they were read: ``how`` "full" or "incremental", ``reason`` why, ``changed`` judgements read
    for the patch (0 for a full read)."""

    rows: ProjectRows
    fingerprint: list[Any]
    how: str
    reason: str
    changed: int = 0


@dataclass(frozen=True)
class _Kept:
    rows: ProjectRows
    checksums: ProjectChecksums
    since: datetime  # edits at or after this are read again


def state_path(project: Project) -> Path:
    """Where the project's kept rows live."""
    return Path(settings.AGREEMENT_STATE_DIR) / f"project-{project.pk}.npz"


def _narrow(column: np.ndarray) -> np.ndarray:
    """The column in the narrowest signed integer type that holds every value."""
    if column.size == 0:
        return column.astype(np.int8)
    low, high = int(column.min()), int(column.max())
    for dtype in (np.int8, np.int16, np.int32):
        if np.iinfo(dtype).min <= low and high <= np.iinfo(dtype).max:
            return column.astype(dtype)
    return column.astype(np.int64)


def _save(project: Project, kept: _Kept) -> None:
    """Write the kept rows (each column narrowed) and their checksums, atomically (a reader sees the
    old file or the new one)."""
    arrays: dict[str, np.ndarray] = {}
    for table in _TABLES:
        rows = getattr(kept.rows, table)
        for j in range(rows.shape[1]):
            arrays[f"{table}_{j}"] = _narrow(rows[:, j])
        checksum = getattr(kept.checksums, table)
        arrays[f"{table}_checksum"] = np.array([checksum.n, checksum.hash_sum, checksum.max_id])
    since = (kept.since - _EPOCH) // timedelta(microseconds=1)
    arrays["meta"] = np.array([STATE_VERSION, project.pk, since])
    folder = state_path(project).parent
    folder.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, suffix=".npz.part")
    try:
        with os.fdopen(handle, "wb") as out:
            np.savez(out, **arrays)
        os.replace(temporary, state_path(project))
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


_WIDTHS = {"judgements": 7, "comparisons": 6, "responses": 2, "prompts": 2}


def _load(project: Project) -> _Kept | None:
    """The kept rows, or None when there is no file, or it is another version's or project's, or
    unreadable."""
    try:
        with np.load(state_path(project)) as stored:
            version, pk, since = (int(v) for v in stored["meta"])
            if (version, pk) != (STATE_VERSION, project.pk):
                return None
            tables = {}
            for table, width in _WIDTHS.items():
                columns = [stored[f"{table}_{j}"] for j in range(width)]
                # column by column into a column-major array: contiguous copies (np.stack writes
                # strided rows: 0.7 s against 0.1 s for 3,000,000 judgements)
                rows = np.empty((columns[0].size, width), np.int64, order="F")
                for j, column in enumerate(columns):
                    rows[:, j] = column
                tables[table] = rows
            checksums = {
                t: TableChecksum(*(int(v) for v in stored[f"{t}_checksum"])) for t in _TABLES
            }
    except (OSError, KeyError, ValueError):
        return None
    empty = np.zeros((0, 3), np.int64)
    return _Kept(
        rows=ProjectRows(**tables, repeats=empty),
        checksums=ProjectChecksums(**checksums, latest=None),
        since=_EPOCH + timedelta(microseconds=since),
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


def _repeats(project: Project) -> np.ndarray:
    with _bulk_reads():
        return _vote_columns(RepeatJudgement.objects.filter(comparison__project=project))


def _full(project: Project, reason: str, *, keep: bool) -> RefreshRows:
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
    return RefreshRows(rows=rows, fingerprint=fingerprint, how="full", reason=reason)


def _incremental(project: Project, kept: _Kept) -> RefreshRows | str:
    """The kept rows patched (module doc), or why they cannot be (then a full read follows)."""
    after_id = kept.checksums.judgements.max_id
    new = changed_judgements(project=project, after_id=after_id, since=None)
    checked_at = timezone.now()
    database = table_checksums(project=project)
    if any(getattr(database, t) != getattr(kept.checksums, t) for t in _TABLES[1:]):
        return "comparisons, responses or prompts changed"
    judgements, checksum = _patch(kept.rows.judgements, kept.checksums.judgements, new)
    changed = new.shape[0]
    if checksum != database.judgements:  # edits (or a delete): read what was edited since
        edited = changed_judgements(project=project, after_id=after_id, since=kept.since)
        judgements, checksum = _patch(judgements, checksum, edited)
        changed = edited.shape[0]
        if checksum != database.judgements:
            return "judgements deleted or changed unseen"
    rows = ProjectRows(judgements, kept.rows.comparisons, kept.rows.responses,
                       kept.rows.prompts, _repeats(project))  # fmt: skip
    if changed:
        checksums = ProjectChecksums(
            checksum, kept.checksums.comparisons, kept.checksums.responses,
            kept.checksums.prompts, latest=None,
        )  # fmt: skip
        _save(project, _Kept(rows=rows, checksums=checksums, since=checked_at - EDIT_MARGIN))
    latest = database.latest.isoformat() if database.latest else None
    n_repeats = RepeatJudgement.objects.filter(comparison__project=project).count()
    return RefreshRows(
        rows=rows,
        fingerprint=[database.judgements.n, latest, n_repeats],
        how="incremental",
        reason="judgements changed" if changed else "nothing changed",
        changed=changed,
    )


def refresh_rows(*, project: Project, incremental: bool = True) -> RefreshRows:
    """The rows for the dashboard's refresh: the kept rows patched with what changed when that
    gives the database's rows (``incremental`` and PostgreSQL), else a full read (kept on
    PostgreSQL for the next refresh)."""
    if connection.vendor != "postgresql":
        return _full(project, "not PostgreSQL", keep=False)
    if not incremental:
        return _full(project, "asked for", keep=True)
    kept = _load(project)
    if kept is None:
        return _full(project, "no kept rows", keep=True)
    patched = _incremental(project, kept)
    if isinstance(patched, str):
        return _full(project, patched, keep=True)
    return patched
