"""A rating or ranking project's training set as a hashed export, which training runs launch on.

``item_dataset_export`` writes one of the project's training row formats
(annotation.services.task_export) into the same hashed folder layout as a pairwise export
(``EXPORT_DIR/<slug>/<sha256>/``, annotation.services.exporting), three files:

- the data file, ``<format>.jsonl``: ``listwise.jsonl`` or ``pairs.jsonl`` (ranking),
  ``kto.jsonl`` or ``aspects.jsonl`` (rating), rows exactly as ``export_items`` writes them;
- ``items.jsonl``: every item with every answer (the ``items`` format, ``import_items``
  reads it back), the raw record beside the rows as ``judgements.jsonl`` is for pairs;
- ``manifest.json``: project, hash, options and counts.

The export's ``options``: ``format`` (the row format), ``rows`` (the kind of rows a run reads,
``training.recipes.kinds.ROW_KINDS``: pairs, listwise, kto or regression) and ``data_file``
(what the run's ``data`` names). Its ``sha256`` covers the data file's name, the data file and the
items file (``exporting.item_files_sha256``): an export with the same content as an earlier one
is that earlier one (same hash, same row). ``n_pairs`` counts the data file's rows and
``n_judgements`` the answers counted (each annotator's first answer per item).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser

from annotation.models import DatasetExport, Project, TaskAnswer
from annotation.services.exporting import (
    ITEMS_FILE,
    export_folder_publish,
    export_row_create,
    item_files_sha256,
)
from annotation.services.task_export import ROW_FORMATS, TaskExportError, task_export_write

# An item export's row format -> the kind of rows a training run reads from it (ROW_KINDS).
SNAPSHOT_ROWS = {"listwise": "listwise", "pairs": "pairs", "kto": "kto", "aspects": "regression"}


def item_snapshot_formats(project: Project) -> tuple[str, ...]:
    """The row formats ``project`` can freeze for training (its export formats but ``items``)."""
    return tuple(f for f in ROW_FORMATS.get(project.task_type, ()) if f in SNAPSHOT_ROWS)


def item_dataset_export(
    *, project: Project, row_format: str, created_by: AbstractBaseUser | None = None
) -> DatasetExport:
    """Freeze ``project``'s rows in ``row_format`` (one of ``item_snapshot_formats``) into a
    hashed export (or return the identical one). TaskExportError naming the formats otherwise
    (a pairwise project: naming ``dataset_export``'s page and command); nothing is written."""
    allowed = item_snapshot_formats(project)
    if not allowed:
        raise TaskExportError(
            f"{project.slug} is a pairwise project: export it with python manage.py "
            f"export_dataset --project {project.slug} (or its Manage page)"
        )
    if row_format not in allowed:
        raise TaskExportError(
            f"a {project.task_type} project's training export is {' or '.join(allowed)}, "
            f"not {row_format!r}"
        )
    data_file = f"{row_format}.jsonl"
    options = {"format": row_format, "rows": SNAPSHOT_ROWS[row_format], "data_file": data_file}
    root = Path(settings.EXPORT_DIR) / project.slug
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".export-") as scratch:
        staging = Path(scratch)
        n_rows = task_export_write(project=project, row_format=row_format, out=staging / data_file)
        n_items = task_export_write(project=project, row_format="items", out=staging / ITEMS_FILE)
        n_answers = TaskAnswer.objects.filter(item__project=project, repeat=False).count()
        sha = item_files_sha256(staging, data_file)
        existing = DatasetExport.objects.filter(sha256=sha).first()
        if existing is not None:
            return existing
        manifest = {
            "project": project.slug,
            "task_type": project.task_type,
            "sha256": sha,
            "options": options,
            "rows": n_rows,
            "items": n_items,
            "answers": n_answers,
        }
        folder = export_folder_publish(staging, root / sha, manifest)
    return export_row_create(
        project=project,
        created_by=created_by,
        sha256=sha,
        folder=str(folder),
        options=options,
        n_pairs=n_rows,
        n_judgements=n_answers,
    )
