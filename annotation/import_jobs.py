"""Uploaded imports: keep the file as received, import it on the default queue, report progress.

The upload is written to UPLOAD_DIR before anything else happens, so a failed import never loses what
the user sent. Progress lives in the shared cache (the import's write pass runs inside one database
transaction, whose own updates nobody else could see until the end).
"""

from __future__ import annotations

import uuid
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.cache import cache
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.utils import timezone

from annotation.importing import (
    ImportValidationError,
    compressed_file_message,
    compression_of,
)
from annotation.models import ImportJob, Project
from annotation.services import comparisons_import
from common.errors import ConcordError

ALLOWED_SUFFIXES = (".jsonl", ".json", ".ndjson", ".txt")
COMPRESSED_SUFFIXES = (".gz", ".zip", ".bz2", ".xz", ".zst", ".7z", ".tgz", ".tar")
PROGRESS_TTL_S = 24 * 3600


def _progress_key(job_id: int) -> str:
    return f"concord:import-job:{job_id}"


def import_job_create(
    *, project: Project, upload: UploadedFile, created_by: AbstractBaseUser | None
) -> ImportJob:
    """Store the uploaded JSONL file and queue its import; refuses oversized or non-JSONL files."""
    from annotation.import_tasks import import_job_run_task

    name = Path(upload.name or "upload.jsonl").name
    if name.lower().endswith(COMPRESSED_SUFFIXES):
        raise ConcordError(
            f"{name}: compressed files are not accepted; upload the uncompressed JSONL"
        )
    if not name.lower().endswith(ALLOWED_SUFFIXES):
        raise ConcordError(f"{name}: expected a JSONL file ({', '.join(ALLOWED_SUFFIXES)})")
    limit = settings.CONCORD_IMPORT_MAX_BYTES
    if upload.size is None or upload.size > limit:
        raise ConcordError(f"{name} is larger than the limit of {limit // (1024 * 1024)} MB")
    if upload.size == 0:
        raise ConcordError(f"{name} is empty")
    upload.seek(0)
    compression = compression_of(upload.read(8))
    upload.seek(0)
    if compression:  # refused unread: a small archive can unpack to gigabytes
        raise ConcordError(compressed_file_message(name, compression))
    folder = Path(settings.UPLOAD_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{uuid.uuid4().hex}.jsonl"
    with path.open("wb") as out:
        for chunk in upload.chunks():
            out.write(chunk)
    job = ImportJob.objects.create(
        project=project,
        created_by=created_by,
        path=str(path),
        original_name=name[:255],
        size_bytes=upload.size,
    )
    transaction.on_commit(lambda: import_job_run_task.delay(job.pk))
    return job


def import_job_run(*, job_id: int) -> ImportJob:
    """Run a queued import job to the end: done with counts, or failed with every error listed."""
    job = ImportJob.objects.select_related("project").get(pk=job_id)
    if job.status in (ImportJob.Status.DONE, ImportJob.Status.FAILED):
        return job  # a redelivered message: the job already ran
    ImportJob.objects.filter(pk=job.pk).update(status=ImportJob.Status.VALIDATING)

    def progress(phase: str, done: int, total: int | None) -> None:
        cache.set(
            _progress_key(job.pk),
            {"phase": phase, "rows_done": done, "rows_total": total},
            PROGRESS_TTL_S,
        )

    try:
        result = comparisons_import(project=job.project, lines=Path(job.path), progress=progress)
    except ImportValidationError as exc:
        job.status = ImportJob.Status.FAILED
        job.errors = [{"line": e.line, "field": e.field, "message": e.message} for e in exc.errors]
        job.result = {"error_count": exc.total}
    except (OSError, ValueError) as exc:
        job.status = ImportJob.Status.FAILED
        job.errors = [{"line": 0, "field": "", "message": str(exc)}]
    else:
        job.status = ImportJob.Status.DONE
        job.rows_total = job.rows_done = result.rows
        job.result = {**result.__dict__, "summary": result.summary()}
    job.finished_at = timezone.now()
    job.save()
    cache.delete(_progress_key(job.pk))
    return job


def import_job_progress(job: ImportJob) -> dict[str, object]:
    """The job's state for the progress bar: status, phase, rows done and total, errors."""
    live = cache.get(_progress_key(job.pk)) or {}
    return {
        "id": job.pk,
        "status": job.status,
        "file": job.original_name,
        "phase": live.get("phase", job.status),
        "rows_done": live.get("rows_done", job.rows_done),
        "rows_total": live.get("rows_total", job.rows_total),
        "errors": job.errors[:200],
        "error_count": job.result.get("error_count", len(job.errors)),
        "summary": job.result.get("summary", ""),
    }
