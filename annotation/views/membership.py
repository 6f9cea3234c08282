"""What every labelling screen's views share (pairs, ratings, rankings): the member's project and
the time the screen says the annotator spent."""

from django.http import Http404, HttpRequest

from annotation.models import Project
from annotation.selectors.projects import member_project
from common.roles import ANNOTATOR, has_role


def member_project_or_404(request: HttpRequest, slug: str) -> Project:
    """The project ``slug`` if the user labels in it; 404 otherwise (its existence is not revealed)."""
    project = member_project(user=request.user, slug=slug)
    # Not role_required: member_project reads membership and roles in one query (the hot path).
    if project is None or not has_role(request.user, ANNOTATOR):
        raise Http404
    return project


def elapsed_ms(request: HttpRequest) -> int | None:
    """The ``elapsed_ms`` a screen posted (0 to a day), else None."""
    try:
        value = int(request.POST.get("elapsed_ms", ""))
    except ValueError:
        return None
    return value if 0 <= value < 24 * 3600 * 1000 else None
