"""Writes of a project's settings and people: create, edit, archive, members, pauses, invites.

Every write here is one transaction that either does all it says and writes one audit row
(ProjectEvent: who, when, what, before/after for edits) or raises ProjectError and changes nothing.
The project lead calls these from the project pages; the Django admin's project page calls them too.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.contrib.auth.tokens import default_token_generator
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import F
from django.urls import reverse
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from annotation.models import (
    Assignment,
    Comparison,
    Project,
    ProjectEvent,
    ProjectMembership,
    TaskAnswer,
    TaskItem,
    TaskLease,
    TaskType,
)
from annotation.selectors.projects import suggestion_judges
from annotation.services.active_queue import overlap_targets_update, queue_order_apply
from annotation.services.adjudication import guidelines_update
from common.errors import ConcordError
from common.roles import ANNOTATOR, REVIEWER, role_assign

# The settings a lead edits in the app (the model's validation applies to each).
PROJECT_FIELDS = (
    "name",
    "slug",
    "guidelines",
    "overlap",
    "allow_ties",
    "allow_both_bad",
    "strength_scale",
    "lease_minutes",
    "gold_every",
    "repeat_every",
    "suggestion_judge",
    "queue_order",
    "exploration_share",
    "overlap_reduction",
    "continuous_rm",
    "continuous_rm_every",
    "continuous_rm_ensemble_size",
    "task_type",
    "rating_aspects",
    "rating_thumbs",
)
# The settings each task type uses; a form shows only those (the others keep their values).
# Every type has the queue's settings (overlap, leases, gold, repeats); pairs have the verdict
# scale, both-bad, suggestions, queue order and the continuous reward model; ties are a pairwise
# verdict and equal ranks in a ranking; aspects and thumbs are a rating's.
COMMON_SETTINGS = (
    "name",
    "slug",
    "guidelines",
    "overlap",
    "lease_minutes",
    "gold_every",
    "repeat_every",
    "task_type",
)
TASK_SETTINGS = {
    TaskType.PAIRWISE: (
        "allow_ties",
        "allow_both_bad",
        "strength_scale",
        "suggestion_judge",
        "queue_order",
        "exploration_share",
        "overlap_reduction",
        "continuous_rm",
        "continuous_rm_every",
        "continuous_rm_ensemble_size",
    ),
    TaskType.RATING: ("rating_aspects", "rating_thumbs"),
    TaskType.RANKING: ("allow_ties",),
}


def settings_of(task_type: str) -> frozenset[str]:
    """The names in PROJECT_FIELDS a project of ``task_type`` uses (an unknown type: the common
    ones only)."""
    return frozenset(COMMON_SETTINGS) | frozenset(TASK_SETTINGS.get(task_type, ()))


# Settings whose change re-orders the queue, or recomputes which comparisons need fewer humans.
QUEUE_SETTINGS = frozenset({"queue_order", "exploration_share"})
OVERLAP_SETTINGS = frozenset({"overlap_reduction", "overlap", "suggestion_judge"})

# A rating project scores 1-8 aspects, each named like a slug (it becomes a form field's name and
# an export column): lowercase letters, digits, "_" and "-", starting with a letter.
MAX_RATING_ASPECTS = 8
ASPECT_NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")

# The global role a membership needs for its pages (the labelling screen asks for Annotator).
MEMBERSHIP_ROLES = {
    ProjectMembership.Role.ANNOTATOR: ANNOTATOR,
    ProjectMembership.Role.REVIEWER: REVIEWER,
}

Role = ProjectMembership.Role
Kind = ProjectEvent.Kind


class ProjectError(ConcordError):
    """A refused change to a project. ``field_errors`` maps a field to its messages (form errors)."""

    def __init__(self, message: str, field_errors: dict[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.field_errors = field_errors or {}


def _event(
    project: Project,
    actor: AbstractBaseUser | None,
    kind: str,
    *,
    subject: str = "",
    changes: dict[str, Any] | None = None,
) -> ProjectEvent:
    return ProjectEvent.objects.create(
        project=project, actor=actor, kind=kind, subject=subject, changes=changes or {}
    )


def _validated(project: Project, fields: dict[str, Any]) -> None:
    """Set ``fields`` on ``project`` and run the model's validation; ProjectError on bad input."""
    unknown = sorted(set(fields) - set(PROJECT_FIELDS))
    if unknown:
        raise ProjectError(f"unknown project settings: {', '.join(unknown)}")
    stored = {
        name: getattr(project, name) for name in ("task_type", "rating_aspects", "rating_thumbs")
    }
    for name, value in fields.items():
        setattr(project, name, value)
    try:
        project.full_clean(exclude=["created_by"])
        _check_suggestion_judge(project)
        _check_task_settings(project, stored)
    except ValidationError as exc:
        errors = exc.message_dict
        summary = "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in errors.items())
        raise ProjectError(f"invalid project settings: {summary}", errors) from exc


def _check_suggestion_judge(project: Project) -> None:
    """Only a machine account with judgements in this project may suggest (``suggestion_judges``):
    never a person, nor another project's judge. ValidationError otherwise."""
    judge_id = project.suggestion_judge_id
    if judge_id is None:
        return
    if not suggestion_judges(project=project).filter(pk=judge_id).exists():
        raise ValidationError(
            {
                "suggestion_judge": "must be the machine account of a model judge that judged "
                "this project's pairs (the judges page lists them); leave it empty for no suggestions"
            }
        )


def rating_aspects_problem(aspects: object) -> str | None:
    """Why ``aspects`` cannot be a rating project's aspects (a list of 0-8 distinct slug-like
    names), or None when they can. Pure; the import command's project setup uses it too."""
    if not isinstance(aspects, list) or not all(isinstance(a, str) for a in aspects):
        return "must be a list of names"
    bad = [a for a in aspects if not ASPECT_NAME.fullmatch(a)]
    if bad:
        return (
            f"{bad[0]!r} is not a slug-like name: use 1-40 lowercase letters, digits, _ and -, "
            "starting with a letter (e.g. instruction_following)"
        )
    repeated = sorted({a for a in aspects if aspects.count(a) > 1})
    if repeated:
        return f"{', '.join(repeated)} appears more than once"
    if len(aspects) > MAX_RATING_ASPECTS:
        return f"at most {MAX_RATING_ASPECTS} aspects, got {len(aspects)}"
    return None


def _check_task_settings(project: Project, stored: dict[str, Any]) -> None:
    """The task type, rating aspects and thumbs of ``project`` (``stored``: their saved values).
    The type stays once the project holds comparisons or items (their data would no longer fit
    it); a rating project asks for 1-8 aspects, thumbs or both; aspects that answers already
    score cannot be removed or renamed (adding one is fine). ValidationError otherwise."""
    aspects = project.rating_aspects
    if project.pk is not None and project.task_type != stored["task_type"]:
        held = _data_held(project)
        if held:
            raise ValidationError(
                {
                    "task_type": f"stays {stored['task_type']}: this project already holds "
                    f"{held}, which a {project.task_type} project cannot use. Create a new "
                    "project for another task type."
                }
            )
    if project.task_type != TaskType.RATING:
        if aspects or project.rating_thumbs:
            field = "rating_aspects" if aspects else "rating_thumbs"
            raise ValidationError(
                {field: "aspects and thumbs belong to rating projects: clear them for this type"}
            )
        return
    if aspects != stored["rating_aspects"]:
        problem = rating_aspects_problem(aspects)
        if problem:
            raise ValidationError({"rating_aspects": problem})
    if not aspects and not project.rating_thumbs:
        raise ValidationError(
            {"rating_aspects": "a rating project asks for 1-8 aspects, thumbs or both"}
        )
    if project.pk is not None:
        removed = [a for a in stored["rating_aspects"] or [] if a not in aspects]
        scored = [a for a in removed if _aspect_scored(project, a)]
        if scored:
            raise ValidationError(
                {
                    "rating_aspects": f"answers already score {', '.join(scored)}: keep "
                    "those aspects (you may add new ones)"
                }
            )


def _data_held(project: Project) -> str:
    """What the saved ``project`` holds that ties it to its task type ("12 comparisons",
    "3 items"), or "" when it holds nothing yet."""
    comparisons = Comparison.objects.filter(project_id=project.pk).count()
    if comparisons:
        return f"{comparisons} comparison{'s' * (comparisons != 1)}"
    items = project.task_items.count()
    return f"{items} item{'s' * (items != 1)}" if items else ""


def _aspect_scored(project: Project, aspect: str) -> bool:
    return TaskAnswer.objects.filter(item__project_id=project.pk, scores__has_key=aspect).exists()


def _audit_value(project: Project, name: str) -> Any:
    """A setting's value as the audit log stores it (JSON): an account as its username."""
    if name == "suggestion_judge":
        judge = project.suggestion_judge
        return None if judge is None else judge.get_username()
    return getattr(project, name)


def project_settings_check(*, project: Project | None = None, **fields: Any) -> None:
    """Raise the ProjectError that project_create (``project`` None or unsaved) or project_update
    would raise for ``fields``; writes nothing. Lets a form show the refusal on its fields before
    anything is saved (the write validates again, under its lock)."""
    draft = (
        Project() if project is None or project.pk is None else Project.objects.get(pk=project.pk)
    )
    _validated(draft, fields)


def project_create(*, actor: AbstractBaseUser, **fields: Any) -> Project:
    """A new project with ``fields`` (names in PROJECT_FIELDS; the others keep the model defaults),
    validated like the model (full_clean); audited as "created" with every value set."""
    project = Project(created_by=actor)
    _validated(project, fields)
    with transaction.atomic():
        project.save()
        if project.guidelines:
            guidelines_update(project=project, text=project.guidelines, user=actor)  # version 1
        values = {name: {"after": _audit_value(project, name)} for name in PROJECT_FIELDS}
        _event(project, actor, Kind.CREATED, changes=values)
    return project


def project_update(*, project: Project, actor: AbstractBaseUser, **fields: Any) -> Project:
    """Change the project's settings to ``fields``; audited with the before and after of each value
    that changed (no change, no audit row). Returns the saved project (a fresh instance)."""
    with transaction.atomic():
        locked = Project.objects.select_for_update().get(pk=project.pk)
        before = {name: _audit_value(locked, name) for name in fields if name in PROJECT_FIELDS}
        _validated(locked, fields)
        changes = {
            name: {"before": before[name], "after": _audit_value(locked, name)}
            for name in fields
            if before[name] != _audit_value(locked, name)
        }
        if changes:
            plain = [name for name in changes if name != "guidelines"]
            if plain:
                locked.save(update_fields=plain)
            if "guidelines" in changes:
                # A new numbered version: judgements are stamped with it, annotators see the diff once.
                guidelines_update(project=locked, text=locked.guidelines, user=actor)
            if OVERLAP_SETTINGS & set(changes):
                overlap_targets_update(project=locked)
            if QUEUE_SETTINGS & set(changes):
                queue_order_apply(project=locked)
            _event(locked, actor, Kind.EDITED, changes=changes)
    return locked


def project_leases_release(*, project: Project, user: AbstractBaseUser | None = None) -> int:
    """Delete the active leases (of ``user``, or of everyone) in ``project``, pairs' assignments
    and rating or ranking items' leases alike, and give their overlap slots back; returns how many
    were released. Runs inside the caller's transaction (archiving, pausing or removing a member,
    restoring an archive)."""
    released = _released(Assignment, Comparison, "comparison", project, user)
    return released + item_leases_release(project=project, user=user)


def item_leases_release(*, project: Project, user: AbstractBaseUser | None = None) -> int:
    """``project_leases_release`` for a rating or ranking project's item leases only (a restored
    archive's: the pairs' assignments travel as they were)."""
    return _released(TaskLease, TaskItem, "item", project, user)


def _released(
    leases_model: type[Assignment] | type[TaskLease],
    slots_model: type[Comparison] | type[TaskItem],
    slot: str,
    project: Project,
    user: AbstractBaseUser | None,
) -> int:
    leases = leases_model.objects.select_for_update(of=("self",)).filter(
        **{f"{slot}__project": project}, status=Assignment.Status.ACTIVE
    )
    if user is not None:
        leases = leases.filter(annotator=user)
    rows = list(leases.order_by("pk").values_list("pk", f"{slot}_id", "kind"))
    if not rows:
        return 0
    leases_model.objects.filter(pk__in=[pk for pk, _, _ in rows]).delete()
    slots = Counter(slot_id for _, slot_id, kind in rows if kind == Assignment.Kind.NORMAL)
    for slot_id in sorted(slots):
        slots_model.objects.filter(pk=slot_id).update(taken=F("taken") - slots[slot_id])
    return len(rows)


def project_archive(*, project: Project, actor: AbstractBaseUser) -> Project:
    """Archive the project: annotators claim no new pairs, its leases are released, every
    comparison and judgement is kept, and annotators no longer see it in their list."""
    with transaction.atomic():
        locked = Project.objects.select_for_update().get(pk=project.pk)
        if locked.archived_at is not None:
            raise ProjectError(f"project {locked.slug} is already archived")
        locked.archived_at = timezone.now()
        locked.save(update_fields=["archived_at"])
        released = project_leases_release(project=locked)
        _event(locked, actor, Kind.ARCHIVED, changes={"released_leases": released})
    return locked


def project_unarchive(*, project: Project, actor: AbstractBaseUser) -> Project:
    """Open an archived project again: claims resume where they stopped."""
    with transaction.atomic():
        locked = Project.objects.select_for_update().get(pk=project.pk)
        if locked.archived_at is None:
            raise ProjectError(f"project {locked.slug} is not archived")
        locked.archived_at = None
        locked.save(update_fields=["archived_at"])
        _event(locked, actor, Kind.UNARCHIVED)
    return locked


def invite_path(*, user: AbstractBaseUser) -> str:
    """The path of the page where ``user`` sets a password (Django's password-reset token: it
    stops working once the password is set, and after settings.PASSWORD_RESET_TIMEOUT seconds)."""
    uidb64 = urlsafe_base64_encode(force_bytes(user.pk))
    token = default_token_generator.make_token(user)
    return reverse("annotation:invite", args=[uidb64, token])


def _username_for(email: str) -> str:
    """A free username made from the email's local part (``ann.lee@x.org`` -> ``ann.lee``, then
    ``ann.lee-2``...)."""
    user_model = get_user_model()
    base = re.sub(r"[^\w.+-]", "", email.split("@", 1)[0])[:140] or "user"
    name, n = base, 1
    while user_model.objects.filter(username__iexact=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def _account_for(identifier: str) -> tuple[AbstractBaseUser, bool]:
    """The account named by a username or an email address, and whether it was created now (an
    unknown email makes an account with no password; an unknown username is an error)."""
    user_model = get_user_model()
    identifier = identifier.strip()
    if not identifier:
        raise ProjectError("give a username or an email address")
    if "@" not in identifier:
        user = user_model.objects.filter(username=identifier).first()
        if user is None:
            raise ProjectError(
                f"no user named {identifier!r}; give an email address to invite someone new"
            )
        return user, False
    try:
        validate_email(identifier)
    except ValidationError as exc:
        raise ProjectError(f"{identifier!r} is not a valid email address") from exc
    found = list(user_model.objects.filter(email__iexact=identifier)[:2])
    if len(found) > 1:
        raise ProjectError(f"several accounts use {identifier}; give the username instead")
    if found:
        return found[0], False
    user = user_model(username=_username_for(identifier), email=identifier)
    user.set_unusable_password()
    user.save()
    return user, True


@dataclass(frozen=True)
class MemberAdded:
    """The new membership; ``invite`` is the set-password path when the account has no password
    yet (a new account, or one made by an import), else ""; ``created``: the account is new."""

    membership: ProjectMembership
    invite: str
    created: bool


def member_add(
    *, project: Project, actor: AbstractBaseUser, identifier: str, role: str = Role.ANNOTATOR
) -> MemberAdded:
    """Add the user named by ``identifier`` (username or email) to the project as ``role``
    ("annotator" or "reviewer"), giving them the matching global role if they lack it. An unknown
    email creates an account and returns its invite path. Refused: an unknown username, a
    deactivated account that has a password, someone already a member."""
    if role not in Role.values:
        raise ProjectError(f"unknown member role {role!r}; expected one of {Role.values}")
    with transaction.atomic():
        user, created = _account_for(identifier)
        if not user.is_active and user.has_usable_password():
            raise ProjectError(f"the account {user.get_username()} is deactivated")
        if ProjectMembership.objects.filter(project=project, user=user).exists():
            raise ProjectError(f"{user.get_username()} is already a member of {project.slug}")
        membership = ProjectMembership.objects.create(
            project=project, user=user, role=role, added_by=actor
        )
        role_assign(user=user, role=MEMBERSHIP_ROLES[role])
        changes: dict[str, Any] = {"role": {"after": role}}
        if created:
            changes["account"] = {"after": "created", "email": user.email}
        _event(project, actor, Kind.MEMBER_ADDED, subject=user.get_username(), changes=changes)
        invite = "" if user.has_usable_password() else invite_path(user=user)
    return MemberAdded(membership=membership, invite=invite, created=created)


def _membership(project: Project, username: str) -> ProjectMembership:
    """The member's row, locked for the rest of the transaction; ProjectError if not a member."""
    membership = (
        ProjectMembership.objects.select_for_update(of=("self",))
        .select_related("user")
        .filter(project=project, user__username=username)
        .first()
    )
    if membership is None:
        raise ProjectError(f"{username!r} is not a member of {project.slug}")
    return membership


def member_remove(*, project: Project, actor: AbstractBaseUser, username: str) -> int:
    """Take ``username`` out of the project: their leases are released (returned: how many), their
    judgements stay (exports and agreement keep counting them)."""
    with transaction.atomic():
        membership = _membership(project, username)
        released = project_leases_release(project=project, user=membership.user)
        membership.delete()
        changes = {"role": {"before": membership.role}, "released_leases": released}
        _event(project, actor, Kind.MEMBER_REMOVED, subject=username, changes=changes)
    return released


def member_pause(*, project: Project, actor: AbstractBaseUser, username: str) -> int:
    """Pause an annotator: no new claims, their active leases released in the same transaction
    (returned: how many), judgements kept. The claim path locks the membership row, so a claim in
    flight finishes first and its lease is released here too."""
    with transaction.atomic():
        membership = _membership(project, username)
        if membership.role != Role.ANNOTATOR:
            raise ProjectError(f"{username} is a {membership.role}; only annotators are paused")
        if membership.paused_at is not None:
            raise ProjectError(f"{username} is already paused")
        membership.paused_at = timezone.now()
        membership.save(update_fields=["paused_at"])
        released = project_leases_release(project=project, user=membership.user)
        _event(
            project, actor, Kind.MEMBER_PAUSED, subject=username,
            changes={"released_leases": released},
        )  # fmt: skip
    return released


def member_resume(*, project: Project, actor: AbstractBaseUser, username: str) -> None:
    """Let a paused annotator claim pairs again."""
    with transaction.atomic():
        membership = _membership(project, username)
        if membership.paused_at is None:
            raise ProjectError(f"{username} is not paused")
        membership.paused_at = None
        membership.save(update_fields=["paused_at"])
        _event(project, actor, Kind.MEMBER_RESUMED, subject=username)


def member_invite(*, project: Project, actor: AbstractBaseUser, username: str) -> str:
    """A new invite path for a member whose account has no password yet (made by an email invite
    or by an import); audited. Refused for an account that already has a password."""
    with transaction.atomic():
        membership = _membership(project, username)
        if membership.user.has_usable_password():
            raise ProjectError(f"{username} already has a password; no invite is needed")
        _event(project, actor, Kind.INVITED, subject=username)
    return invite_path(user=membership.user)
