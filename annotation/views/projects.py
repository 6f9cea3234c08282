"""Project pages: the project lists, the lead's page (imports, progress, exports) and downloads.
Thin: check the role, call a service or selector, render."""

from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.contrib import messages
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render

from annotation.formats import FORMAT_NAMES, ITEM_READERS
from annotation.models import DatasetExport, ExportJob, ImportJob, Project, TaskType
from annotation.selectors import projects as selectors
from annotation.selectors.agreement import agreement_alerts
from annotation.selectors.task_items import item_annotator_progress, items_summary
from annotation.services.export_jobs import (
    export_job_cancel,
    export_job_create,
    export_job_hf_build,
    export_job_progress,
    hf_archive_ready,
)
from annotation.services.exporting import ITEMS_FILE, JUDGEMENTS_FILE, PAIRS_FILE
from annotation.services.hf_export import HF_FORMAT, hf_export_archive_path
from annotation.services.import_jobs import (
    import_job_cancel,
    import_job_create,
    import_job_progress,
)
from annotation.services.item_exports import item_snapshot_formats
from annotation.work_queue.registry import task_type_of
from common.errors import ConcordError
from common.roles import ANNOTATOR, ML_ENGINEER, REVIEWER, role_required

# The upload form's checkbox for ReadOptions.scalars_as_text; a row error names it by this text.
SCALARS_AS_TEXT_LABEL = "Import responses that are JSON numbers or booleans as their text"


def _recent_export_jobs(project: Project) -> list[dict[str, object]]:
    """The project's five latest export jobs: each ``job`` and its ``progress`` as its page
    shows it."""
    jobs = project.export_jobs.select_related("export")[:5]
    return [{"job": job, "progress": export_job_progress(job)} for job in jobs]


@role_required(ANNOTATOR, hide=False)
def my_projects(request: HttpRequest) -> HttpResponse:
    """The annotator's projects with their personal and overall progress."""
    rows = selectors.projects_for_annotator(annotator=request.user)
    return render(request, "annotation/my_projects.html", {"rows": rows})


@role_required(ML_ENGINEER, REVIEWER, hide=False)
def project_overview(request: HttpRequest) -> HttpResponse:
    """Every project's progress, for ML engineers and reviewers."""
    rows = selectors.projects_overview()
    return render(request, "annotation/project_overview.html", {"rows": rows})


@role_required(ML_ENGINEER)
def project_manage(request: HttpRequest, slug: str) -> HttpResponse:
    """The project lead's page: import, progress per annotator, exports (a rating or ranking
    project's: its items, answers, annotators, and the import and export commands)."""
    project = get_object_or_404(Project, slug=slug)
    if project.task_type != TaskType.PAIRWISE:
        context = {
            "project": project,
            "summary": items_summary(project=project),
            "annotators": item_annotator_progress(project=project),
            "item_formats": sorted(ITEM_READERS),
            "export_formats": task_type_of(project).export_formats,
            "snapshot_formats": item_snapshot_formats(project),
            "exports": project.exports.all()[:20],
            "export_jobs": _recent_export_jobs(project),
        }
        return render(request, "annotation/manage_items.html", context)
    jobs = [import_job_progress(job) for job in project.import_jobs.all()[:10]]
    context = {
        "project": project,
        "jobs": jobs,
        "annotators": selectors.annotator_progress(project=project),
        "active": selectors.active_learning_panel(project=project),
        "batches": selectors.batch_progress(project=project),
        "agreement_alerts": agreement_alerts(project=project),
        "exports": project.exports.all()[:20],
        "export_jobs": _recent_export_jobs(project),
        "max_upload_mb": settings.CONCORD_IMPORT_MAX_BYTES // (1024 * 1024),
        "import_formats": FORMAT_NAMES,
        "scalars_as_text_label": SCALARS_AS_TEXT_LABEL,
    }
    return render(request, "annotation/manage.html", context)


@role_required(ML_ENGINEER, methods=("POST",))
def import_upload(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_object_or_404(Project, slug=slug)
    upload = request.FILES.get("file")
    if upload is None:
        messages.error(request, "Choose a file to import.")
    else:
        try:
            job = import_job_create(
                project=project,
                upload=upload,
                created_by=request.user,
                format=request.POST.get("format", "auto"),
                skip_invalid=request.POST.get("skip_invalid") == "1",
                scalars_as_text=request.POST.get("scalars_as_text") == "1",
                scalars_as_text_name=f'the checkbox "{SCALARS_AS_TEXT_LABEL}"',
            )
        except ConcordError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"{job.original_name} received; importing.")
    return redirect("annotation:project-manage", slug=project.slug)


@role_required(ML_ENGINEER)
def import_status(request: HttpRequest, slug: str, job_id: int) -> JsonResponse:
    project = get_object_or_404(Project, slug=slug)
    job = get_object_or_404(ImportJob, pk=job_id, project=project)
    return JsonResponse(import_job_progress(job))


@role_required(ML_ENGINEER, methods=("POST",))
def export_create(request: HttpRequest, slug: str) -> HttpResponse:
    """Queue an export job with the options posted (a pairwise project's consensus rule, keep
    ties and Hugging Face zip; a rating or ranking project's rows) and show its page; a bad
    option goes back to the Manage page with the error, and no job is made."""
    project = get_object_or_404(Project, slug=slug)
    try:
        job = export_job_create(
            project=project,
            created_by=request.user,
            consensus=request.POST.get("consensus", "majority"),
            keep_ties=request.POST.get("keep_ties") == "on",
            row_format=request.POST.get("format") or None,
            build_hf=request.POST.get("hf") == "on",
        )
    except ConcordError as exc:
        messages.error(request, f"No export: {exc}")
        return redirect("annotation:project-manage", slug=project.slug)
    return redirect("annotation:export-job", slug=project.slug, export_job_id=job.pk)


def _export_job(slug: str, export_job_id: int) -> tuple[Project, ExportJob]:
    """The project and its export job (with its export), or 404."""
    project = get_object_or_404(Project, slug=slug)
    job = get_object_or_404(
        ExportJob.objects.select_related("export"), pk=export_job_id, project=project
    )
    return project, job


@role_required(ML_ENGINEER)
def export_job_page(request: HttpRequest, slug: str, export_job_id: int) -> HttpResponse:
    """An export job's page: its state and progress while it runs (polled by common/job_poll.js; a
    refresh shows the same without JavaScript), its downloads once done, its error if it failed."""
    project, job = _export_job(slug, export_job_id)
    context = {"project": project, "job": job, "progress": export_job_progress(job)}
    return render(request, "annotation/export_job.html", context)


@role_required(ML_ENGINEER)
def export_job_status(request: HttpRequest, slug: str, export_job_id: int) -> JsonResponse:
    return JsonResponse(export_job_progress(_export_job(slug, export_job_id)[1]))


def _cancel_said(
    request: HttpRequest, cancel: Callable[[], str], *, cancelled: str, requested: str
) -> None:
    """Run a job's cancel service and say what came of it: ``cancelled`` (it had not started),
    ``requested`` (it stops at its next progress write), or the service's reason (it finished)."""
    try:
        outcome = cancel()
    except ConcordError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, cancelled if outcome == "cancelled" else requested)


@role_required(ML_ENGINEER, methods=("POST",))
def import_cancel(request: HttpRequest, slug: str, job_id: int) -> HttpResponse:
    """Cancel an import job (POST) and go back to the Manage page: a queued import is cancelled,
    a running one stops within a few seconds and imports nothing; a finished one is left as it
    is, with the reason."""
    project = get_object_or_404(Project, slug=slug)
    job = get_object_or_404(ImportJob, pk=job_id, project=project)
    _cancel_said(
        request, lambda: import_job_cancel(job=job),
        cancelled=f"Import of {job.original_name} cancelled.",
        requested=f"The import of {job.original_name} will stop shortly; nothing of it is kept.",
    )  # fmt: skip
    return redirect("annotation:project-manage", slug=project.slug)


@role_required(ML_ENGINEER, methods=("POST",))
def export_job_cancel_view(request: HttpRequest, slug: str, export_job_id: int) -> HttpResponse:
    """Cancel an export job (POST) and show its page again: a queued job is cancelled, a running
    one stops within about a second; a finished one is left as it is, with the reason."""
    project, job = _export_job(slug, export_job_id)
    _cancel_said(
        request, lambda: export_job_cancel(job=job),
        cancelled=f"Export #{job.pk} cancelled.",
        requested=f"Export #{job.pk} will stop within a second; nothing half-written is kept.",
    )  # fmt: skip
    return redirect("annotation:export-job", slug=project.slug, export_job_id=job.pk)


@role_required(ML_ENGINEER)
def export_download(request: HttpRequest, slug: str, sha256: str, part: str) -> HttpResponse:
    """One file of an export. The Hugging Face zip is served once built; before that, asking
    for it queues the job that builds it (on the worker: minutes on a large project) and shows
    that job's page, whose download link appears when it is done."""
    project = get_object_or_404(Project, slug=slug)
    export = get_object_or_404(DatasetExport, project=project, sha256=sha256)
    if part == HF_FORMAT and "data_file" not in export.options:  # the HF dataset folder, zipped
        if not hf_archive_ready(export):
            job = export_job_hf_build(export=export, created_by=request.user)
            return redirect("annotation:export-job", slug=project.slug, export_job_id=job.pk)
        name = f"{project.slug}-{sha256[:12]}-hf.zip"
        archive = hf_export_archive_path(export)
        return FileResponse(archive.open("rb"), as_attachment=True, filename=name)
    files = {"pairs": PAIRS_FILE, "judgements": JUDGEMENTS_FILE}
    if "data_file" in export.options:  # a rating or ranking project's rows and items
        files = {"data": export.options["data_file"], "items": ITEMS_FILE}
    if part not in files:
        raise Http404
    path = Path(export.folder) / files[part]
    name = f"{project.slug}-{sha256[:12]}-{part}.jsonl"
    return FileResponse(path.open("rb"), as_attachment=True, filename=name)
