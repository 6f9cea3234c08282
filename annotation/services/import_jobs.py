"""Uploaded imports: keep the file as received, import it on the default queue, report progress.

The upload (any format and container annotation.formats reads: JSONL, a JSON array, Parquet, gzip or
zstd) is written to UPLOAD_DIR before anything else happens, so a failed import never loses what the
user sent; the rejects file of ``skip_invalid`` lies beside it. Progress lives in the shared cache
(the import's write pass runs inside one database transaction, whose own updates nobody else could
see until the end).

The job follows the one job lifecycle (``common.lifecycle``): the task claims it (queued ->
running, one conditional update), so a redelivered message finds it taken and imports nothing
twice; a heartbeat thread keeps it alive while it works, and the reaper fails it if the worker dies.
``import_job_cancel`` cancels a queued job at once; a running one is asked to stop (the job's
``cancel_requested``, and a mark in the shared cache that its progress reports read, whichever
thread reports), stops at its next report and rolls back: nothing of the file is imported.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.cache import cache
from django.core.files.uploadedfile import UploadedFile

from annotation import formats
from annotation.formats.containers import compression_of
from annotation.models import ImportJob, Project, TaskType
from annotation.parsing import ImportValidationError
from annotation.services.import_result import ProgressMeter
from annotation.services.importing import ImportOptions, comparisons_import
from common.errors import ConcordError
from common.jobs import task_send
from common.lifecycle import (
    CANCELLED,
    FAILED,
    SUCCEEDED,
    JobHeartbeat,
    job_cancel,
    job_claim,
    job_finish,
    job_state,
)

ALLOWED_SUFFIXES = (
    ".jsonl",
    ".json",
    ".ndjson",
    ".txt",
    ".parquet",
    ".jsonl.gz",
    ".json.gz",
    ".jsonl.zst",
    ".json.zst",
)
REFUSED_SUFFIXES = (".zip", ".bz2", ".xz", ".7z", ".tgz", ".tar")
PROGRESS_TTL_S = 24 * 3600
SCALARS_AS_TEXT_API = '"scalars_as_text": true'  # how an API upload's row error names the switch


def _progress_key(job_id: int) -> str:
    return f"concord:import-job:{job_id}"


def _stop_key(job_id: int) -> str:
    return f"concord:import-job:{job_id}:stop"


class ImportCancelled(Exception):
    """Raised by a running import's progress report when the job was asked to stop; the import's
    transaction rolls back as it leaves."""


def import_job_cancel(*, job: ImportJob) -> str:
    """Cancel ``job``: a queued one is cancelled at once ("cancelled"); a running one is asked to
    stop ("requested") and does at its next progress report, importing nothing. A finished job
    raises JobStateError (a ConcordError naming its state) and nothing changes."""
    outcome = job_cancel(model=ImportJob, pk=job.pk)
    if outcome == "requested":
        cache.set(_stop_key(job.pk), "1", PROGRESS_TTL_S)
    return outcome


def import_job_create(
    *,
    project: Project,
    upload: UploadedFile,
    created_by: AbstractBaseUser | None,
    format: str = "auto",
    skip_invalid: bool = False,
    scalars_as_text: bool = False,
    scalars_as_text_name: str = SCALARS_AS_TEXT_API,
) -> ImportJob:
    """Store the uploaded file and queue its import; refuses oversized files, archives, and a
    rating or ranking project (its items come in through ``import_items``).

    ``format``: "auto" or a name of annotation.formats.READERS; ``skip_invalid``: import the good
    rows and list the bad ones beside the upload; ``scalars_as_text``: see formats.ReadOptions;
    ``scalars_as_text_name``: how a row error names that switch where the upload came from (the API's
    field by default; the upload page passes its checkbox).
    """
    name = Path(upload.name or "upload.jsonl").name
    if project.task_type != TaskType.PAIRWISE:
        raise ConcordError(
            f"{project.slug} is a {project.task_type} project: uploads import pairwise "
            f"comparisons. Import its items with python manage.py import_items PATH --project "
            f"{project.slug} --format FORMAT"
        )
    if format not in formats.FORMAT_NAMES:
        raise ConcordError(f"unknown format {format!r}; expected one of {formats.FORMAT_NAMES}")
    if name.lower().endswith(REFUSED_SUFFIXES):
        raise ConcordError(
            f"{name}: archives are not accepted; upload JSONL, a JSON array, Parquet, or gzip- or "
            "zstd-compressed JSONL"
        )
    if not name.lower().endswith(ALLOWED_SUFFIXES):
        raise ConcordError(
            f"{name}: expected a JSONL file, a JSON array, Parquet, or gzip- or zstd-compressed "
            f"JSONL ({', '.join(ALLOWED_SUFFIXES)})"
        )
    limit = settings.CONCORD_IMPORT_MAX_BYTES
    if upload.size is None or upload.size > limit:
        raise ConcordError(f"{name} is larger than the limit of {limit // (1024 * 1024)} MB")
    if upload.size == 0:
        raise ConcordError(f"{name} is empty")
    upload.seek(0)
    compression = compression_of(upload.read(8))
    upload.seek(0)
    if compression not in (None, "gzip", "zstd"):  # refused unread
        raise ConcordError(
            f"{name} is a {compression} archive; upload JSONL, a JSON array, Parquet, or gzip- or "
            "zstd-compressed JSONL"
        )
    folder = Path(settings.UPLOAD_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    # The stored name keeps no suffix of the user's: the container is read from the bytes.
    path = folder / f"{uuid.uuid4().hex}.upload"
    with path.open("wb") as out:
        for chunk in upload.chunks():
            out.write(chunk)
    job = ImportJob.objects.create(
        project=project,
        created_by=created_by,
        path=str(path),
        original_name=name[:255],
        size_bytes=upload.size,
        result={
            "options": {
                "format": format,
                "skip_invalid": skip_invalid,
                "scalars_as_text": scalars_as_text,
                "scalars_as_text_name": scalars_as_text_name,
            }
        },
    )
    task_send("annotation.tasks.import_job_run_task", args=[job.pk])
    return job


def import_job_run(*, job_id: int, worker: str | None = None) -> ImportJob:
    """Run a queued import job to the end: succeeded with counts, failed with every error
    listed, or cancelled (rolled back) when asked to stop while it ran. A job that is not queued
    (a redelivered message: it is running elsewhere, or ran) is returned untouched and nothing
    is imported."""
    if not job_claim(model=ImportJob, pk=job_id, worker=worker):
        return ImportJob.objects.get(pk=job_id)
    job = ImportJob.objects.select_related("project").get(pk=job_id)

    meter = ProgressMeter()

    def progress(phase: str, done: int, total: int | None) -> None:
        if cache.get(_stop_key(job.pk)) is not None:
            raise ImportCancelled(f"import job #{job.pk} stopped while {phase}")
        cache.set(_progress_key(job.pk), meter.figures(phase, done, total), PROGRESS_TTL_S)

    chosen = job.result.get("options", {})
    options = ImportOptions(
        format=chosen.get("format", "auto"),
        skip_invalid=chosen.get("skip_invalid", False),
        read=formats.ReadOptions(
            scalars_as_text=chosen.get("scalars_as_text", False),
            scalars_as_text_name=chosen.get("scalars_as_text_name", SCALARS_AS_TEXT_API),
        ),
    )
    outcome: dict[str, object]
    try:
        with JobHeartbeat(model=ImportJob, pk=job.pk):
            result = comparisons_import(
                project=job.project, lines=Path(job.path), progress=progress, options=options
            )
    except ImportCancelled:  # rolled back: nothing of the file was imported
        outcome, state = {"result": {"options": chosen}}, CANCELLED
    except ImportValidationError as exc:
        errors = [
            {"line": e.line, "unit": e.unit, "field": e.field, "message": e.message}
            for e in exc.errors
        ]
        outcome = {"errors": errors, "result": {"error_count": exc.total, "options": chosen}}
        state = FAILED
    except (OSError, ValueError) as exc:
        errors = [{"line": 0, "unit": "", "field": "", "message": str(exc)}]
        outcome = {"errors": errors, "result": {"options": chosen}}
        state = FAILED
    except (
        Exception
    ) as exc:  # a bug, not the file: fail the job now (not at the reaper), then raise
        job_finish(model=ImportJob, pk=job.pk, state=FAILED, error=f"{type(exc).__name__}: {exc}")
        cache.delete_many([_progress_key(job.pk), _stop_key(job.pk)])
        raise
    else:
        outcome = {
            "rows_total": result.rows,
            "rows_done": result.rows,
            "result": {**result.__dict__, "summary": result.summary(), "options": chosen},
        }
        state = SUCCEEDED
    job_finish(model=ImportJob, pk=job.pk, state=state, updates=outcome)
    cache.delete_many([_progress_key(job.pk), _stop_key(job.pk)])
    job.refresh_from_db()
    return job


def import_job_progress(job: ImportJob) -> dict[str, object]:
    """The job's state for the progress bar: status, phase, rows done and total (about, while
    validating: the file's lines), the phase's rate (rows per second) and time left in seconds
    (None until measured), errors, whether it was asked to stop."""
    live = cache.get(_progress_key(job.pk)) or {}
    return {
        "id": job.pk,
        "status": job.status,
        "status_label": job_state(job)[1],
        "cancel_requested": job.cancel_requested,
        "file": job.original_name,
        "phase": live.get("phase", job.status),
        "rows_done": live.get("rows_done", job.rows_done),
        "rows_total": live.get("rows_total", job.rows_total),
        "rows_per_s": live.get("rows_per_s"),
        "eta_s": live.get("eta_s"),
        "errors": job.errors[:200],
        "error_count": job.result.get("error_count", len(job.errors)),
        "summary": job.result.get("summary", ""),
        "format": job.result.get("format", job.result.get("options", {}).get("format", "auto")),
        "rows_rejected": job.result.get("rows_rejected", 0),
    }
