"""Annotation pages. Thin: check the role, call a selector, render."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from annotation import labelling, selectors
from annotation.models import Side
from common.roles import ANNOTATOR, ML_ENGINEER, REVIEWER, has_role


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
    if not has_role(request.user, ANNOTATOR):
        raise Http404
    return get_object_or_404(selectors.projects_of_member(user=request.user), slug=slug)


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
    left, right = comparison.response_a, comparison.response_b
    if shown_left == Side.B:
        left, right = right, left
    context = {
        "project": project,
        "comparison": comparison,
        "prompt": comparison.prompt,
        "left": left,
        "right": right,
        "progress": selectors.labelling_progress(annotator=request.user, project=project),
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
