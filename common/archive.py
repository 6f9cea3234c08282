"""Project archives: one zip file holding a project's whole history, written and restored table by table.

Each app declares the tables it owns (``ArchivePart``, registered from its ``AppConfig.ready`` like the
job kinds of ``common.jobs``), so this module knows no app's models and no app imports upwards: the
annotation part writes projects, comparisons and judgements, training its runs, monitoring its rounds
and judges. The file is a zip of one JSON-lines member per table (rows in primary-key order, every
concrete field by its column name, user references as usernames) plus ``users.jsonl`` and a
``manifest.json`` with the format version, the member order, and per member its row count, SHA-256,
size in bytes and primary-key range. Restoring (``common.archive_restore``) checks every member
against the manifest before the first row is written, then loads all tables in one transaction:
primary keys are kept when the archived range is free in this instance (so exports, which name
comparison ids, hash the same) and remapped otherwise; foreign keys and the JSON fields that list
ids follow the map.

Three more things travel with the rows:

- files a row names by folder (``Table.files``: an export's JSONL files), as ``files/<model>/<pk>/
  <name>`` members checked like the tables; restoring writes them under this instance's folder
  (``FolderFiles.destination``), checks them against the row and points the row at them;
- each account's roles (``users.jsonl``): an account the restore creates gets them (inactive
  still); an existing account keeps its own, plus what a part's ``after_restore`` gives (the
  annotation part: the role each restored membership needs);
- ids inside JSON payloads under conventional keys (``Table.json_ids``: an event's
  ``"comparison_ids"``), mapped to the restored ids once every table is loaded.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import io
import json
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

from django.apps import apps
from django.contrib.auth import get_user_model
from django.db import models
from django.utils import timezone

from common.errors import ConcordError
from common.roles import ALL_ROLES

FORMAT = "concord-project-archive"
# 2: users carry their roles; rows' folders travel as files/ members.
VERSION = 2
MANIFEST = "manifest.json"
USERS = "users.jsonl"
FILES = "files"  # the manifest's "model" of a carried file
_SAFE_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}")
CHUNK = 1000  # rows per bulk insert and per read


class ArchiveError(ConcordError):
    """The archive is unreadable, truncated, tampered with, or does not fit this instance."""


@dataclass(frozen=True)
class FolderFiles:
    """The files in the folder a row names (``field``: the column holding its path), carried in
    the archive. ``destination(row, options)``: the folder they are written to on restore (the row
    is the restored instance); ``check(row, folder)``: raises ``ArchiveError`` when the files there
    do not belong to the row (e.g. an export's hash)."""

    field: str
    destination: Callable[[models.Model, dict[str, Any]], Path]
    check: Callable[[models.Model, Path], None] | None = None


@dataclass(frozen=True)
class Table:
    """One model's rows of a project.

    ``rows(project)``: the queryset of those rows. ``id_lists``: JSON fields that hold lists of
    primary keys (``"field"``, or ``"field.key"`` for a list under a key of a JSON object), mapped
    to the model label they point at (remapped on restore). ``json_ids``: JSON fields whose nested
    objects may name rows under conventional keys, anywhere in the payload (``{"changes":
    {"comparison_ids": "annotation.Comparison"}}``): an id or a list of ids, remapped once every
    table is loaded. ``prepare``: called on each row dict before it is inserted, with the restore
    options (e.g. the project's new slug). ``files``: the row's folder travels with it."""

    model: str
    rows: Callable[[Any], models.QuerySet]
    id_lists: dict[str, str] = field(default_factory=dict)
    prepare: Callable[[dict[str, Any], dict[str, Any]], None] | None = None
    json_ids: dict[str, dict[str, str]] = field(default_factory=dict)
    files: FolderFiles | None = None


@dataclass(frozen=True)
class ArchivePart:
    """An app's tables, in the order they can be inserted (targets before the rows naming them).
    Parts are written and restored by ascending ``order``."""

    name: str
    order: int
    tables: tuple[Table, ...]
    # Called inside the restore's transaction once every row is in: (old -> new keys per model
    # label, restore options). The annotation part gives members their roles.
    after_restore: Callable[[dict[str, dict[Any, Any]], dict[str, Any]], None] | None = None


_PARTS: dict[str, ArchivePart] = {}


def archive_part_register(part: ArchivePart) -> None:
    """Add (or replace) an app's part; called from the app's ``AppConfig.ready``."""
    _PARTS[part.name] = part


def archive_parts() -> list[ArchivePart]:
    """Every registered part, by order."""
    return sorted(_PARTS.values(), key=lambda p: p.order)


def archive_tables() -> list[Table]:
    """Every registered table, parts by order, tables in their part's order."""
    return [t for p in archive_parts() for t in p.tables]


def _member(label: str) -> str:
    return f"{label.lower()}.jsonl"


def is_user_reference(f: models.Field) -> bool:
    return f.is_relation and f.related_model is get_user_model()


def _encode(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Decimal | UUID):
        return str(value)
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return value


def _dump(row: dict[str, Any]) -> bytes:
    return (json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")


# --- Writing -------------------------------------------------------------------------------------------
def archive_write(project: Any, out: Path | io.IOBase, *, slug: str) -> dict[str, Any]:
    """Write ``project``'s archive to ``out`` (a path or a writable binary file); returns the
    manifest. Rows are streamed ``CHUNK`` at a time; memory holds only the sets of written keys."""
    user_ids: set[int] = set()
    names: dict[int, str] = {}
    written: dict[str, set[Any]] = {}
    members: list[dict[str, Any]] = []
    folders: list[tuple[str, Any, Path]] = []  # (model label, pk, folder) of rows with files
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for table in archive_tables():
            model = apps.get_model(table.model)
            fields = model._meta.concrete_fields
            pk_name = model._meta.pk.attname
            qs = table.rows(project).order_by("pk").values_list(*[f.attname for f in fields])
            digest, n, size = hashlib.sha256(), 0, 0
            keys: set[Any] = set()
            with zf.open(_member(table.model), "w", force_zip64=True) as handle:
                for values in qs.iterator(chunk_size=CHUNK):
                    row = dict(zip([f.attname for f in fields], values, strict=True))
                    for f in fields:
                        value = row[f.attname]
                        if f.is_relation and value is not None:
                            if is_user_reference(f):
                                user_ids.add(value)
                                value = _username(value, names)
                            else:
                                _check_reference(table.model, row[pk_name], f, value, written)
                        row[f.attname] = _encode(value)
                    if table.files is not None:
                        folders.append((table.model, row[pk_name], Path(row[table.files.field])))
                    line = _dump(row)
                    handle.write(line)
                    digest.update(line)
                    n, size = n + 1, size + len(line)
                    keys.add(row[pk_name])
            written[table.model] = keys
            members.append(
                {"name": _member(table.model), "model": table.model, "rows": n, "bytes": size,
                 "sha256": digest.hexdigest(), "min_pk": min(keys, default=None),
                 "max_pk": max(keys, default=None)}
            )  # fmt: skip
        for label, pk, folder in folders:
            members.extend(_write_files(zf, label, pk, folder))
        members.append(_write_users(zf, user_ids))
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "project": slug,
            "created_at": timezone.now().isoformat(),
            "members": members,
        }
        zf.writestr(MANIFEST, json.dumps(manifest, indent=2))
    return manifest


def _username(user_id: int, names: dict[int, str]) -> str:
    if user_id not in names:
        names[user_id] = get_user_model().objects.get(pk=user_id).get_username()
    return names[user_id]


def _check_reference(
    label: str, pk: Any, f: models.Field, value: Any, written: dict[str, set[Any]]
) -> None:
    """A required reference to a table already written must point at one of its archived rows."""
    target = f.related_model._meta.label
    if f.null or target not in written or value in written[target]:
        return
    raise ArchiveError(
        f"{label} {pk} refers to {target} {value}, which belongs to another project; "
        "the archive would not restore on its own."
    )


def _write_files(zf: zipfile.ZipFile, label: str, pk: Any, folder: Path) -> list[dict[str, Any]]:
    """The files of a row's folder as ``files/<model>/<pk>/<name>`` members (their manifest
    entries). A folder that is gone is refused: the restored row would name files that exist
    nowhere."""
    if not folder.is_dir():
        raise ArchiveError(
            f"{label} {pk} names the folder {folder}, which is not on this machine: its files "
            "cannot be archived (make that export again, or restore the folder, then archive)."
        )
    entries = []
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        name = f"{FILES}/{label.lower()}/{pk}/{path.name}"
        digest, n, size = hashlib.sha256(), 0, 0
        with path.open("rb") as source, zf.open(name, "w", force_zip64=True) as handle:
            for line in source:
                handle.write(line)
                digest.update(line)
                n, size = n + 1, size + len(line)
        entries.append({"name": name, "model": FILES, "owner": label, "pk": pk, "rows": n,
                        "bytes": size, "sha256": digest.hexdigest()})  # fmt: skip
    return entries


def _write_users(zf: zipfile.ZipFile, user_ids: set[int]) -> dict[str, Any]:
    digest, n, size = hashlib.sha256(), 0, 0
    users = get_user_model().objects.filter(pk__in=user_ids).order_by("username")
    roles: dict[int, list[str]] = {}
    for user_id, role in users.filter(groups__name__in=ALL_ROLES).values_list("pk", "groups__name"):
        roles.setdefault(user_id, []).append(role)
    with zf.open(USERS, "w", force_zip64=True) as handle:
        for user_id, username, email, first, last in users.values_list(
            "pk", "username", "email", "first_name", "last_name"
        ).iterator(chunk_size=CHUNK):
            line = _dump({"username": username, "email": email, "first_name": first,
                          "last_name": last, "roles": sorted(roles.get(user_id, []))})  # fmt: skip
            handle.write(line)
            digest.update(line)
            n, size = n + 1, size + len(line)
    return {"name": USERS, "model": "users", "rows": n, "bytes": size,
            "sha256": digest.hexdigest()}  # fmt: skip


# --- Checking --------------------------------------------------------------------------------------------
def archive_open(path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except FileNotFoundError as exc:
        raise ArchiveError(f"No archive at {path}.") from exc
    except (zipfile.BadZipFile, OSError) as exc:
        raise ArchiveError(
            f"{Path(path).name} is not a complete Concord archive (truncated or not a zip file)."
        ) from exc


def archive_check(path: Path) -> dict[str, Any]:
    """Read the manifest and verify every member's row count, size and SHA-256 (streamed); returns
    the manifest. Raises ``ArchiveError`` naming the first member that does not match."""
    with archive_open(path) as zf:
        try:
            manifest = json.loads(zf.read(MANIFEST))
        except KeyError as exc:
            raise ArchiveError(
                "The archive has no manifest: not a Concord project archive."
            ) from exc
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise ArchiveError(f"The archive's manifest is damaged ({exc}).") from exc
        if manifest.get("format") != FORMAT:
            raise ArchiveError("The file is not a Concord project archive.")
        if manifest.get("version") != VERSION:
            raise ArchiveError(
                f"The archive is format version {manifest.get('version')}; this Concord reads "
                f"version {VERSION}."
            )
        tables = {t.model: t for t in archive_tables()}
        for member in manifest["members"]:
            if member["model"] not in {*tables, "users", FILES}:
                raise ArchiveError(f"The archive holds {member['model']}, unknown to this Concord.")
            if member["model"] == FILES:
                _check_file_member(member, tables)
            _check_member(zf, member)
    return manifest


def _check_file_member(member: dict[str, Any], tables: dict[str, Table]) -> None:
    """A carried file must belong to a table that carries files, under a plain file name (no
    folder, no leading dot: it is written into this instance's folders)."""
    owner = tables.get(member.get("owner", ""))
    base = member["name"].rsplit("/", 1)[-1]
    expected = f"{FILES}/{member.get('owner', '').lower()}/{member.get('pk')}/{base}"
    if (
        owner is None
        or owner.files is None
        or member["name"] != expected
        or not _SAFE_FILE_NAME.fullmatch(base)
    ):
        raise ArchiveError(f"The archive's file {member['name']!r} belongs to no archived row.")


def _check_member(zf: zipfile.ZipFile, member: dict[str, Any]) -> None:
    digest, n, size = hashlib.sha256(), 0, 0
    try:
        with zf.open(member["name"]) as handle:
            for line in handle:
                digest.update(line)
                n, size = n + 1, size + len(line)
    except KeyError as exc:
        raise ArchiveError(f"The archive lacks {member['name']}: it is incomplete.") from exc
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise ArchiveError(f"{member['name']} is damaged or cut short ({exc}).") from exc
    if (n, size, digest.hexdigest()) != (member["rows"], member["bytes"], member["sha256"]):
        raise ArchiveError(
            f"{member['name']} does not match the manifest ({n} rows, {size} bytes read; "
            f"{member['rows']} rows, {member['bytes']} bytes expected, or a changed checksum): "
            "the archive was altered or truncated. Nothing was restored."
        )


def archive_filename(slug: str) -> str:
    """The download name: ``SLUG-YYYYMMDD-HHMM.concord.zip`` (UTC)."""
    stamp = timezone.now().astimezone(dt.UTC).strftime("%Y%m%d-%H%M")
    return f"{slug}-{stamp}.concord.zip"


__all__ = [
    "ArchiveError",
    "ArchivePart",
    "FolderFiles",
    "Table",
    "archive_check",
    "archive_filename",
    "archive_open",
    "archive_part_register",
    "archive_parts",
    "archive_tables",
    "archive_write",
    "is_user_reference",
]
