"""The ML engineer's admin for training runs: a form with every recipe setting (help text, default,
validation by the recipe's dataclass), and the actions Launch, Cancel, Resume and Clone.

The form's settings depend on the kind; choosing another kind reloads the add page with ``?kind=``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html

from common.errors import ConcordError
from common.model_registry import registered_models
from training import services
from training.models import Checkpoint, DatasetSnapshot, RunEvent, TrainingRun

CONFIG_PREFIX = "cfg__"


def _config_fields(kind: str) -> list[dataclasses.Field]:
    from training.recipes.config import config_class

    return [
        f
        for f in dataclasses.fields(config_class(kind))
        if f.init and f.name not in services.MANAGED_FIELDS
    ]


def _form_field(spec: dataclasses.Field, current: Any) -> forms.Field:
    """A form field for one dataclass field: its type, default as initial, help text."""
    default = spec.default if spec.default is not dataclasses.MISSING else None
    annotation = spec.type if not isinstance(spec.type, str) else _resolve(spec.type)
    optional = default is None
    base = _base_type(annotation)
    help_text = f"{spec.metadata.get('help', '')} (default: {default!r})"
    common = {"required": False, "help_text": help_text, "initial": current}
    if base is bool:
        return forms.BooleanField(**common)
    if base is int:
        return forms.IntegerField(**common)
    if base is float:
        return forms.FloatField(**common)
    field = forms.CharField(**common, empty_value=None if optional else "")
    return field


def _resolve(text: str) -> Any:
    names = {"int": int, "float": float, "str": str, "bool": bool, "None": type(None)}
    parts = [p.strip() for p in text.split("|")]
    kinds = [names.get(p, str) for p in parts]
    return kinds[0] if len(kinds) == 1 else typing.Union[tuple(kinds)]  # noqa: UP007


def _base_type(annotation: Any) -> type:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if args else str
    return annotation if isinstance(annotation, type) else str


class TrainingRunForm(forms.ModelForm):
    """Run fields plus one field per recipe setting of the chosen kind."""

    base_model = forms.ChoiceField(help_text="Registry name of the model to train.")

    class Meta:
        model = TrainingRun
        fields = ["name", "kind", "base_model", "snapshot", "reward_model_run", "gpus"]

    def __init__(self, *args: Any, kind: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kind = kind
        if "kind" in self.fields:  # read-only (absent) once the run exists
            self.fields["kind"].initial = kind
            self.fields["kind"].widget.attrs["data-reload-kind"] = "1"
        if "base_model" in self.fields:
            self.fields["base_model"].choices = [
                (m.name, f"{m.name} ({m.family})") for m in registered_models()
            ]
        if "reward_model_run" in self.fields:
            self.fields["reward_model_run"].queryset = TrainingRun.objects.filter(
                kind="rm", status=TrainingRun.Status.SUCCEEDED
            )
        current = self.instance.config if self.instance.pk else {}
        self.config_specs = {f.name: f for f in _config_fields(kind)}
        for name, spec in self.config_specs.items():
            default = spec.default if spec.default is not dataclasses.MISSING else None
            self.fields[CONFIG_PREFIX + name] = _form_field(spec, current.get(name, default))

    def config_overrides(self) -> dict[str, Any]:
        """The settings that differ from the recipe's defaults (what the run stores)."""
        overrides = {}
        for name, spec in self.config_specs.items():
            value = self.cleaned_data.get(CONFIG_PREFIX + name)
            default = spec.default if spec.default is not dataclasses.MISSING else None
            if isinstance(self.fields[CONFIG_PREFIX + name], forms.BooleanField):
                value = bool(value)
            elif value is None or value == "":
                continue
            if value != default:
                overrides[name] = value
        return overrides

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if cleaned.get("kind") and cleaned["kind"] != self.kind:
            raise forms.ValidationError(
                "The kind changed: reload the form for its settings (choose the kind again)."
            )
        from training.recipes.config import ConfigError

        try:
            services.run_models_check(
                kind=self.kind,
                base_model=cleaned.get("base_model") or self.instance.base_model,
                reward_model_run=cleaned.get("reward_model_run"),
            )
        except ConcordError as exc:
            self.add_error(None, str(exc))
        try:
            self.validated_config = services.config_overrides_validate(
                self.kind, self.config_overrides()
            )
        except ConfigError as exc:
            name = str(exc).split(":", 1)[0]
            target = CONFIG_PREFIX + name if CONFIG_PREFIX + name in self.fields else None
            self.add_error(target, str(exc))
        return cleaned


class CheckpointInline(admin.TabularInline):
    model = Checkpoint
    extra = 0
    can_delete = False
    fields = readonly_fields = ("step", "path", "metrics", "created_at")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class RunEventInline(admin.TabularInline):
    model = RunEvent
    extra = 0
    can_delete = False
    fields = readonly_fields = ("created_at", "action", "user", "detail")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(TrainingRun)
class TrainingRunAdmin(admin.ModelAdmin):
    form = TrainingRunForm
    list_display = (
        "id", "name", "kind", "base_model", "status", "progress", "heartbeat_at", "created_by",
        "monitor",
    )  # fmt: skip
    list_filter = ("status", "kind")
    search_fields = ("name",)
    actions = ["launch", "cancel", "resume", "clone_with_changes"]
    inlines = [CheckpointInline, RunEventInline]
    readonly_fields = (
        "status", "step", "total_steps", "heartbeat_at", "attempts", "worker", "error",
        "output_dir", "created_by", "created_at", "started_at", "finished_at", "summary",
    )  # fmt: skip

    class Media:
        js = ("training/run_form.js",)

    def _kind(self, request: HttpRequest, obj: TrainingRun | None) -> str:
        if obj is not None:
            return obj.kind
        kind = request.GET.get("kind") or request.POST.get("kind") or "dpo"
        return kind if kind in TrainingRun.Kind.values else "dpo"

    def get_form(self, request: HttpRequest, obj: TrainingRun | None = None, **kwargs: Any):
        # The settings fields are added per kind in the form's __init__, not model fields: let the
        # form's Meta pick the model fields instead of the fieldsets.
        kwargs["fields"] = None
        base = super().get_form(request, obj, **kwargs)
        kind = self._kind(request, obj)

        class KindForm(base):  # type: ignore[valid-type, misc]
            def __init__(self, *args: Any, **kw: Any) -> None:
                super().__init__(*args, kind=kind, **kw)

        return KindForm

    def get_fieldsets(self, request: HttpRequest, obj: TrainingRun | None = None):
        kind = self._kind(request, obj)
        config = [CONFIG_PREFIX + f.name for f in _config_fields(kind)]
        fieldsets = [
            (
                None,
                {"fields": ["name", "kind", "base_model", "snapshot", "reward_model_run", "gpus"]},
            ),
            (f"{TrainingRun.Kind(kind).label} settings", {"fields": config}),
        ]
        if obj is not None:
            fieldsets.append(("State", {"fields": list(self.readonly_fields)}))
        return fieldsets

    def get_readonly_fields(self, request: HttpRequest, obj: TrainingRun | None = None):
        if obj is not None and obj.status != TrainingRun.Status.DRAFT:
            # Only drafts can change; a launched run keeps the settings it ran with.
            return [*self.readonly_fields, "name", "kind", "base_model", "snapshot",
                    "reward_model_run", "gpus"]  # fmt: skip
        if obj is not None:
            return [*self.readonly_fields, "kind"]
        return ()

    def get_inlines(self, request: HttpRequest, obj: TrainingRun | None):
        return self.inlines if obj is not None else []

    def save_model(
        self, request: HttpRequest, obj: TrainingRun, form: TrainingRunForm, change: bool
    ):
        if change:
            if obj.status == TrainingRun.Status.DRAFT:
                obj.config = form.validated_config
                obj.save()
            return
        created = services.run_create(
            name=obj.name,
            kind=form.kind,
            base_model=form.cleaned_data["base_model"],
            snapshot=obj.snapshot,
            config=form.validated_config,
            reward_model_run=obj.reward_model_run,
            gpus=obj.gpus,
            created_by=request.user,
        )
        obj.pk = created.pk
        obj.__dict__.update({k: v for k, v in created.__dict__.items() if not k.startswith("_")})

    @admin.display(description="progress")
    def progress(self, run: TrainingRun) -> str:
        return f"{run.step}/{run.total_steps or '?'} ({run.progress_percent}%)"

    @admin.display(description="monitor")
    def monitor(self, run: TrainingRun) -> str:
        return format_html(
            '<a href="{}">charts</a>', reverse("monitoring:run-detail", args=[run.pk])
        )

    def _each(self, request: HttpRequest, queryset: QuerySet, action, verb: str) -> None:
        done = 0
        for run in queryset:
            try:
                action(run=run, user=request.user)
                done += 1
            except ConcordError as exc:
                self.message_user(request, str(exc), messages.WARNING)
        if done:
            self.message_user(request, f"{verb} {done} run(s).", messages.SUCCESS)

    @admin.action(description="Launch on the gpu queue")
    def launch(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._each(request, queryset, services.run_launch, "Launched")

    @admin.action(description="Cancel (running runs stop at their next step)")
    def cancel(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._each(request, queryset, services.run_cancel, "Cancelled")

    @admin.action(description="Resume from the last checkpoint")
    def resume(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._each(request, queryset, services.run_resume, "Resumed")

    @admin.action(description="Clone with changes (opens the copy)")
    def clone_with_changes(self, request: HttpRequest, queryset: QuerySet):
        clones = [services.run_clone(run=run, user=request.user) for run in queryset]
        if len(clones) == 1:
            return HttpResponseRedirect(
                reverse("admin:training_trainingrun_change", args=[clones[0].pk])
            )
        self.message_user(request, f"Cloned {len(clones)} run(s) as drafts.", messages.SUCCESS)
        return None


@admin.register(DatasetSnapshot)
class DatasetSnapshotAdmin(admin.ModelAdmin):
    list_display = ("id", "__str__", "sha", "created_at")
    raw_id_fields = ("export",)

    @admin.display(description="SHA-256")
    def sha(self, snapshot: DatasetSnapshot) -> str:
        return snapshot.export.sha256[:16]
