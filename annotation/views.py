"""Annotation pages. Thin: check the role, call a selector, render."""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from annotation import selectors
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
