"""The notice a pairwise-only page shows for a rating or ranking project.

The item browser, adjudication, prompt clusters and model judges work on comparisons; a rating or
ranking project has none, so showing them would read "0 comparisons". Instead they say what kind
of project it is, what it holds (items, answers, progress) and which page or command to use.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from annotation.models import Project, TaskType
from annotation.selectors.task_items import items_summary

View = Callable[..., HttpResponse]


def pairwise_only(page: str) -> Callable[[View], View]:
    """Decorate a project page (``slug`` its first argument after the request) that works on
    comparisons: for a rating or ranking project it renders the notice instead (200 for a GET,
    409 for a write, which changes nothing). ``page``: the page's name in the notice."""

    def decorate(view: View) -> View:
        @functools.wraps(view)
        def wrapped(request: HttpRequest, slug: str, *args, **kwargs) -> HttpResponse:
            project = get_object_or_404(Project, slug=slug)
            if project.task_type == TaskType.PAIRWISE:
                return view(request, slug, *args, **kwargs)
            context = {"project": project, "page": page, "summary": items_summary(project=project)}
            status = 200 if request.method in ("GET", "HEAD") else 409
            return render(request, "annotation/pairwise_only.html", context, status=status)

        return wrapped

    return decorate
