"""Home: send each role to its work. The login page and single sign-on's two steps. The user's own
page (API tokens). The pages shown when a request fails."""

import sys
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template import loader
from django.templatetags.static import static
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from common.api_tokens import api_token_create, api_token_revoke, api_tokens_of, scope_projects
from common.errors import ConcordError
from common.forms import ApiTokenForm, LoginForm
from common.roles import ANNOTATOR, ML_ENGINEER, REVIEWER, has_role, user_roles
from common.sso import sso_enabled

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


class LoginView(auth_views.LoginView):
    """Django's login page (username or email, throttled), with a "Sign in with <provider>" button
    when single sign-on is configured, and a note when a sign-on came back refused."""

    authentication_form = LoginForm
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["sso_provider_name"] = (
            settings.CONCORD_OIDC_PROVIDER_NAME if sso_enabled() else None
        )
        context["sso_failed"] = self.request.GET.get("sso") == "failed"
        return context


@require_GET
def sso_login(request: HttpRequest) -> HttpResponse:
    """Single sign-on, step one: off (404) unless configured; else to the provider with a fresh
    state, nonce and PKCE challenge kept in the session (mozilla-django-oidc)."""
    if not sso_enabled():
        raise Http404("Single sign-on is not configured.")
    return OIDCAuthenticationRequestView.as_view()(request)


@require_GET
def sso_callback(request: HttpRequest) -> HttpResponse:
    """Single sign-on, step two: the provider's redirect with a code. An unknown state or a token
    that fails a check answers 400 and signs nobody in (common.sso.SsoBackend)."""
    if not sso_enabled():
        raise Http404("Single sign-on is not configured.")
    return OIDCAuthenticationCallbackView.as_view()(request)


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


@login_required
def account(request: HttpRequest) -> HttpResponse:
    """The user's own page: who they are, and their personal API tokens (create; the new token is
    shown in this response only, never stored in plain text, never in the session)."""
    form = ApiTokenForm(request.POST or None, projects=_scope_choices(request))
    created = None
    status = 200
    if request.method == "POST" and form.is_valid():
        try:
            created = api_token_create(
                user=request.user,
                name=form.cleaned_data["name"],
                lifetime_days=form.cleaned_data["lifetime"],
                project_id=form.cleaned_data["project"],
            )
        except ConcordError as error:
            form.add_error(None, str(error))
        else:
            form = ApiTokenForm(projects=_scope_choices(request))
    elif request.method == "POST":
        status = 400
    response = render(
        request,
        "common/account.html",
        {
            "form": form,
            "created": created,
            "tokens": api_tokens_of(user=request.user),
            "now": timezone.now(),
            "roles": user_roles(request.user),
        },
        status=status,
    )
    response["Cache-Control"] = "no-store"  # the page may hold a token shown once
    return response


def _scope_choices(request: HttpRequest) -> list[tuple[int, str]]:
    """Projects a token may be limited to: the API serves project leads, so only they choose one."""
    return scope_projects() if has_role(request.user, ML_ENGINEER) else []


@login_required
@require_POST
def account_token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    """Revoke one of the user's own tokens; someone else's answers 404."""
    try:
        token = api_token_revoke(user=request.user, token_id=token_id)
    except ConcordError as error:
        raise Http404(str(error)) from None
    messages.success(request, f"Token “{token.name}” revoked: it no longer works.")
    return redirect("account")
