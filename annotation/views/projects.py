"""Project pages: the project lists, the lead's page (imports, progress, exports) and downloads.
Thin: check the role, call a service or selector, render."""

from pathlib import Path

from django.conf import settings
from django.contrib import messages
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render

from annotation.formats import FORMAT_NAMES, ITEM_READERS
from annotation.models import DatasetExport, ImportJob, Project, TaskType
from annotation.selectors import projects as selectors
from annotation.selectors.agreement import agreement_alerts
from annotation.selectors.task_items import item_annotator_progress, items_summary
from annotation.services.exporting import (
    CONSENSUS_RULES,
    ITEMS_FILE,
    JUDGEMENTS_FILE,
    PAIRS_FILE,
    dataset_export,
)
from annotation.services.hf_export import HF_FORMAT, hf_export_archive
from annotation.services.import_jobs import import_job_create, import_job_progress
from annotation.services.item_exports import item_dataset_export, item_snapshot_formats
from annotation.services.task_export import TaskExportError
from annotation.work_queue.registry import task_type_of
from common.errors import ConcordError
from common.roles import ANNOTATOR, ML_ENGINEER, REVIEWER, role_required

# The upload form's checkbox for ReadOptions.scalars_as_text; a row error names it by this text.
SCALARS_AS_TEXT_LABEL = "Import responses that are JSON numbers or booleans as their text"


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
    project = get_object_or_404(Project, slug=slug)
    if project.task_type != TaskType.PAIRWISE:
        return _item_export_create(request, project)
    consensus = request.POST.get("consensus", "majority")
    if consensus not in CONSENSUS_RULES:
        consensus = "majority"
    try:
        export = dataset_export(
            project=project,
            keep_ties=request.POST.get("keep_ties") == "on",
            consensus=consensus,
            created_by=request.user,
        )
    except ValueError as exc:  # the project's stored data cannot be exported (named in exc)
        messages.error(request, f"No export: {exc}")
        return redirect("annotation:project-manage", slug=project.slug)
    messages.success(request, f"Export {export.sha256[:12]}: {export.n_pairs} pairs.")
    return redirect("annotation:project-manage", slug=project.slug)


def _item_export_create(request: HttpRequest, project: Project) -> HttpResponse:
    """A rating or ranking project's training export, in the format posted."""
    try:
        export = item_dataset_export(
            project=project, row_format=request.POST.get("format", ""), created_by=request.user
        )
    except TaskExportError as exc:
        messages.error(request, f"No export: {exc}")
    else:
        fmt = export.options["format"]
        messages.success(request, f"Export {export.sha256[:12]}: {export.n_pairs} {fmt} rows.")
    return redirect("annotation:project-manage", slug=project.slug)


@role_required(ML_ENGINEER)
def export_download(request: HttpRequest, slug: str, sha256: str, part: str) -> FileResponse:
    project = get_object_or_404(Project, slug=slug)
    export = get_object_or_404(DatasetExport, project=project, sha256=sha256)
    if part == HF_FORMAT and "data_file" not in export.options:  # the HF dataset folder, zipped
        archive = hf_export_archive(export=export)
        name = f"{project.slug}-{sha256[:12]}-hf.zip"
        return FileResponse(archive.open("rb"), as_attachment=True, filename=name)
    files = {"pairs": PAIRS_FILE, "judgements": JUDGEMENTS_FILE}
    if "data_file" in export.options:  # a rating or ranking project's rows and items
        files = {"data": export.options["data_file"], "items": ITEMS_FILE}
    if part not in files:
        raise Http404
    path = Path(export.folder) / files[part]
    name = f"{project.slug}-{sha256[:12]}-{part}.jsonl"
    return FileResponse(path.open("rb"), as_attachment=True, filename=name)
