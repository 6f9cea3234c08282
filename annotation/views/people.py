"""The project lead's pages for a project's settings and people, and the invite (set password) page.

Thin: check the role, parse the form, call a service or a selector, render. Leads are ML engineers
(a superuser counts as every role); everyone else gets 404, as on the other lead pages.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.contrib import messages
from django.contrib.auth.views import PasswordResetConfirmView
from django.forms import Form
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse_lazy

from annotation.forms import MemberAddForm, ProjectForm
from annotation.models import Project
from annotation.selectors import members as project_selectors
from annotation.selectors.adjudication import guidelines_versions
from annotation.services import projects as project_services
from annotation.services.adjudication import guidelines_diff
from annotation.services.projects import ProjectError
from common.roles import ML_ENGINEER, role_required

T = TypeVar("T")
INVITE_SESSION_KEY = "concord:invite-link"  # the invite link the People page shows once


def _form_errors(form: Form, error: ProjectError) -> None:
    """Show a service's refusal on the form: on its fields when it names them, else on top."""
    if not error.field_errors:
        form.add_error(None, str(error))
    for field, errors in error.field_errors.items():
        form.add_error(field if field in form.fields else None, errors)


def _submitted(
    request: HttpRequest, form: Form, service: Callable[..., T], **kwargs: Any
) -> T | None:
    """For a POST whose ``form`` is valid: ``service(actor=user, **kwargs, **cleaned_data)``'s
    result; None for a GET, an invalid form, or a ProjectError (then shown on the form)."""
    if request.method != "POST" or not form.is_valid():
        return None
    try:
        return service(actor=request.user, **kwargs, **form.cleaned_data)
    except ProjectError as exc:
        _form_errors(form, exc)
        return None


@role_required(ML_ENGINEER)
def project_create(request: HttpRequest) -> HttpResponse:
    """A new project's settings; on success, its People page (add annotators next)."""
    form = ProjectForm(request.POST or None)
    project = _submitted(request, form, project_services.project_create)
    if project is not None:
        messages.success(request, f"Project {project.slug} created.")
        return redirect("annotation:project-members", slug=project.slug)
    return render(request, "annotation/projects/create.html", {"form": form})


@role_required(ML_ENGINEER)
def project_settings(request: HttpRequest, slug: str) -> HttpResponse:
    """A project's settings form, archive / unarchive, and its audit log (newest first, paged)."""
    project = get_object_or_404(Project, slug=slug)
    form = ProjectForm(request.POST or None, instance=project)
    saved = _submitted(request, form, project_services.project_update, project=project)
    if saved is not None:
        messages.success(request, "Settings saved.")
        return redirect("annotation:project-settings", slug=saved.slug)
    project.refresh_from_db()  # the form may have set unsaved values on it
    context = {
        "project": project,
        "form": form,
        "events": project_selectors.project_events(project=project, page=request.GET.get("page")),
        **_guidelines_comparison(project, request.GET.get("old"), request.GET.get("new")),
    }
    return render(request, "annotation/projects/settings.html", context)


def _guidelines_comparison(project: Project, old: str | None, new: str | None) -> dict[str, Any]:
    """The settings page's guidelines versions and the diff between versions ``old`` and ``new``
    (numbers from the page's form; by default the one before the newest and the newest). A number
    that names no version is an error on the page, and no diff is shown."""
    versions = guidelines_versions(project=project)
    by_number = {str(v.number): v for v in versions}
    context: dict[str, Any] = {"versions": versions}
    if old is None and new is None:
        if len(versions) < 2:
            return context
        old, new = str(versions[-2].number), str(versions[-1].number)
    missing = [name for name in (old, new) if name not in by_number]
    if missing:
        known = ", ".join(by_number) or "none yet"
        context["diff_error"] = (
            f"No guidelines version {missing[0]!r} to compare (versions: {known})."
        )
        return context
    context |= {
        "old": by_number[old],
        "new": by_number[new],
        "diff": guidelines_diff(by_number[old].text, by_number[new].text),
    }
    return context


def _post_and_back(
    request: HttpRequest, slug: str, service: Callable[..., object], done: str, **kwargs: Any
) -> HttpResponse:
    """``service(project=..., actor=user, **kwargs)``, then back to the page the form was on (the
    People page for a member's change, else Settings) with ``done`` as the message; a ProjectError
    is shown as an error instead (nothing changed)."""
    project = get_object_or_404(Project, slug=slug)
    try:
        service(project=project, actor=request.user, **kwargs)
    except ProjectError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, done)
    back = "annotation:project-members" if "username" in kwargs else "annotation:project-settings"
    return redirect(back, slug=project.slug)


@role_required(ML_ENGINEER, methods=("POST",))
def project_archive(request: HttpRequest, slug: str) -> HttpResponse:
    done = f"Project {slug} archived: no new claims; its data are kept."
    return _post_and_back(request, slug, project_services.project_archive, done)


@role_required(ML_ENGINEER, methods=("POST",))
def project_unarchive(request: HttpRequest, slug: str) -> HttpResponse:
    done = f"Project {slug} is open again."
    return _post_and_back(request, slug, project_services.project_unarchive, done)


@role_required(ML_ENGINEER)
def project_members(request: HttpRequest, slug: str) -> HttpResponse:
    """The project's members with their activity; POST adds one (username or email)."""
    project = get_object_or_404(Project, slug=slug)
    form = MemberAddForm(request.POST or None)
    added = _submitted(request, form, project_services.member_add, project=project)
    if added is not None:
        name = added.membership.user.get_username()
        messages.success(request, f"{name} added as {added.membership.role}.")
        if added.invite:
            _show_invite(request, name, added.invite)
        return redirect("annotation:project-members", slug=project.slug)
    context = {
        "project": project,
        "form": form,
        "members": project_selectors.project_members(project=project),
        "recent_days": project_selectors.RECENT_DAYS,
        # Shown once, on the page the lead lands on after making it (not kept in the page's URL).
        "invite": request.session.pop(INVITE_SESSION_KEY, None),
    }
    return render(request, "annotation/projects/members.html", context)


def _show_invite(request: HttpRequest, username: str, path: str) -> None:
    """Keep the invite link for the People page to show once, in a field with a Copy button."""
    link = request.build_absolute_uri(path)
    request.session[INVITE_SESSION_KEY] = {"username": username, "link": link}
    messages.info(request, f"One-time invite link for {username} made: copy it below and send it.")


@role_required(ML_ENGINEER, methods=("POST",))
def member_remove(request: HttpRequest, slug: str, username: str) -> HttpResponse:
    done = f"{username} removed (their judgements are kept)."
    return _post_and_back(request, slug, project_services.member_remove, done, username=username)


@role_required(ML_ENGINEER, methods=("POST",))
def member_pause(request: HttpRequest, slug: str, username: str) -> HttpResponse:
    done = f"{username} paused (their leases were released)."
    return _post_and_back(request, slug, project_services.member_pause, done, username=username)


@role_required(ML_ENGINEER, methods=("POST",))
def member_resume(request: HttpRequest, slug: str, username: str) -> HttpResponse:
    done = f"{username} resumed."
    return _post_and_back(request, slug, project_services.member_resume, done, username=username)


@role_required(ML_ENGINEER, methods=("POST",))
def member_invite(request: HttpRequest, slug: str, username: str) -> HttpResponse:
    """A new invite link for a member without a password (e.g. an imported annotator)."""
    project = get_object_or_404(Project, slug=slug)
    try:
        path = project_services.member_invite(
            project=project, actor=request.user, username=username
        )
    except ProjectError as exc:
        messages.error(request, str(exc))
    else:
        _show_invite(request, username, path)
    return redirect("annotation:project-members", slug=project.slug)


class InviteAccept(PasswordResetConfirmView):
    """Set a password from an invite link (Django's password-reset token, so it works once). An
    account made inactive by an import, with no password yet, is activated by it."""

    template_name = "annotation/projects/invite.html"
    success_url = reverse_lazy("login")

    def form_valid(self, form: Form) -> HttpResponse:
        if not form.user.has_usable_password():
            form.user.is_active = True
        messages.success(
            self.request,
            f"Password set. Log in with your username, {form.user.get_username()}, and it.",
        )
        return super().form_valid(form)


invite_accept = InviteAccept.as_view()
