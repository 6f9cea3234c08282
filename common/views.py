"""Home: send each role to its work."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from common.roles import ANNOTATOR, ML_ENGINEER, REVIEWER, user_roles

# When a user holds several roles, the first match wins: the work done most often comes first.
_ROLE_HOMES = (
    (ANNOTATOR, "annotation:my-projects"),
    (REVIEWER, "monitoring:review-home"),
    (ML_ENGINEER, "annotation:project-overview"),
)


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """Redirect to the page of the user's first role; users without a role get an explanation."""
    roles = user_roles(request.user)
    for role, url_name in _ROLE_HOMES:
        if role in roles:
            return redirect(url_name)
    return render(request, "common/no_role.html", status=200)
