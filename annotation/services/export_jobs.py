"""Exports made on the worker: queue an export job, run it with progress, build the Hugging Face zip.

A million-comparison project takes about 45 s to export and 15 s more to zip as a Hugging Face
dataset: longer than a web request may take. The Manage page and the API (``?async=1``) queue an
``ExportJob`` instead; the task (``annotation.tasks.export_job_run_task``, default queue) runs
``dataset_export`` (or ``item_dataset_export`` for a rating or ranking project), then, when asked,
``hf_export_archive``, and the job's page polls its progress.

The options are checked when the job is queued (``ExportJobError`` naming the option; no job is
created), so a job fails only for what the data or the disk says while it runs. The same options
queued again while a job with them is queued or running give that job (a second click makes no
second export).

The Hugging Face zip of an export is built by a job too: the job that makes the export when its
``build_hf`` is set (the form's checkbox, the API's ``hf``), or, the first time someone asks to
download the zip of an export that has none, a job queued with that export that only builds it
(``export_job_hf_build``). The zip is kept beside the export's files, so either way it is built
once, and the download itself only ever serves a file.

The job follows the one job lifecycle (``common.lifecycle``): the task claims it (queued ->
running, one conditional update), so a redelivered message finds it taken and exports nothing
twice; a heartbeat thread keeps it alive while it works, and the reaper fails it if the worker
dies. Progress is written on the job's row (the export runs outside any long transaction, so the
page sees it at once), at most once every ``PROGRESS_EVERY_S`` seconds and at each phase's end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.contrib.auth.models import AbstractBaseUser

from annotation.models import DatasetExport, ExportJob, Project, TaskType
from annotation.services.exporting import CONSENSUS_RULES, FALLBACK_RULES, dataset_export
from annotation.services.hf_export import hf_export_archive, hf_export_archive_path
from annotation.services.import_result import ProgressMeter, duration_text
from annotation.services.item_exports import item_dataset_export, item_snapshot_formats
from common.errors import ConcordError
from common.jobs import task_send
from common.lifecycle import (
    ACTIVE,
    CANCELLED,
    FAILED,
    RUNNING,
    SUCCEEDED,
    JobHeartbeat,
    job_cancel,
    job_claim,
    job_finish,
    job_state,
)

PROGRESS_EVERY_S = 1.0  # the most often a running job's progress is written (seconds)
PHASE_EXPORTING = "exporting"
PHASE_HF = "building the Hugging Face zip"
# What a phase's rows count, in the progress line.
PHASE_ROWS = {PHASE_EXPORTING: "judged comparisons", PHASE_HF: "pairs"}
MAX_MIN_JUDGEMENTS = 1000


class ExportJobError(ConcordError):
    """An export that cannot be queued as asked (the message names the option); nothing was
    created."""


class ExportCancelled(Exception):
    """Raised by a running job's progress write when the job was asked to stop; the export's
    scratch folder (or the zip's) is removed as the exception leaves it."""


def _pairwise_options(
    *, consensus: str, keep_ties: bool, min_judgements: int, fallback: str
) -> dict[str, object]:
    if consensus not in CONSENSUS_RULES:
        raise ExportJobError(
            f"unknown consensus rule {consensus!r}; expected one of {', '.join(CONSENSUS_RULES)}"
        )
    if fallback not in FALLBACK_RULES:
        raise ExportJobError(
            f"unknown fallback rule {fallback!r}; expected one of {', '.join(FALLBACK_RULES)}"
        )
    if not isinstance(min_judgements, int) or not 1 <= min_judgements <= MAX_MIN_JUDGEMENTS:
        raise ExportJobError(
            f"min_judgements must be a whole number from 1 to {MAX_MIN_JUDGEMENTS}, "
            f"not {min_judgements!r}"
        )
    options: dict[str, object] = {
        "consensus": consensus,
        "keep_ties": bool(keep_ties),
        "min_judgements": min_judgements,
    }
    if consensus == "adjudicated":
        options["fallback"] = fallback
    return options


def export_job_options(
    *,
    project: Project,
    consensus: str = "majority",
    keep_ties: bool = False,
    min_judgements: int = 1,
    fallback: str = "majority",
    row_format: str | None = None,
    build_hf: bool = False,
) -> dict[str, object]:
    """The options an export job of ``project`` stores, checked: a pairwise project's consensus
    rule (CONSENSUS_RULES), ``fallback`` (FALLBACK_RULES, kept with "adjudicated"),
    ``keep_ties`` and ``min_judgements`` (1 to MAX_MIN_JUDGEMENTS); a rating or ranking
    project's ``row_format`` (one of ``item_snapshot_formats``), which a pairwise project
    refuses, as a rating or ranking project refuses ``build_hf``. ExportJobError naming the
    option otherwise."""
    if project.task_type == TaskType.PAIRWISE:
        if row_format:
            raise ExportJobError(
                "format is only for a rating or ranking project's export; a pairwise project's "
                "export takes consensus, keep_ties and min_judgements"
            )
        return _pairwise_options(
            consensus=consensus, keep_ties=keep_ties, min_judgements=min_judgements,
            fallback=fallback,
        )  # fmt: skip
    allowed = item_snapshot_formats(project)
    if row_format not in allowed:
        raise ExportJobError(
            f"a {project.task_type} project's training export is {' or '.join(allowed)}"
            + (f", not {row_format!r}" if row_format else " (choose one)")
        )
    if build_hf:
        raise ExportJobError(
            "the Hugging Face dataset is a pairwise project's export; a "
            f"{project.task_type} project's export is its {row_format} rows"
        )
    return {"format": row_format}


def _active_job(**match: object) -> ExportJob | None:
    return ExportJob.objects.filter(status__in=ACTIVE, **match).order_by("pk").first()


def export_job_create(
    *,
    project: Project,
    created_by: AbstractBaseUser | None,
    consensus: str = "majority",
    keep_ties: bool = False,
    min_judgements: int = 1,
    fallback: str = "majority",
    row_format: str | None = None,
    build_hf: bool = False,
) -> ExportJob:
    """Queue an export of ``project`` on the default queue (options as ``export_job_options``;
    ``build_hf``: also build its Hugging Face zip). ExportJobError for a bad option, before
    anything is written. A queued or running job of the project with the same options is
    returned instead of a second one."""
    options = export_job_options(
        project=project, consensus=consensus, keep_ties=keep_ties,
        min_judgements=min_judgements, fallback=fallback, row_format=row_format,
        build_hf=build_hf,
    )  # fmt: skip
    same = _active_job(project=project, options=options, build_hf=build_hf, export__isnull=True)
    if same is not None:
        return same
    job = ExportJob.objects.create(
        project=project, created_by=created_by, options=options, build_hf=build_hf
    )
    task_send("annotation.tasks.export_job_run_task", args=[job.pk])
    return job


def hf_archive_ready(export: DatasetExport) -> bool:
    """Whether ``export``'s Hugging Face zip is built (``hf_export_archive``)."""
    return hf_export_archive_path(export).is_file()


def export_job_hf_build(*, export: DatasetExport, created_by: AbstractBaseUser | None) -> ExportJob:
    """Queue the building of ``export``'s Hugging Face zip (a pairwise export's; ExportJobError
    for a rating or ranking one). A queued or running job that will build it is returned instead
    of a second one; so is a finished job that built it, when the zip is there."""
    if "data_file" in export.options:
        raise ExportJobError(
            "the Hugging Face dataset is a pairwise project's export; this export holds "
            f"{export.options.get('format', 'item')} rows"
        )
    same = _active_job(export=export, build_hf=True)
    if same is not None:
        return same
    if hf_archive_ready(export):
        built = ExportJob.objects.filter(export=export, build_hf=True, status=SUCCEEDED).first()
        if built is not None:
            return built
    job = ExportJob.objects.create(
        project=export.project, created_by=created_by, options=dict(export.options),
        build_hf=True, export=export,
    )  # fmt: skip
    task_send("annotation.tasks.export_job_run_task", args=[job.pk])
    return job


@dataclass
class ExportProgress:
    """Writes a running export job's phase, counts, rate and time left on its row: at the first
    report of each phase, at its end (done == total), and otherwise at most once every
    ``every_s`` seconds (``clock``: seconds, monotonic). ``writes`` counts the writes made.
    ``of(phase)`` is the ``progress(done, total)`` callable the export functions take."""

    job_id: int
    every_s: float = PROGRESS_EVERY_S
    clock: Callable[[], float] = time.monotonic
    writes: int = 0
    _meter: ProgressMeter = field(init=False)
    _phase: str = field(default="", init=False)
    _last: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self._meter = ProgressMeter(clock=self.clock)

    def report(self, phase: str, done: int, total: int | None) -> bool:
        """Record ``done`` of ``total`` rows in ``phase``, if due; True when written.
        ExportCancelled when the job was asked to stop (the write finds its flag set)."""
        now = self.clock()
        finished = total is not None and done >= total
        if phase == self._phase and not finished and now - self._last < self.every_s:
            return False
        figures = self._meter.figures(phase, done, total)
        written = ExportJob.objects.filter(
            pk=self.job_id, status=RUNNING, cancel_requested=False
        ).update(
            phase=phase,
            rows_done=done,
            rows_total=total,
            rows_per_s=figures["rows_per_s"],
            eta_s=figures["eta_s"],
        )
        if not written:  # asked to stop (or no longer its worker's): stop here
            raise ExportCancelled(f"export job #{self.job_id} stopped in {phase}")
        self._phase, self._last = phase, now
        self.writes += 1
        return True

    def of(self, phase: str) -> Callable[[int, int], None]:
        def progress(done: int, total: int) -> None:
            self.report(phase, done, total)

        return progress


def _export_make(job: ExportJob, progress: ExportProgress) -> DatasetExport:
    """The export ``job`` asks for (a pairwise or an item export), made now."""
    options = dict(job.options)
    progress.report(PHASE_EXPORTING, 0, None)
    if "format" in options:
        export = item_dataset_export(
            project=job.project, row_format=options["format"], created_by=job.created_by
        )
        progress.report(PHASE_EXPORTING, export.n_pairs, export.n_pairs)
        return export
    return dataset_export(
        project=job.project,
        keep_ties=bool(options.get("keep_ties", False)),
        min_judgements=int(options.get("min_judgements", 1)),
        consensus=str(options.get("consensus", "majority")),
        fallback=str(options.get("fallback", "majority")),
        created_by=job.created_by,
        progress=progress.of(PHASE_EXPORTING),
    )


def export_job_run(*, job_id: int, worker: str | None = None) -> ExportJob:
    """Run a queued export job to the end: succeeded with its export (and zip, when asked),
    failed with the error, or cancelled when asked to stop while it ran (``export_job_cancel``:
    nothing half-written is kept; an export finished before the zip was begun stays, with the
    job). A job that is not queued (a redelivered message: it is running
    elsewhere, or ran) is returned untouched and nothing is exported."""
    if not job_claim(model=ExportJob, pk=job_id, worker=worker):
        return ExportJob.objects.get(pk=job_id)
    job = ExportJob.objects.select_related("project", "export", "created_by").get(pk=job_id)
    progress = ExportProgress(job_id=job.pk)
    export = job.export
    try:
        with JobHeartbeat(model=ExportJob, pk=job.pk):
            if export is None:
                export = _export_make(job, progress)
            if job.build_hf:
                hf_export_archive(export=export, progress=progress.of(PHASE_HF))
    except ExportCancelled:  # the scratch files are gone; an export already made is kept
        state, error = CANCELLED, ""
    except (ConcordError, ValueError, OSError) as exc:  # the data or the disk (named in exc)
        state, error = FAILED, str(exc) or type(exc).__name__
    except Exception as exc:
        # A bug, not the data: fail the job now (not at the reaper), then raise.
        job_finish(
            model=ExportJob, pk=job.pk, state=FAILED, error=f"{type(exc).__name__}: {exc}",
            updates={"export": export, "eta_s": None},
        )  # fmt: skip
        raise
    else:
        state, error = SUCCEEDED, ""
    job_finish(
        model=ExportJob, pk=job.pk, state=state, error=error,
        updates={"export": export, "eta_s": None},
    )  # fmt: skip
    job.refresh_from_db()
    return job


def export_job_cancel(*, job: ExportJob) -> str:
    """Cancel ``job``: a queued one is cancelled at once ("cancelled"); a running one is asked to
    stop and does at its next progress write, within about a second ("requested"). A finished
    job raises JobStateError (a ConcordError naming its state) and nothing changes."""
    return job_cancel(model=ExportJob, pk=job.pk)


def _export_figures(export: DatasetExport | None) -> dict[str, object] | None:
    if export is None:
        return None
    return {
        "id": export.pk,
        "sha256": export.sha256,
        "n_pairs": export.n_pairs,
        "n_judgements": export.n_judgements,
        "n_ties_dropped": export.n_ties_dropped,
        "options": export.options,
        "created_at": export.created_at,
        "hf_ready": hf_archive_ready(export) if "data_file" not in export.options else False,
    }


def progress_text(job: ExportJob) -> str:
    """The job's progress in one line, as its page shows it: "4,000 of 10,000 judged
    comparisons, 2,000/s, 3 s left" ("" before the first count)."""
    if job.status == SUCCEEDED and job.export is not None:
        return f"{job.export.n_pairs:,} rows in the export"
    if not job.rows_done and job.rows_total is None:
        return ""
    noun = PHASE_ROWS.get(job.phase, "rows")
    text = f"{job.rows_done:,}" + (f" of {job.rows_total:,}" if job.rows_total is not None else "")
    text += f" {noun}"
    if job.status == RUNNING and job.rows_per_s:
        text += f", {job.rows_per_s:,}/s"
    if job.status == RUNNING and job.eta_s is not None:
        text += f", {duration_text(job.eta_s)} left"
    return text


def export_job_progress(job: ExportJob) -> dict[str, object]:
    """The job's state for its page and the API: status (and its words), phase, rows done and
    total (judged comparisons while exporting, pairs while zipping), rate (rows per second) and
    time left in seconds (None until measured), error, whether it was asked to stop, options,
    and once there the export
    (hash, counts, options, whether its Hugging Face zip is built)."""
    return {
        "id": job.pk,
        "status": job.status,
        "status_label": job_state(job)[1],
        "phase": job.phase if job.status == RUNNING else "",
        "rows_done": job.rows_done,
        "rows_total": job.rows_total,
        "rows_per_s": job.rows_per_s,
        "eta_s": job.eta_s,
        "progress_text": progress_text(job),
        "error": job.error,
        "cancel_requested": job.cancel_requested,
        "options": job.options,
        "build_hf": job.build_hf,
        "export": _export_figures(job.export),
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
    }
