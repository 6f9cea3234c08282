"""Backing a project up and moving it: write its archive, restore one (all or nothing).

The format and the table-by-table work are ``common.archive``'s; each app registers its own tables,
so an archive written here holds the training runs and eval rounds too, without this app importing
them. Restoring refuses a slug that exists (``slug`` picks another) and checks the whole file first.
"""

import io
from pathlib import Path
from typing import Any

from django.db import connection, transaction

from annotation.models import Project
from common.archive import ArchiveError, archive_check, archive_write
from common.archive_restore import archive_restore


def project_archive_write(*, project: Project, out: Path | io.IOBase) -> dict[str, Any]:
    """Write ``project``'s archive to ``out``; returns the manifest (member names, rows, SHA-256).
    A rating or ranking project's archive holds its items, answers and leases (a restore releases
    the leases that were active: ``annotation.archive``)."""
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost and connection.vendor == "postgresql":
            # One snapshot for every table: a judgement made while the archive is written is
            # either in it with its comparison, or not at all.
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        return archive_write(project, out, slug=project.slug)


def project_archive_restore(
    *, path: Path, slug: str | None = None
) -> tuple[Project, dict[str, int]]:
    """Load the archive at ``path`` as project ``slug`` (default: the archived slug). Returns the
    project and the rows restored per model. Raises ``ArchiveError`` (nothing written) when the file
    is truncated or altered, or the slug is taken."""
    manifest = archive_check(path)
    slug = slug or manifest["project"]
    if Project.objects.filter(slug=slug).exists():
        raise ArchiveError(
            f"A project with the slug {slug!r} already exists here; restore it under another "
            "slug (--as NEW_SLUG)."
        )
    counts = archive_restore(path, options={"slug": slug}, manifest=manifest)
    return Project.objects.get(slug=slug), counts
