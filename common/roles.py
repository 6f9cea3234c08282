"""The roles of Concord, stored as Django groups (created by migrations common.0001_roles and
annotation.0007_adjudication).

- Annotator: labels comparisons in projects they are a member of.
- Reviewer: rates checkpoints in human-eval rounds and records stopping decisions.
- ML engineer: staff; imports data, launches and watches training runs from the admin; leads
  projects (settings, members, archive).
- Adjudicator: records final verdicts in the adjudication queue of every project (no other lead page).

Not a role: the "Machine judge" group (MACHINE_JUDGE, common.0002_machine_judge) marks the accounts
whose judgements a model judge wrote. They are never people: ``human_judgements`` /
``machine_account_ids`` leave them out of every human-facing figure and list.

A user may hold several roles; a superuser counts as every role.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.http import require_http_methods

ANNOTATOR = "Annotator"
REVIEWER = "Reviewer"
ML_ENGINEER = "ML engineer"
ADJUDICATOR = "Adjudicator"
ALL_ROLES = (ANNOTATOR, REVIEWER, ML_ENGINEER, ADJUDICATOR)
# The group of model judges' machine accounts (inactive, no password): not a role, never a person.
MACHINE_JUDGE = "Machine judge"

# Apps whose model permissions the ML engineer group holds (kept in sync after every migrate).
ML_ENGINEER_APPS = ("annotation", "training", "monitoring")


def user_roles(user: AbstractBaseUser | AnonymousUser) -> frozenset[str]:
    """The roles the user holds; every role for an active superuser, none for anonymous users."""
    if not user.is_authenticated or not user.is_active:
        return frozenset()
    if user.is_superuser:
        return frozenset(ALL_ROLES)
    # Cached on the instance: the navigation asks on every page.
    cached = getattr(user, "_concord_roles", None)
    if cached is None:
        cached = frozenset(user.groups.filter(name__in=ALL_ROLES).values_list("name", flat=True))
        user._concord_roles = cached
    return cached


def role_flags_sql(user_id: int) -> tuple[str, list[object]]:
    """Select-list items for a raw query that also tells which roles a user holds: one
    ``EXISTS (...) AS holds_role_<i>`` per role of ALL_ROLES, and their parameters. Read a fetched
    row back with ``remember_roles``. The labelling pages need a project and the user's roles on
    every request: one query instead of two, on every judgement.
    """
    user_model = get_user_model()
    groups = user_model._meta.get_field("groups")
    link = groups.remote_field.through._meta
    quote = connection.ops.quote_name
    items, params = [], []
    for i, role in enumerate(ALL_ROLES):
        items.append(
            f"EXISTS (SELECT 1 FROM {quote(link.db_table)} ug "  # noqa: S608  # nosec B608
            f"JOIN {quote(Group._meta.db_table)} g ON g.id = ug.{quote(groups.m2m_reverse_name())} "
            f"WHERE ug.{quote(groups.m2m_column_name())} = %s AND g.name = %s) AS holds_role_{i}"
        )
        params += [user_id, role]
    return ", ".join(items), params


def remember_roles(user: AbstractBaseUser, row: object) -> None:
    """Cache on ``user`` the roles read by a query with ``role_flags_sql`` into ``row`` (what
    ``user_roles`` would have queried: a superuser or inactive user is left to ``user_roles``, which
    needs no query)."""
    if user.is_superuser or not user.is_active:
        return
    user._concord_roles = frozenset(
        role for i, role in enumerate(ALL_ROLES) if getattr(row, f"holds_role_{i}")
    )


def has_role(user: AbstractBaseUser | AnonymousUser, role: str) -> bool:
    """True when the user holds ``role`` (one of ALL_ROLES)."""
    if role not in ALL_ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {ALL_ROLES}")
    return role in user_roles(user)


View = Callable[..., HttpResponse]


def role_required(
    *roles: str, hide: bool = True, methods: tuple[str, ...] | None = None
) -> Callable[[View], View]:
    """View decorator for the pages of one or more roles, checked in this order:

    1. an anonymous user goes to the login page;
    2. a method outside ``methods`` (e.g. ``("POST",)``; None allows any) is 405, for everyone;
    3. a user holding none of ``roles`` gets 404 when ``hide`` (the default: a page of another role's
       work is not revealed to exist) or 403 (``hide=False``, for pages everyone knows of).
    """
    unknown = set(roles) - set(ALL_ROLES)
    if not roles or unknown:
        raise ValueError(f"roles must be some of {ALL_ROLES}, got {roles}")

    def decorate(view: View) -> View:
        @functools.wraps(view)
        def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if user_roles(request.user).isdisjoint(roles):
                raise Http404 if hide else PermissionDenied
            return view(request, *args, **kwargs)

        checked = guarded if methods is None else require_http_methods(list(methods))(guarded)
        return login_required(checked)

    return decorate


def role_assign(*, user: AbstractBaseUser, role: str) -> None:
    """Put the user in the role's group; an ML engineer also becomes staff (the admin is their tool)."""
    if role not in ALL_ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {ALL_ROLES}")
    group, _ = Group.objects.get_or_create(name=role)
    user.groups.add(group)
    if role == ML_ENGINEER and not user.is_staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    if hasattr(user, "_concord_roles"):
        del user._concord_roles


def machine_account_ids() -> QuerySet:
    """A subquery (values of user ids) of the accounts in the MACHINE_JUDGE group: use it as
    ``exclude(annotator_id__in=machine_account_ids())`` (one NOT IN over a handful of ids)."""
    link = get_user_model().groups.through
    return link.objects.filter(group__name=MACHINE_JUDGE).values("user_id")


def not_machine(field: str = "annotator") -> Q:
    """A Q true where the user foreign key ``field`` (a path such as ``"judgements__annotator"``)
    is not a machine account, e.g. ``Count("judgements", filter=not_machine("judgements__annotator"))``."""
    return ~Q(**{f"{field}__in": machine_account_ids()})


def human_judgements(queryset: QuerySet, field: str = "annotator") -> QuerySet:
    """``queryset`` (of judgements, or any rows with a user foreign key named ``field``) without the
    rows of machine accounts: what people did, for every figure shown to people."""
    return queryset.filter(not_machine(field))


def is_machine_account(user: AbstractBaseUser) -> bool:
    """True when the user is a model judge's machine account (in the MACHINE_JUDGE group)."""
    return user.groups.filter(name=MACHINE_JUDGE).exists()


def machine_account_label(username: str) -> str:
    """How a machine account is named to people: ``judge:<project>:<name>:v<version>`` (the form
    monitoring's judges give their accounts) as "<name> v<version>"; any other name unchanged."""
    parts = username.split(":")
    if len(parts) == 4 and parts[0] == "judge":
        return f"{parts[2]} {parts[3]}"
    return username


def machine_account_mark(*, user: AbstractBaseUser) -> None:
    """Put a model judge's machine account in the MACHINE_JUDGE group."""
    group, _ = Group.objects.get_or_create(name=MACHINE_JUDGE)
    user.groups.add(group)


def sync_role_permissions(**kwargs: Any) -> None:
    """Give the ML engineer group every model permission of the Concord apps, and the permission to
    view (not change) user accounts (post_migrate hook).

    Permissions only exist after migrate has created the content types, so this cannot live in the
    data migration that creates the groups. ``flush`` (used between transactional tests) empties the
    groups table and then sends post_migrate, so the groups are made again here too.
    """
    from django.contrib.auth.models import Permission

    app_config = kwargs.get("app_config")
    if app_config is not None and app_config.label not in ML_ENGINEER_APPS:
        return
    for role in (*ALL_ROLES, MACHINE_JUDGE):
        group, _ = Group.objects.get_or_create(name=role)
    group = Group.objects.get(name=ML_ENGINEER)
    perms = Permission.objects.filter(content_type__app_label__in=ML_ENGINEER_APPS)
    group.permissions.add(*perms)
    # Read-only users: the admin's raw-id widgets (created_by, annotator...) link to the user list.
    view_user = Permission.objects.filter(
        content_type__app_label="auth", codename="view_user"
    ).first()
    if view_user is not None:
        group.permissions.add(view_user)
