"""The annotation app in the Django admin: every write goes through a service, or there is none.

- Projects: settings through ``project_settings_check`` (the form), ``project_create`` and
  ``project_update`` (audited; guidelines versioned); archive / unarchive as actions; no delete (a
  project's judgements are never lost: archive it). Members (the inline): an added row goes through
  ``member_add``, a deleted one through ``member_remove``; existing rows are read only (pause, resume
  and roles live on the People page).
- Cluster names through ``cluster_rename``; nothing else of a cluster changes.
- Everything else is read only: prompts, responses and comparisons come from imports, judgements are
  annotators' work, assignments are the work queue's leases, import jobs, exports and clustering runs
  are written by their jobs.

A service's refusal shows on the form when it names a field (project settings), else as an error
message on the same page; either way the whole submission is rolled back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from annotation.forms import AspectsField, ProjectForm
from annotation.models import (
    Assignment,
    ClusteringRun,
    Comparison,
    DatasetExport,
    ExportJob,
    ImportJob,
    Judgement,
    Project,
    ProjectMembership,
    Prompt,
    PromptCluster,
    Response,
)
from annotation.services.clustering import cluster_rename
from annotation.services.projects import (
    PROJECT_FIELDS,
    ProjectError,
    member_add,
    member_remove,
    project_archive,
    project_create,
    project_settings_check,
    project_unarchive,
    project_update,
)
from common.errors import ConcordError


class ServiceWritesAdmin(admin.ModelAdmin):
    """A model admin whose saves call services: a ConcordError they raise rolls the whole
    submission back (the admin's own transaction) and comes back as an error message."""

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except ConcordError as exc:
            self.message_user(request, f"Nothing was saved: {exc}", messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())


class ReadOnlyAdmin(admin.ModelAdmin):
    """Look, never write: no add, change or delete (the change page shows the values read only)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class MembershipInline(admin.TabularInline):
    """Members: add (``member_add``: the global role, the audit row) and remove (``member_remove``:
    leases released, judgements kept); pause, resume and roles on the project's People page."""

    model = ProjectMembership
    fk_name = "project"
    extra = 0
    fields = ("user", "role", "paused_at", "added_at", "added_by")
    readonly_fields = ("paused_at", "added_at", "added_by")
    raw_id_fields = ("user",)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ProjectAdminForm(forms.ModelForm):
    """A project's settings; the service's validation runs in ``clean`` so that its refusal shows
    on the field it names and nothing is saved."""

    rating_aspects = AspectsField(
        required=False, help_text=ProjectForm.base_fields["rating_aspects"].help_text
    )

    class Meta:
        model = Project
        fields = PROJECT_FIELDS

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.errors:  # a field already refused: the service would only repeat it
            return cleaned
        settings = {name: cleaned[name] for name in PROJECT_FIELDS if name in cleaned}
        try:
            project_settings_check(project=self.instance, **settings)
        except ProjectError as exc:
            if not exc.field_errors:
                self.add_error(None, str(exc))
            for field, errors in exc.field_errors.items():
                self.add_error(field if field in self.fields else None, errors)
        return cleaned


@admin.register(Project)
class ProjectAdmin(ServiceWritesAdmin):
    form = ProjectAdminForm
    list_display = (
        "name", "slug", "overlap", "allow_ties", "allow_both_bad", "created_at", "archived_at"
    )  # fmt: skip
    prepopulated_fields = {"slug": ("name",)}
    inlines = (MembershipInline,)
    search_fields = ("name", "slug")
    raw_id_fields = ("suggestion_judge",)
    readonly_fields = ("created_by", "created_at", "archived_at")
    actions = ("archive", "unarchive")

    def get_fields(self, request: HttpRequest, obj: Project | None = None) -> list[str]:
        settings = [
            name for name in PROJECT_FIELDS if obj is not None or name != "suggestion_judge"
        ]
        return [*settings, *self.readonly_fields]  # a new project has no judge to suggest yet

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # deleting would take its judgements with it: archive instead

    def save_model(self, request: HttpRequest, obj: Project, form: Any, change: bool) -> None:
        settings = {name: form.cleaned_data[name] for name in PROJECT_FIELDS if name in form.fields}
        if change:
            project_update(project=obj, actor=request.user, **settings)
        else:
            obj.pk = project_create(actor=request.user, **settings).pk
            obj._state.adding = False  # the inline's rows now belong to the saved project
        obj.refresh_from_db()

    def save_formset(
        self, request: HttpRequest, form: Any, formset: BaseInlineFormSet, change: bool
    ) -> None:
        if formset.model is not ProjectMembership:
            super().save_formset(request, form, formset, change)
            return
        project = form.instance
        formset.save(commit=False)  # fills new_objects and deleted_objects; writes nothing
        for membership in formset.deleted_objects:
            member_remove(
                project=project, actor=request.user, username=membership.user.get_username()
            )
        added = []
        for membership in formset.new_objects:
            user = membership.user
            result = member_add(
                project=project, actor=request.user, identifier=user.get_username(),
                role=membership.role,
            )  # fmt: skip
            if result.membership.user_id != user.pk:  # a username that reads as an email
                raise ProjectError(f"add {user.get_username()} on the project's People page")
            added.append(result.membership)
        formset.new_objects = added

    def _each(
        self, request: HttpRequest, queryset: QuerySet, service: Callable[..., Project], verb: str
    ) -> None:
        done = 0
        for project in queryset.order_by("pk"):
            try:
                service(project=project, actor=request.user)
                done += 1
            except ProjectError as exc:
                self.message_user(request, str(exc), messages.WARNING)
        if done:
            self.message_user(request, f"{verb} {done} project(s).", messages.SUCCESS)

    @admin.action(description="Archive (no new claims, leases released, data kept)")
    def archive(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._each(request, queryset, project_archive, "Archived")

    @admin.action(description="Unarchive (claims resume)")
    def unarchive(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._each(request, queryset, project_unarchive, "Unarchived")


@admin.register(Prompt)
class PromptAdmin(ReadOnlyAdmin):
    list_display = ("id", "project", "short_text", "cluster", "created_at")
    list_filter = ("project",)
    search_fields = ("text",)

    @admin.display(description="text")
    def short_text(self, obj: Prompt) -> str:
        return obj.text[:80]


@admin.register(Response)
class ResponseAdmin(ReadOnlyAdmin):
    list_display = ("id", "prompt_id", "model_name", "created_at")
    search_fields = ("text", "model_name")


@admin.register(Comparison)
class ComparisonAdmin(ReadOnlyAdmin):
    list_display = ("id", "project", "external_id", "gold", "created_at")
    list_filter = ("project",)
    raw_id_fields = ("prompt", "response_a", "response_b")


@admin.register(Judgement)
class JudgementAdmin(ReadOnlyAdmin):
    """Annotators' work: never edited nor deleted here (an annotator edits their own, in the app)."""

    list_display = ("id", "comparison_id", "annotator", "choice", "strength", "shown_left")
    list_filter = ("choice", "comparison__project")
    raw_id_fields = ("comparison", "annotator")


@admin.register(Assignment)
class AssignmentAdmin(ReadOnlyAdmin):
    """The work queue's leases: claimed, judged, skipped and expired by the labelling services."""

    list_display = (
        "id",
        "comparison_id",
        "annotator",
        "kind",
        "status",
        "shown_left",
        "expires_at",
    )
    list_filter = ("kind", "status", "comparison__project")
    raw_id_fields = ("comparison", "annotator")


@admin.register(ImportJob)
class ImportJobAdmin(ReadOnlyAdmin):
    """Uploads start on the lead's page (or the API); the worker writes the job's progress."""

    list_display = ("id", "project", "original_name", "status", "rows_total", "created_at")
    list_filter = ("status", "project")


@admin.register(ExportJob)
class ExportJobAdmin(ReadOnlyAdmin):
    """Exports are asked for on the lead's page (or the API); the worker writes the job's progress
    and links the export it made."""

    list_display = ("id", "project", "status", "build_hf", "export", "created_at")
    list_filter = ("status", "project")


@admin.register(DatasetExport)
class DatasetExportAdmin(ReadOnlyAdmin):
    """Exports are immutable: they can be looked at, not changed."""

    list_display = ("id", "project", "sha256", "n_pairs", "n_judgements", "created_at")
    list_filter = ("project",)


@admin.register(ClusteringRun)
class ClusteringRunAdmin(ReadOnlyAdmin):
    """Runs start on the project's clusters page; the worker writes them."""

    list_display = ("id", "project", "status", "k", "silhouette", "n_prompts", "created_at")
    list_filter = ("status", "project")
    exclude = ("projection",)


@admin.register(PromptCluster)
class PromptClusterAdmin(ServiceWritesAdmin):
    """A cluster's name is the one thing to change (``cluster_rename``); the rest is the run's."""

    list_display = ("id", "run", "label", "name", "size", "share")
    list_filter = ("run__project",)
    fields = ("run", "label", "name", "size", "share", "top_terms", "central_prompt_ids")
    readonly_fields = ("run", "label", "size", "share", "top_terms", "central_prompt_ids")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: PromptCluster, form: Any, change: bool) -> None:
        cluster_rename(cluster=obj, name=form.cleaned_data["name"])
