"""The start page of a user who holds every role (a superuser): each role's work on one page."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from annotation.selectors import projects as annotation_projects
from common.roles import ML_ENGINEER, role_required
from monitoring.selectors import eval_rounds as eval_selectors
from monitoring.selectors import runs as selectors

RECENT_RUNS = 5


@role_required(ML_ENGINEER)
def every_role_home(request: HttpRequest) -> HttpResponse:
    """Labelling (the projects this user is a member of), review (open eval rounds), the projects
    and the latest training runs, each with the link to its own page."""
    context = {
        "labelling": annotation_projects.projects_for_annotator(annotator=request.user),
        "rounds": eval_selectors.rounds_open_for(request.user.pk),
        "projects": annotation_projects.projects_overview(),
        "runs": selectors.runs_overview(limit=RECENT_RUNS),
    }
    return render(request, "monitoring/every_role_home.html", context)
