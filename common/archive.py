"""Project archives: one zip file holding a project's whole history, written and restored table by table.

Each app declares the tables it owns (``ArchivePart``, registered from its ``AppConfig.ready`` like the
job kinds of ``common.jobs``), so this module knows no app's models and no app imports upwards: the
annotation part writes projects, comparisons and judgements, training its runs, monitoring its rounds
and judges. The file is a zip of one JSON-lines member per table (rows in primary-key order, every
concrete field by its column name, user references as usernames) plus ``users.jsonl`` and a
``manifest.json`` with the format version, the member order, and per member its row count, SHA-256,
size in bytes and primary-key range. Restoring checks every member against the manifest before the
first row is written, then loads all tables in one transaction: primary keys are kept when the
archived range is free in this instance (so exports, which name comparison ids, hash the same) and
remapped otherwise; foreign keys and the JSON fields that list ids follow the map.

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
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.management.color import no_style
from django.db import IntegrityError, connection, models, transaction
from django.utils import timezone

from common.errors import ConcordError
from common.roles import ALL_ROLES, role_assign

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


def archive_tables() -> list[Table]:
    """Every registered table, parts by order, tables in their part's order."""
    return [t for p in sorted(_PARTS.values(), key=lambda p: p.order) for t in p.tables]


def _member(label: str) -> str:
    return f"{label.lower()}.jsonl"


def _user_fk(f: models.Field) -> bool:
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
                            if _user_fk(f):
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
def _open(path: Path) -> zipfile.ZipFile:
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
    with _open(path) as zf:
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


# --- Restoring -------------------------------------------------------------------------------------------
@contextmanager
def _keep_times(labels: list[str]) -> Iterator[None]:
    """Turn off auto_now / auto_now_add on the restored models so archived times are kept."""
    saved = []
    for label in labels:
        for f in apps.get_model(label)._meta.concrete_fields:
            if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
                saved.append((f, f.auto_now, f.auto_now_add))
                f.auto_now = f.auto_now_add = False
    try:
        yield
    finally:
        for f, now, now_add in saved:
            f.auto_now, f.auto_now_add = now, now_add


def _rows(zf: zipfile.ZipFile, name: str, digest: Any = None) -> Iterator[dict[str, Any]]:
    """The member's rows; ``digest`` (a hashlib object), when given, is fed every line read."""
    with zf.open(name) as handle:
        for line in handle:
            if digest is not None:
                digest.update(line)
            yield json.loads(line)


def _restore_users(zf: zipfile.ZipFile) -> dict[str, int]:
    """Username -> user id here; missing accounts are created inactive, with no usable password."""
    user_model = get_user_model()
    ids: dict[str, int] = {}
    for row in _rows(zf, USERS):
        roles = row.pop("roles", [])
        user = user_model.objects.filter(username=row["username"]).first()
        if user is None:
            user = user_model(**row, is_active=False)
            user.set_unusable_password()
            user.save()
            for role in roles:
                if role not in ALL_ROLES:
                    raise ArchiveError(
                        f"The archive gives {row['username']} an unknown role {role!r}."
                    )
                role_assign(user=user, role=role)
        ids[row["username"]] = user.pk
    return ids


def archive_restore(
    path: Path, *, options: dict[str, Any], manifest: dict[str, Any] | None = None
) -> dict[str, int]:
    """Check the archive (unless ``manifest``, what ``archive_check`` returned for it, is given),
    then load it in one transaction; returns rows restored per model label. ``options`` reach each
    table's ``prepare`` (the annotation part reads ``slug``)."""
    manifest = manifest if manifest is not None else archive_check(path)
    tables = {t.model: t for t in archive_tables()}
    order = [m for m in manifest["members"] if m["model"] not in ("users", FILES)]
    files = [m for m in manifest["members"] if m["model"] == FILES]
    counts: dict[str, int] = {}
    made: list[Path] = []  # folders this restore created: removed again if it fails
    with _open(path) as zf, _keep_times([m["model"] for m in order]):
        try:
            with transaction.atomic():
                id_of_user = _user_lookup(_restore_users(zf))
                maps: dict[str, dict[Any, Any]] = {}
                deferred: list[tuple[type[models.Model], Any, str, str, Any]] = []
                pending = {m["model"] for m in order}
                for member in order:
                    table = tables[member["model"]]
                    counts[table.model] = _restore_table(
                        zf, member, table, options, id_of_user, maps, deferred, pending
                    )
                    pending.discard(table.model)
                for model, pk, attname, target, old in deferred:
                    if old in maps.get(target, {}):
                        model.objects.filter(pk=pk).update(**{attname: maps[target][old]})
                for table in tables.values():
                    if table.json_ids and table.model in maps:
                        _remap_json_ids(table, maps)
                _restore_files(zf, files, tables, maps, options, made)
                for part in sorted(_PARTS.values(), key=lambda p: p.order):
                    if part.after_restore is not None:
                        part.after_restore(maps, options)
        except IntegrityError as exc:
            _remove(made)
            raise _clash(exc) from exc
        except BaseException:
            _remove(made)
            raise
    return counts


def _remove(folders: list[Path]) -> None:
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def _clash(exc: IntegrityError) -> ArchiveError:
    detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return ArchiveError(
        "The archive clashes with data already in this instance (an export with the same "
        "hash, or a judge's account already bound to another judge: this happens when the "
        f"project is restored beside itself). Nothing was restored. Database: {detail}"
    )


def _user_lookup(user_ids: dict[str, int]) -> Callable[[str], int]:
    """Rows name users by username (see ``archive_write``): map it to the local id."""

    def lookup(username: str) -> int:
        if username not in user_ids:
            raise ArchiveError(f"The archive names user {username!r} but does not list them.")
        return user_ids[username]

    return lookup


def _restore_table(
    zf: zipfile.ZipFile,
    member: dict[str, Any],
    table: Table,
    options: dict[str, Any],
    user_id: Callable[[str], int],
    maps: dict[str, dict[Any, Any]],
    deferred: list[tuple[type[models.Model], Any, str, str, Any]],
    pending: set[str],
) -> int:
    model = apps.get_model(table.model)
    meta = model._meta
    pk_name = meta.pk.attname
    keep = (
        member["min_pk"] is None
        or not model.objects.filter(pk__gte=member["min_pk"], pk__lte=member["max_pk"]).exists()
    )
    mapping = maps.setdefault(table.model, {})
    fields = meta.concrete_fields
    batch: list[tuple[Any, models.Model, list[tuple[str, str, Any]]]] = []

    def flush() -> None:
        made = model.objects.bulk_create([obj for _, obj, _ in batch])
        for (old, _, later), obj in zip(batch, made, strict=True):
            mapping[old] = obj.pk
            deferred.extend((model, obj.pk, a, t, o) for a, t, o in later)
        batch.clear()

    digest = hashlib.sha256()
    for row in _rows(zf, member["name"], digest):
        old_pk = row[pk_name]
        if table.prepare is not None:
            table.prepare(row, options)
        values: dict[str, Any] = {}
        later: list[tuple[str, str, Any]] = []
        for f in fields:
            if f.attname not in row:
                continue
            value = row[f.attname]
            if f.primary_key:
                if keep:
                    values[f.attname] = value
                continue
            if f.is_relation and value is not None:
                if _user_fk(f):
                    value = user_id(value)
                else:
                    target = f.related_model._meta.label
                    if value in maps.get(target, {}):
                        value = maps[target][value]
                    elif f.null:
                        if target in pending:  # a later table or a later row of this one
                            later.append((f.attname, target, value))
                        value = None
                    else:
                        raise ArchiveError(
                            f"{table.model} {old_pk} refers to {target} {value}, which the archive "
                            "does not hold."
                        )
            elif value is not None and any(
                path.split(".")[0] == f.attname for path in table.id_lists
            ):
                value = _remap_id_lists(value, f.attname, table.id_lists, maps)
            else:
                value = f.to_python(value) if value is not None else None
            values[f.attname] = value
        batch.append((old_pk, model(**values), later))
        if len(batch) >= CHUNK:
            flush()
    if batch:
        flush()
    if digest.hexdigest() != member["sha256"]:  # the file changed since it was checked
        raise ArchiveError(f"{member['name']} changed while it was restored. Nothing was restored.")
    if keep and mapping:
        _reset_sequence(model)
    return len(mapping)


def _remap_json_ids(table: Table, maps: dict[str, dict[Any, Any]]) -> None:
    """Map the ids under ``table.json_ids``' keys, anywhere in the restored rows' JSON fields."""
    model = apps.get_model(table.model)
    new_pks = list(maps[table.model].values())
    for attname, keys in table.json_ids.items():
        for pk, value in model.objects.filter(pk__in=new_pks).values_list("pk", attname):
            remapped = _remap_nested(value, keys, maps)
            if remapped != value:
                model.objects.filter(pk=pk).update(**{attname: remapped})


def _remap_nested(value: Any, keys: dict[str, str], maps: dict[str, dict[Any, Any]]) -> Any:
    """``value`` with every id (or list of ids) under one of ``keys`` mapped; ids the archive did
    not hold are left as they were."""
    if isinstance(value, list):
        return [_remap_nested(item, keys, maps) for item in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        target = maps.get(keys.get(key, ""), {})
        if key in keys and isinstance(item, int) and not isinstance(item, bool):
            out[key] = target.get(item, item)
        elif key in keys and isinstance(item, list):
            out[key] = [target.get(i, i) if isinstance(i, int) else i for i in item]
        else:
            out[key] = _remap_nested(item, keys, maps)
    return out


def _restore_files(
    zf: zipfile.ZipFile,
    files: list[dict[str, Any]],
    tables: dict[str, Table],
    maps: dict[str, dict[Any, Any]],
    options: dict[str, Any],
    made: list[Path],
) -> None:
    """Write the carried files into this instance's folders and point their rows at them; every
    restored row of a table with files must have had its files in the archive."""
    by_row: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for member in files:
        by_row.setdefault((member["owner"], member["pk"]), []).append(member)
    for table in tables.values():
        if table.files is None:
            continue
        lacking = set(maps.get(table.model, {})) - {
            pk for owner, pk in by_row if owner == table.model
        }
        if lacking:
            raise ArchiveError(
                f"The archive lacks the files of {table.model} {sorted(lacking)[0]}. Nothing was "
                "restored."
            )
    for (owner, old_pk), members in by_row.items():
        table = tables[owner]
        assert table.files is not None  # archive_check refused files of other tables
        if old_pk not in maps.get(owner, {}):
            raise ArchiveError(
                f"The archive's files name {owner} {old_pk}, which it does not hold."
            )
        model = apps.get_model(owner)
        row = model.objects.get(pk=maps[owner][old_pk])
        folder = Path(table.files.destination(row, options))
        if not folder.exists():
            folder.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".restore-"))
            made.append(staging)
            for member in members:
                with zf.open(member["name"]) as source:
                    target = staging / member["name"].rsplit("/", 1)[-1]
                    with target.open("wb") as handle:
                        shutil.copyfileobj(source, handle)
            staging.rename(folder)
            made[-1] = folder
        if table.files.check is not None:
            table.files.check(row, folder)
        model.objects.filter(pk=row.pk).update(**{table.files.field: str(folder)})


def _remap_id_lists(
    value: Any, attname: str, id_lists: dict[str, str], maps: dict[str, dict[Any, Any]]
) -> Any:
    """Map the id lists of JSON field ``attname``: ``id_lists`` keys are the field's name (the
    value is the list) or ``field.key`` (the list under that key of a JSON object)."""
    for path, target in id_lists.items():
        head, _, key = path.partition(".")
        if head != attname:
            continue
        target_map = maps.get(target, {})
        if not key:
            value = [target_map.get(v, v) for v in value]
        elif isinstance(value, dict) and isinstance(value.get(key), list):
            value = {**value, key: [target_map.get(v, v) for v in value[key]]}
    return value


def _reset_sequence(model: type[models.Model]) -> None:
    """After inserting explicit keys, move the key sequence past them (PostgreSQL)."""
    statements = connection.ops.sequence_reset_sql(no_style(), [model])
    with connection.cursor() as cursor:
        for sql in statements:
            cursor.execute(sql)


def archive_filename(slug: str) -> str:
    """The download name: ``SLUG-YYYYMMDD-HHMM.concord.zip`` (UTC)."""
    stamp = timezone.now().astimezone(dt.UTC).strftime("%Y%m%d-%H%M")
    return f"{slug}-{stamp}.concord.zip"


__all__ = [
    "ArchiveError",
    "ArchivePart",
    "Table",
    "archive_check",
    "archive_filename",
    "archive_part_register",
    "archive_restore",
    "archive_tables",
    "archive_write",
]
