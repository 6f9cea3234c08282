"""Reviewer pages. Thin: check the role, call selectors, render."""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from annotation.selectors import projects_overview
from common.model_registry import registered_models
from common.roles import REVIEWER, has_role


@login_required
def review_home(request: HttpRequest) -> HttpResponse:
    """The reviewer's start page: the models that can be evaluated and the state of the data."""
    if not has_role(request.user, REVIEWER):
        raise PermissionDenied
    context = {"models": registered_models(), "projects": projects_overview()}
    return render(request, "monitoring/review_home.html", context)
