"""The ML engineer's admin for training runs: choose the kind first, then a form typed from that
recipe's dataclass (grouped by concern, filled from a preset), saved and launched through the
services (audited); the actions Launch, Cancel, Resume and Clone; the dataset snapshots.

Long module: the form typed from the dataclasses, the kind picker, the presets and the run
actions share the same few helpers; split them when a second admin needs the typed fields.

URLs (all under /admin/training/trainingrun/):
- ``add/``: the kind picker (one link per kind and preset).
- ``add/?kind=ppo&preset=gpu&snapshot=3``: the form for that kind, filled from the preset, with the
  snapshot chosen. ``add/?export=7`` (the lead's "Train on this export") takes that export's snapshot.
- ``<id>/change/``: a draft's form (the kind is fixed); "Save and launch" queues it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import F, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from annotation.models import DatasetExport
from common.errors import ConcordError
from common.model_registry import registered_models
from training import services
from training.models import (
    Checkpoint,
    DatasetSnapshot,
    RunEvent,
    TrainingRun,
)

# training.recipes (pure, torch-free, but a "torch package" for tests/test_architecture.py) is
# imported inside the functions that need it, as web code must.
CONFIG_PREFIX = "cfg__"
RUN_FIELDS = ["name", "kind", "base_model", "snapshot", "reward_model_run", "gpus"]


def _kind_spec(kind: str) -> Any:
    """The registry's KindSpec of ``kind`` (training.recipes.kinds)."""
    from training.recipes.kinds import kind_spec

    return kind_spec(kind)


def _specs(kind: str) -> list[Any]:
    """The settable, typed fields (FieldSpec) of ``kind``'s dataclass, less those Concord fills."""
    from training.recipes.config import config_fields
    from training.recipes.kinds import config_class

    return [s for s in config_fields(config_class(kind)) if s.name not in services.MANAGED_FIELDS]


def _value_text(value: Any) -> str:
    if isinstance(value, tuple | list):
        return ", ".join(map(str, value))
    return str(value)


class ConfigTupleField(forms.CharField):
    """A tuple setting as text: a fixed-length one as values separated by commas ("0.1, 1.0"),
    one of any length (texts) one per line. Empty means None where None is allowed."""

    def __init__(self, *, spec: Any, **kwargs: Any) -> None:
        self.spec = spec
        widget = forms.TextInput() if spec.length else forms.Textarea(attrs={"rows": 4})
        super().__init__(widget=widget, **kwargs)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, tuple | list):
            return (", " if self.spec.length else "\n").join(str(v) for v in value)
        return value

    def to_python(self, value: Any) -> tuple | None:
        text = (super().to_python(value) or "").strip()
        if not text:
            if self.spec.optional:
                return None
            if self.spec.length is None:
                return ()
            raise ValidationError(self.error_messages["required"], code="required")
        if self.spec.length is None:
            parts = [line.strip() for line in text.splitlines() if line.strip()]
        else:
            parts = [part.strip() for part in text.strip("()[] ").split(",")]
        if self.spec.length is not None:
            example = ", ".join(map(str, self.spec.default or [1] * self.spec.length))
            wanted = f"{self.spec.length} numbers separated by commas, e.g. {example}"
            if len(parts) != self.spec.length:
                raise ValidationError(f"{wanted}; got {text!r}", code="invalid")
        else:
            wanted = f"values of type {self.spec.items.__name__}, one per line"
        try:
            return tuple(self.spec.items(part) for part in parts)
        except ValueError:
            raise ValidationError(f"{wanted}; got {text!r}", code="invalid") from None


def config_form_field(spec: Any) -> forms.Field:
    """The form field of one dataclass field (a training.recipes.config.FieldSpec): its type's
    widget, its help, its default named."""
    default = _value_text(spec.default) or "none"
    empty = " Leave empty for None." if spec.optional else ""
    any_length = spec.type is tuple and spec.length is None  # empty: no items, a valid value
    common: dict[str, Any] = {
        "label": spec.name,
        "help_text": f"{spec.help}. Default: {default}.{empty}",
        "required": not spec.optional and not any_length,
    }
    if spec.type is bool:
        return forms.BooleanField(**{**common, "required": False})
    if spec.choices:
        return forms.ChoiceField(choices=[(c, c) for c in spec.choices], **common)
    if spec.type is int:
        return forms.IntegerField(**common)
    if spec.type is float:
        return forms.FloatField(**common)
    if spec.type is tuple:
        return ConfigTupleField(spec=spec, **common, empty_value=None)
    return forms.CharField(**common, empty_value=None if spec.optional else "")


class RewardModelChoiceField(forms.ModelChoiceField):
    """Succeeded reward-model runs, by name, kind and held-out accuracy."""

    def label_from_instance(self, run: TrainingRun) -> str:
        accuracy = (run.summary or {}).get("eval/accuracy")
        if isinstance(accuracy, int | float):
            return f"{run.name} · {run.get_kind_display()} #{run.pk} · eval accuracy {accuracy:.3f}"
        return f"{run.name} · {run.get_kind_display()} #{run.pk} · no eval accuracy"


def succeeded_reward_models() -> QuerySet[TrainingRun]:
    """Succeeded reward-model runs, newest first."""
    return TrainingRun.objects.filter(
        kind=TrainingRun.Kind.RM, status=TrainingRun.Status.SUCCEEDED
    ).order_by(F("finished_at").desc(nulls_last=True), "-pk")


def reward_model_note(kind: str, keep: dict[str, str]) -> dict[str, Any] | None:
    """What the kind card and the form say about an RL kind's reward model: {required, text,
    train_url (the reward model's CPU preset, keeping ``keep``'s query values, when none has
    succeeded yet; else "")}; None for a kind that takes none."""
    spec = _kind_spec(kind)
    if not spec.takes_reward_model:
        return None
    label = spec.label
    required = spec.needs_reward_model
    text = (
        f"{label} needs a succeeded reward-model run to score its rollouts"
        if required
        else f"{label} scores with verifiable rewards, a succeeded reward-model run, or both"
    )
    if succeeded_reward_models().exists():
        return {"required": required, "text": text + ".", "train_url": ""}
    query = urlencode({**keep, "kind": TrainingRun.Kind.RM.value, "preset": "cpu"})
    train_url = f"{reverse('admin:training_trainingrun_add')}?{query}"
    return {
        "required": required,
        "text": text + ": none has succeeded yet.",
        "train_url": train_url,
    }


def reward_model_field(kind: str, run: TrainingRun) -> RewardModelChoiceField:
    """The reward-model select of an RL kind: required for PPO and RLOO, optional for GRPO; on a
    new run the newest succeeded reward model comes chosen, so the form saves at its defaults
    (for GRPO leave it empty to score with the verifiable rewards alone)."""
    queryset = succeeded_reward_models()
    required = _kind_spec(kind).needs_reward_model
    initial = run.reward_model_run_id
    if run.pk is None:
        newest = queryset.first()
        initial = newest.pk if newest is not None else None
    help_text = (
        "A succeeded reward-model run (the newest comes chosen); its final model scores the "
        "rollouts."
    )
    if not queryset.exists():
        help_text += (
            " None has succeeded yet: train a reward model first (the note above links to it)."
        )
    if not required:
        help_text += (
            " Optional for GRPO: empty, the verifiable rewards (Algorithm: rewards) score alone;"
            " both, their weighted sum (reward_model_weight)."
        )
    return RewardModelChoiceField(
        queryset=queryset,
        label="Reward model",
        help_text=help_text,
        initial=initial,
        required=required,
    )


class TrainingRunForm(forms.ModelForm):
    """Run fields plus one typed field per setting of the form's kind (``cfg__<name>``)."""

    base_model = forms.ChoiceField(help_text="Registry name of the model to train.")

    class Meta:
        model = TrainingRun
        fields = RUN_FIELDS

    def __init__(
        self,
        *args: Any,
        kind: str,
        preset: dict[str, Any] | None = None,
        base_model: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.kind = kind
        self.editable = self.instance.pk is None or self.instance.status == TrainingRun.Status.DRAFT
        if "kind" in self.fields:  # absent (read-only) once the run exists
            self.fields["kind"].initial = kind
            self.fields["kind"].widget.attrs["data-reload-kind"] = "1"
            reloads = "Choosing another kind reloads the form with that kind's settings."
            self.fields["kind"].help_text = reloads
        if "base_model" in self.fields:
            use = "reward-model" if kind == "rm" else "policy"
            choices = [(m.name, f"{m.name} ({m.family})") for m in registered_models()
                       if use in m.uses]  # fmt: skip
            self.fields["base_model"].choices = choices
            if self.instance.pk is None:  # the preset's base model for the kind, if it names one
                self.fields["base_model"].initial = (
                    base_model or settings.CONCORD_DEFAULT_POLICY_MODEL
                )
        if "snapshot" in self.fields:
            self.fields["snapshot"].queryset = DatasetSnapshot.objects.select_related(
                "export__project"
            )
            widget = self.fields["snapshot"].widget
            # A plain select: snapshots are made from exports ("Train on this export"), not here.
            for action in ("add", "change", "delete"):
                setattr(widget, f"can_{action}_related", False)
        if "gpus" in self.fields:
            self.fields["gpus"].label = "GPUs"
        if "reward_model_run" in self.fields:
            if _kind_spec(kind).takes_reward_model:
                self.fields["reward_model_run"] = reward_model_field(kind, self.instance)
            else:
                del self.fields["reward_model_run"]
        current = dict(self.instance.config) if self.instance.pk else dict(preset or {})
        self.config_specs = {spec.name: spec for spec in _specs(kind)}
        for name, spec in self.config_specs.items():
            field = config_form_field(spec)
            field.initial = current.get(name, spec.default)
            field.disabled = not self.editable
            self.fields[CONFIG_PREFIX + name] = field

    def config_values(self) -> dict[str, Any]:
        """Every setting as the form holds it (the service resolves and stores all of them)."""
        return {name: self.cleaned_data.get(CONFIG_PREFIX + name) for name in self.config_specs}

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if not self.editable:
            raise ValidationError(
                f"Run #{self.instance.pk} is {self.instance.get_status_display().lower()}: only a "
                "draft can be changed. Clone it to train again with other settings."
            )
        posted_kind = cleaned.get("kind")
        if posted_kind and posted_kind != self.kind:
            raise ValidationError(
                f"This form holds {_kind_spec(self.kind).label} settings but the kind sent "
                f"is {_kind_spec(posted_kind).label}: nothing was saved. Choose the kind "
                "again; the form reloads with that kind's settings.",
                code="kind_mismatch",
            )
        if self.errors or "snapshot" not in cleaned:
            return cleaned  # the settings are checked once the fields they depend on are valid
        from training.recipes.config import ConfigError

        base_model = cleaned.get("base_model") or self.instance.base_model
        reward_model_run = cleaned.get("reward_model_run")
        try:
            services.run_models_check(
                kind=self.kind, base_model=base_model, reward_model_run=reward_model_run
            )
            self.resolved_config = services.run_config_validate(
                kind=self.kind,
                config=self.config_values(),
                base_model=base_model,
                snapshot=cleaned["snapshot"],
                reward_model_run=reward_model_run,
                output_dir=self.instance.output_dir,
            )
        except ConfigError as exc:  # on its setting, or on a run field it names (the snapshot)
            target = CONFIG_PREFIX + (exc.field or "")
            if target not in self.fields:
                target = exc.field if exc.field in self.fields else None
            self.add_error(target, str(exc))
        except ConcordError as exc:  # the base model or the reward-model run does not fit
            self.add_error(None, str(exc))
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


def _kind_of(request: HttpRequest) -> str | None:
    from training.recipes.kinds import KINDS

    kind = request.GET.get("kind", "")
    return kind if kind in KINDS else None


def _preset_of(request: HttpRequest) -> str:
    from training.recipes.presets import DEFAULT_PRESET, PRESETS

    name = request.GET.get("preset", DEFAULT_PRESET)
    return name if name in {p.name for p in PRESETS} else DEFAULT_PRESET


@admin.register(TrainingRun)
class TrainingRunAdmin(admin.ModelAdmin):
    form = TrainingRunForm
    change_form_template = "admin/training/trainingrun/run_form.html"
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
        js = ("common/kind_reload.js",)

    # --- Kind first: the picker, then a form that holds one kind's settings -----------------------

    def add_view(self, request: HttpRequest, form_url: str = "", extra_context=None):
        export_id = request.GET.get("export", "")
        if export_id.isdigit():
            # "Train on this export": its snapshot (made once; an export never changes).
            export = get_object_or_404(DatasetExport, pk=int(export_id))
            snapshot = services.snapshot_for(export=export)
            query = {k: v for k, v in request.GET.items() if k != "export"}
            query["snapshot"] = str(snapshot.pk)
            return HttpResponseRedirect(f"{request.path}?{urlencode(query)}")
        if _kind_of(request) is None:
            return self.kind_picker_view(request)
        return super().add_view(request, form_url, extra_context)

    def kind_picker_view(self, request: HttpRequest) -> HttpResponse:
        """One card per kind with a link per preset; a POST without a kind is refused here."""
        from training.recipes.kinds import KINDS
        from training.recipes.presets import PRESETS

        if not self.has_add_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            messages.error(request, "Choose the kind of run first: nothing was saved.")
        keep = {k: request.GET[k] for k in ("snapshot",) if request.GET.get(k, "").isdigit()}
        kinds = [
            {
                "value": kind.name,
                "label": kind.label,
                "about": (kind.config_class.__doc__ or "").strip().splitlines()[0],
                "reward_model": reward_model_note(kind.name, keep),
                "presets": [
                    {
                        "label": preset.label,
                        "description": preset.description,
                        "url": "?" + urlencode({**keep, "kind": kind.name, "preset": preset.name}),
                    }
                    for preset in PRESETS
                ],
            }
            for kind in KINDS.values()
        ]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Add training run: choose its kind",
            "kinds": kinds,
            "snapshot": DatasetSnapshot.objects.filter(pk=keep.get("snapshot") or None).first(),
        }
        return TemplateResponse(request, "admin/training/trainingrun/kind_picker.html", context)

    def _kind(self, request: HttpRequest, obj: TrainingRun | None) -> str:
        return obj.kind if obj is not None else (_kind_of(request) or "dpo")

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        initial = super().get_changeform_initial_data(request)
        initial.pop("preset", None)
        return initial

    def get_form(self, request: HttpRequest, obj: TrainingRun | None = None, **kwargs: Any):
        # The settings fields are added per kind in the form's __init__, not model fields: let the
        # form's Meta pick the model fields instead of the fieldsets.
        kwargs["fields"] = None
        base = super().get_form(request, obj, **kwargs)
        kind = self._kind(request, obj)
        preset = base_model = None
        if obj is None:
            from training.recipes.presets import preset_get, preset_values

            preset = preset_values(_preset_of(request), kind)
            base_model = preset_get(_preset_of(request)).base_model(kind)

        class KindForm(base):  # type: ignore[valid-type, misc]
            def __init__(self, *args: Any, **kw: Any) -> None:
                super().__init__(*args, kind=kind, preset=preset, base_model=base_model, **kw)

        return KindForm

    def get_fieldsets(self, request: HttpRequest, obj: TrainingRun | None = None):
        kind = self._kind(request, obj)
        names = [spec.name for spec in _specs(kind)]
        spec = _kind_spec(kind)
        run_fields = [f for f in RUN_FIELDS if f != "reward_model_run" or spec.takes_reward_model]
        fieldsets: list[tuple[str | None, dict[str, Any]]] = [(None, {"fields": run_fields})]
        for title, is_open, help_text, fields in spec.form_sections(names):
            fieldsets.append(
                (
                    title,
                    {
                        "fields": [CONFIG_PREFIX + n for n in fields],
                        "description": help_text,
                        "classes": [] if is_open else ["collapse"],
                    },
                )
            )
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

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        from training.recipes.presets import PRESETS

        kind = self._kind(request, obj)
        spec = _kind_spec(kind)
        context["run_kind"] = {"value": spec.name, "label": spec.label}
        if obj is None or obj.status == TrainingRun.Status.DRAFT:
            keep = {k: v for k, v in request.GET.items() if k == "snapshot"}
            context["reward_model"] = reward_model_note(kind, keep)
        context["can_launch"] = (
            self.has_add_permission(request)
            if obj is None
            else obj.status == TrainingRun.Status.DRAFT and self.has_change_permission(request, obj)
        )
        if add:
            keep = {k: v for k, v in request.GET.items() if k in ("snapshot", "kind")}
            current = _preset_of(request)
            context["presets"] = [
                {
                    "label": p.label,
                    "description": p.description,
                    "url": "?" + urlencode({**keep, "preset": p.name}),
                    "current": p.name == current,
                }
                for p in PRESETS
            ]
            context["picker_url"] = "?" + urlencode(
                {k: v for k, v in request.GET.items() if k == "snapshot"}
            )
        return super().render_change_form(request, context, add, change, form_url, obj)

    # --- Writes go through the services (audited) -------------------------------------------------

    def save_form(self, request: HttpRequest, form: TrainingRunForm, change: bool) -> TrainingRun:
        data = form.cleaned_data
        fields = {
            "name": data["name"],
            "base_model": data["base_model"],
            "snapshot": data["snapshot"],
            "reward_model_run": data.get("reward_model_run"),
            "gpus": data["gpus"],
            "config": form.config_values(),
        }
        if change:
            return services.run_update(run=form.instance, user=request.user, **fields)
        return services.run_create(kind=form.kind, created_by=request.user, **fields)

    def save_model(self, request: HttpRequest, obj: TrainingRun, form: Any, change: bool) -> None:
        """Nothing left to do: save_form wrote the run through the services."""

    def save_related(self, request: HttpRequest, form: Any, formsets: Sequence, change: bool):
        for formset in formsets:  # the read-only inlines: checkpoints and events
            self.save_formset(request, form, formset, change=change)

    def _launch_after_save(self, request: HttpRequest, run: TrainingRun) -> HttpResponse:
        try:
            services.run_launch(run=run, user=request.user)
        except ConcordError as exc:
            self.message_user(request, str(exc), messages.WARNING)
        else:
            self.message_user(
                request,
                f"Saved and launched run #{run.pk}: queued on the gpu queue.",
                messages.SUCCESS,
            )
        return HttpResponseRedirect(reverse("admin:training_trainingrun_change", args=[run.pk]))

    def response_add(self, request: HttpRequest, obj: TrainingRun, post_url_continue=None):
        if "_launch" in request.POST:
            return self._launch_after_save(request, obj)
        return super().response_add(request, obj, post_url_continue)

    def response_change(self, request: HttpRequest, obj: TrainingRun):
        if "_launch" in request.POST:
            return self._launch_after_save(request, obj)
        return super().response_change(request, obj)

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

    def has_delete_permission(self, request: HttpRequest, obj: TrainingRun | None = None) -> bool:
        """No delete for a run the services would refuse (queued, running, a reward model in
        use): the admin offers no button and its confirmation page lists the run as not allowed."""
        allowed = super().has_delete_permission(request, obj)
        return allowed and (obj is None or not services.run_deletable(obj))

    def delete_model(self, request: HttpRequest, obj: TrainingRun) -> None:
        services.run_delete(run=obj, user=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        for run in queryset:
            services.run_delete(run=run, user=request.user)

    @admin.action(description="Clone with changes (opens the copy)")
    def clone_with_changes(self, request: HttpRequest, queryset: QuerySet):
        clones = [services.run_clone(run=run, user=request.user) for run in queryset]
        if len(clones) == 1:
            return HttpResponseRedirect(
                reverse("admin:training_trainingrun_change", args=[clones[0].pk])
            )
        self.message_user(request, f"Cloned {len(clones)} run(s) as drafts.", messages.SUCCESS)
        return None


class SnapshotForm(forms.ModelForm):
    export = forms.ModelChoiceField(
        queryset=DatasetExport.objects.select_related("project").order_by("-created_at"),
        help_text="The frozen export the runs train on (one snapshot per export).",
    )

    class Meta:
        model = DatasetSnapshot
        fields = ["export", "name"]


@admin.register(DatasetSnapshot)
class DatasetSnapshotAdmin(admin.ModelAdmin):
    form = SnapshotForm
    list_display = ("id", "__str__", "sha", "created_at", "train")
    list_select_related = ("export__project",)

    # --- Writes go through the services --------------------------------------------------------

    def get_readonly_fields(self, request: HttpRequest, obj: DatasetSnapshot | None = None):
        return ("export",) if obj is not None else ()

    def save_model(
        self, request: HttpRequest, obj: DatasetSnapshot, form: Any, change: bool
    ) -> None:
        if change:
            services.snapshot_rename(snapshot=obj, name=form.cleaned_data["name"])
        else:
            obj.pk = services.snapshot_for(
                export=form.cleaned_data["export"], name=form.cleaned_data["name"]
            ).pk

    def has_delete_permission(self, request: HttpRequest, obj: DatasetSnapshot | None = None):
        """No delete for a snapshot runs train on (the services refuse it too)."""
        allowed = super().has_delete_permission(request, obj)
        return allowed and (obj is None or not obj.runs.exists())

    def delete_model(self, request: HttpRequest, obj: DatasetSnapshot) -> None:
        services.snapshot_delete(snapshot=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        for snapshot in queryset:
            services.snapshot_delete(snapshot=snapshot)

    @admin.display(description="SHA-256")
    def sha(self, snapshot: DatasetSnapshot) -> str:
        return snapshot.export.sha256[:16]

    @admin.display(description="train")
    def train(self, snapshot: DatasetSnapshot) -> str:
        url = reverse("admin:training_trainingrun_add") + f"?snapshot={snapshot.pk}"
        return format_html('<a href="{}">Train on this export</a>', url)
