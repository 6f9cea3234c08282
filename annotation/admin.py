from django.contrib import admin

from annotation.models import (
    Assignment,
    ClusteringRun,
    Comparison,
    DatasetExport,
    ImportJob,
    Judgement,
    Project,
    ProjectMembership,
    Prompt,
    PromptCluster,
    Response,
)


class MembershipInline(admin.TabularInline):
    """Members in the admin (the project's People page is the audited way to change them)."""

    model = ProjectMembership
    fk_name = "project"
    extra = 0
    raw_id_fields = ("user", "added_by")


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = (
        "name", "slug", "overlap", "allow_ties", "allow_both_bad", "created_at", "archived_at"
    )  # fmt: skip
    prepopulated_fields = {"slug": ("name",)}
    inlines = (MembershipInline,)
    search_fields = ("name", "slug")


@admin.register(Prompt)
class PromptAdmin(admin.ModelAdmin):
    list_display = ("id", "project", "short_text", "cluster", "created_at")
    list_filter = ("project",)
    search_fields = ("text",)
    readonly_fields = ("content_hash",)

    @admin.display(description="text")
    def short_text(self, obj: Prompt) -> str:
        return obj.text[:80]


@admin.register(Response)
class ResponseAdmin(admin.ModelAdmin):
    list_display = ("id", "prompt_id", "model_name", "created_at")
    search_fields = ("text", "model_name")
    readonly_fields = ("content_hash",)


@admin.register(Comparison)
class ComparisonAdmin(admin.ModelAdmin):
    list_display = ("id", "project", "external_id", "gold", "created_at")
    list_filter = ("project",)
    raw_id_fields = ("prompt", "response_a", "response_b")
    readonly_fields = ("content_hash",)


@admin.register(Judgement)
class JudgementAdmin(admin.ModelAdmin):
    list_display = ("id", "comparison_id", "annotator", "choice", "strength", "shown_left")
    list_filter = ("choice", "comparison__project")
    raw_id_fields = ("comparison", "annotator")


@admin.register(Assignment)
class AssignmentAdmin(admin.ModelAdmin):
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
class ImportJobAdmin(admin.ModelAdmin):
    list_display = ("id", "project", "original_name", "status", "rows_total", "created_at")
    list_filter = ("status", "project")
    readonly_fields = ("errors", "result")


@admin.register(DatasetExport)
class DatasetExportAdmin(admin.ModelAdmin):
    """Exports are immutable: they can be looked at, not changed."""

    list_display = ("id", "project", "sha256", "n_pairs", "n_judgements", "created_at")
    list_filter = ("project",)

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(ClusteringRun)
class ClusteringRunAdmin(admin.ModelAdmin):
    list_display = ("id", "project", "status", "k", "silhouette", "n_prompts", "created_at")
    list_filter = ("status", "project")
    exclude = ("projection",)


@admin.register(PromptCluster)
class PromptClusterAdmin(admin.ModelAdmin):
    list_display = ("id", "run", "label", "name", "size", "share")
    list_filter = ("run__project",)
