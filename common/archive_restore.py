"""Restoring a project archive (written and checked by ``common.archive``): every member checked
against the manifest first, then all tables loaded in one transaction, keys kept when free and
remapped otherwise; carried files written under this instance's folders (removed again if the
restore fails); ids inside JSON payloads mapped; each part's ``after_restore`` called last.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.management.color import no_style
from django.db import IntegrityError, connection, models, transaction

from common.archive import (
    CHUNK,
    FILES,
    USERS,
    ArchiveError,
    Table,
    archive_check,
    archive_open,
    archive_parts,
    archive_tables,
    is_user_reference,
)
from common.roles import ALL_ROLES, role_assign


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
    with archive_open(path) as zf, _keep_times([m["model"] for m in order]):
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
                for part in archive_parts():
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
                if is_user_reference(f):
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
