"""Annotation pages. Thin: check the role, call a selector, render."""

from pathlib import Path

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from annotation import labelling, selectors
from annotation.agreement_service import agreement_alerts
from annotation.exporting import (
    CONSENSUS_RULES,
    HF_FORMAT,
    JUDGEMENTS_FILE,
    PAIRS_FILE,
    dataset_export,
    hf_export_archive,
)
from annotation.formats import FORMAT_NAMES
from annotation.import_jobs import import_job_create, import_job_progress
from annotation.models import SCREEN_PAIR, DatasetExport, ImportJob, Project, Side
from common.errors import ConcordError
from common.roles import ANNOTATOR, ML_ENGINEER, REVIEWER, has_role
from common.sides import screen_order


@login_required
def my_projects(request: HttpRequest) -> HttpResponse:
    """The annotator's projects with their personal and overall progress."""
    if not has_role(request.user, ANNOTATOR):
        raise PermissionDenied
    rows = selectors.projects_for_annotator(annotator=request.user)
    return render(request, "annotation/my_projects.html", {"rows": rows})


@login_required
def project_overview(request: HttpRequest) -> HttpResponse:
    """Every project's progress, for ML engineers and reviewers."""
    if not (has_role(request.user, ML_ENGINEER) or has_role(request.user, REVIEWER)):
        raise PermissionDenied
    rows = selectors.projects_overview()
    return render(request, "annotation/project_overview.html", {"rows": rows})


def _member_project(request: HttpRequest, slug: str):
    """The project ``slug`` if the user labels in it; 404 otherwise (its existence is not revealed)."""
    project = selectors.member_project(user=request.user, slug=slug)
    if project is None or not has_role(request.user, ANNOTATOR):
        raise Http404
    return project


def _verdict_from(request: HttpRequest) -> labelling.Verdict:
    try:
        strength = int(request.POST.get("strength", "1"))
    except ValueError:
        strength = 0  # rejected by the service with a clear message
    return labelling.Verdict(pick=request.POST.get("pick", ""), strength=strength)


def _elapsed_ms(request: HttpRequest) -> int | None:
    try:
        value = int(request.POST.get("elapsed_ms", ""))
    except ValueError:
        return None
    return value if 0 <= value < 24 * 3600 * 1000 else None


def _screen(request: HttpRequest, project, comparison, shown_left: str, **extra) -> HttpResponse:
    left, right = screen_order(
        shown_left, pair=SCREEN_PAIR, values=(comparison.response_a, comparison.response_b)
    )
    context = {
        "project": project,
        "comparison": comparison,
        "prompt": comparison.prompt,
        "left": left,
        "right": right,
        "progress": selectors.labelling_progress(
            annotator=request.user, project=project, showing="assignment" in extra
        ),
        "strength_levels": range(1, project.strength_scale + 1),
        **extra,
    }
    return render(request, "annotation/label.html", context)


@login_required
def label(request: HttpRequest, slug: str) -> HttpResponse:
    """Show the annotator's current pair (claiming the next one if needed)."""
    project = _member_project(request, slug)
    assignment = labelling.assignment_claim(annotator=request.user, project=project)
    if assignment is None:
        progress = selectors.labelling_progress(annotator=request.user, project=project)
        return render(
            request, "annotation/label_done.html", {"project": project, "progress": progress}
        )
    return _screen(
        request,
        project,
        assignment.comparison,
        assignment.shown_left,
        assignment=assignment,
        action=reverse("annotation:label-submit", args=[slug, assignment.pk]),
    )


@login_required
@require_POST
def label_submit(request: HttpRequest, slug: str, assignment_id: int) -> HttpResponse:
    """Store the verdict on an assignment, then show the next pair (post/redirect/get)."""
    project = _member_project(request, slug)
    try:
        labelling.judgement_submit(
            annotator=request.user,
            assignment_id=assignment_id,
            verdict=_verdict_from(request),
            rationale=request.POST.get("rationale", ""),
            elapsed_ms=_elapsed_ms(request),
            project=project,
        )
    except labelling.LabellingError as exc:
        messages.error(request, str(exc))
    return redirect("annotation:label", slug=project.slug)


@login_required
@require_POST
def label_skip(request: HttpRequest, slug: str, assignment_id: int) -> HttpResponse:
    project = _member_project(request, slug)
    labelling.assignment_skip(annotator=request.user, assignment_id=assignment_id)
    return redirect("annotation:label", slug=project.slug)


@login_required
def label_edit_last(request: HttpRequest, slug: str) -> HttpResponse:
    """Undo: bring back the annotator's last judgement to change it (Z on the labelling screen)."""
    project = _member_project(request, slug)
    last = labelling.judgement_last(annotator=request.user, project=project)
    if last is None:
        messages.info(request, "You have not judged anything in this project yet.")
        return redirect("annotation:label", slug=project.slug)
    if request.method == "POST":
        try:
            labelling.judgement_edit(
                annotator=request.user,
                judgement_id=last.pk,
                verdict=_verdict_from(request),
                rationale=request.POST.get("rationale", ""),
            )
        except labelling.LabellingError as exc:
            messages.error(request, str(exc))
            return redirect("annotation:label-edit-last", slug=project.slug)
        messages.success(request, "Your last judgement was changed.")
        return redirect("annotation:label", slug=project.slug)
    shown_left = last.shown_left or Side.A
    pick = last.choice
    if pick in (Side.A, Side.B):
        pick = "left" if pick == shown_left else "right"
    return _screen(
        request,
        project,
        last.comparison,
        shown_left,
        editing=last,
        current_pick=pick,
        action=reverse("annotation:label-edit-last", args=[slug]),
    )


def _lead_project(request: HttpRequest, slug: str):
    """The project for a project lead (ML engineer); 404 for anyone else."""
    if not has_role(request.user, ML_ENGINEER):
        raise Http404
    return get_object_or_404(Project, slug=slug)


@login_required
def project_manage(request: HttpRequest, slug: str) -> HttpResponse:
    """The project lead's page: import, progress per annotator, exports."""
    project = _lead_project(request, slug)
    jobs = [import_job_progress(job) for job in project.import_jobs.all()[:10]]
    context = {
        "project": project,
        "jobs": jobs,
        "annotators": selectors.annotator_progress(project=project),
        "batches": selectors.batch_progress(project=project),
        "agreement_alerts": agreement_alerts(project=project),
        "exports": project.exports.all()[:20],
        "max_upload_mb": settings.CONCORD_IMPORT_MAX_BYTES // (1024 * 1024),
        "import_formats": FORMAT_NAMES,
    }
    return render(request, "annotation/manage.html", context)


@login_required
@require_POST
def import_upload(request: HttpRequest, slug: str) -> HttpResponse:
    project = _lead_project(request, slug)
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
            )
        except ConcordError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"{job.original_name} received; importing.")
    return redirect("annotation:project-manage", slug=project.slug)


@login_required
def import_status(request: HttpRequest, slug: str, job_id: int) -> JsonResponse:
    project = _lead_project(request, slug)
    job = get_object_or_404(ImportJob, pk=job_id, project=project)
    return JsonResponse(import_job_progress(job))


@login_required
@require_POST
def export_create(request: HttpRequest, slug: str) -> HttpResponse:
    project = _lead_project(request, slug)
    consensus = request.POST.get("consensus", "majority")
    if consensus not in CONSENSUS_RULES:
        consensus = "majority"
    export = dataset_export(
        project=project,
        keep_ties=request.POST.get("keep_ties") == "on",
        consensus=consensus,
        created_by=request.user,
    )
    messages.success(request, f"Export {export.sha256[:12]}: {export.n_pairs} pairs.")
    return redirect("annotation:project-manage", slug=project.slug)


@login_required
def export_download(request: HttpRequest, slug: str, sha256: str, part: str) -> FileResponse:
    project = _lead_project(request, slug)
    export = get_object_or_404(DatasetExport, project=project, sha256=sha256)
    if part == HF_FORMAT:  # the Hugging Face dataset folder, zipped
        archive = hf_export_archive(export=export)
        name = f"{project.slug}-{sha256[:12]}-hf.zip"
        return FileResponse(archive.open("rb"), as_attachment=True, filename=name)
    files = {"pairs": PAIRS_FILE, "judgements": JUDGEMENTS_FILE}
    if part not in files:
        raise Http404
    path = Path(export.folder) / files[part]
    name = f"{project.slug}-{sha256[:12]}-{part}.jsonl"
    return FileResponse(path.open("rb"), as_attachment=True, filename=name)
