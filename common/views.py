"""Home: send each role to its work. The pages shown when a request fails."""

import sys

from django.contrib.auth.decorators import login_required
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template import loader
from django.templatetags.static import static

from common.roles import ANNOTATOR, ML_ENGINEER, REVIEWER, user_roles

# When a user holds several roles, the first match wins: the work done most often comes first.
_ROLE_HOMES = (
    (ANNOTATOR, "annotation:my-projects"),
    (REVIEWER, "monitoring:review-home"),
    (ML_ENGINEER, "annotation:project-overview"),
)


def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico on pages that name no icon (the admin, JSON): send them to the
    static one instead of a 404."""
    response = redirect(static("favicon.ico"))
    response["Cache-Control"] = "public, max-age=86400"
    return response


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """Redirect to the page of the user's first role; users without a role get an explanation."""
    if request.user.is_superuser:  # every role: one page with each role's work
        return redirect("monitoring:every-role-home")
    roles = user_roles(request.user)
    for role, url_name in _ROLE_HOMES:
        if role in roles:
            return redirect(url_name)
    return render(request, "common/no_role.html", status=200)


# Seconds a client is asked to wait before retrying while the database is unreachable.
RETRY_AFTER_S = 5


def _database_unreachable(exc: BaseException | None) -> bool:
    """The error is the database not answering or refusing for now (connection refused or
    dropped, shutting down, a deadlock or timeout: worth retrying), not a bad query. Django raises
    these, directly or as the cause of another error."""
    while exc is not None:
        if isinstance(exc, OperationalError | InterfaceError):
            return True
        if isinstance(exc, DatabaseError):
            return False
        exc = exc.__cause__ or exc.__context__
    return False


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: a readable page, never a traceback. While the database is down (a restart, a
    failover) the answer is 503 with Retry-After: the request may be repeated as it is.

    Rendered without the request's context processors: they read the database too.
    """
    unreachable = _database_unreachable(sys.exc_info()[1])
    status = 503 if unreachable else 500
    if request.path.startswith("/api/"):
        detail = (
            "The database is not answering; retry in a few seconds."
            if unreachable
            else "Server error."
        )
        response: HttpResponse = JsonResponse({"detail": detail}, status=status)
    else:
        html = loader.get_template(f"{status}.html").render()
        response = HttpResponse(html, status=status)
    if unreachable:
        response["Retry-After"] = str(RETRY_AFTER_S)
    return response
