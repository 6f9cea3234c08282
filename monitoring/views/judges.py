"""Model judge pages (ML engineers and project leads): a project's judges with a form that creates
the next version of one and launches its job, the upload of an imported judge's verdicts, and each
judge version's report. Thin: parse, call a service or selector, render."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from annotation.models import Project
from annotation.views.pairwise_only import pairwise_only
from common.errors import ConcordError
from common.model_registry import registered_models
from common.roles import ML_ENGINEER, role_required
from monitoring.models import Judge
from monitoring.selectors import judges as judge_selectors
from monitoring.services import judges as judge_services
from monitoring.services.judge_imports import VerdictFileError, judge_verdicts_import
from monitoring.stats.judging import DEFAULT_TEMPLATE
from monitoring.stats.verdict_files import FORMATS
from training.models import TrainingRun

# The fields each kind of judge reads, besides its kind and name; the form holds only these.
KIND_FIELDS = {
    Judge.Kind.REWARD_MODEL: ("reward_run", "tie_band"),
    Judge.Kind.LOCAL_LLM: ("model_name", "template", "max_new_tokens"),
    Judge.Kind.OPENAI: (
        "endpoint_url", "served_model", "api_key_env", "max_concurrency", "timeout_s", "template",
        "max_new_tokens",
    ),
}  # fmt: skip


# An imported judge is not created by this form: its verdicts come from a file (``judge_import``).
RUN_KINDS = [(value, label) for value, label in Judge.Kind.choices if value in KIND_FIELDS]


def judge_kind_of(value: str) -> str:
    """``value`` when it names a kind of judge with a job, else the first kind (the default)."""
    return value if value in KIND_FIELDS else RUN_KINDS[0][0]


class JudgeForm(forms.Form):
    """A new judge version of one kind: its kind, its name and that kind's fields only (as the
    training-run form, choosing another kind reloads the page with that kind's fields:
    static/common/kind_reload.js)."""

    kind = forms.ChoiceField(choices=RUN_KINDS)
    name = forms.SlugField(max_length=60)
    reward_run = forms.ModelChoiceField(
        queryset=TrainingRun.objects.none(), required=False, label="Reward-model run"
    )
    tie_band = forms.FloatField(
        required=False, min_value=0, help_text="Empty: calibrated on the humans' labels."
    )
    model_name = forms.ChoiceField(choices=(), required=False, label="Generative model")
    template = forms.CharField(widget=forms.Textarea(attrs={"rows": 14}), initial=DEFAULT_TEMPLATE)
    max_new_tokens = forms.IntegerField(min_value=1, max_value=4096, initial=256)
    endpoint_url = forms.CharField(
        required=False,
        max_length=500,
        label="Endpoint base URL",
        help_text="OpenAI-compatible endpoint: the API's base URL, e.g. http://vllm-host:8000/v1.",
    )
    served_model = forms.CharField(
        required=False, max_length=100, help_text="The model name the endpoint serves."
    )
    api_key_env = forms.CharField(
        required=False,
        max_length=100,
        label="API key variable",
        help_text="The NAME of the worker's environment variable holding the key (never the key "
        "itself); empty for a server without one.",
    )
    max_concurrency = forms.IntegerField(
        required=False, min_value=1, max_value=256, initial=4, help_text="Requests in flight."
    )
    timeout_s = forms.FloatField(
        required=False,
        min_value=0.1,
        max_value=3600,
        initial=60,
        label="Timeout (s)",
        help_text="Per request; failed requests are retried with backoff.",
    )

    def __init__(self, *args, kind: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.kind = judge_kind_of(kind)
        kept = ("kind", "name", *KIND_FIELDS[self.kind])
        for name in [name for name in self.fields if name not in kept]:
            del self.fields[name]
        self.fields["kind"].initial = self.kind
        self.fields["kind"].widget.attrs["data-reload-kind"] = "1"
        self.fields["kind"].help_text = "Choosing another kind reloads the form with its fields."
        if "reward_run" in self.fields:
            # Any project's reward model: one trained on other data is measured here on new pairs.
            self.fields["reward_run"].queryset = TrainingRun.objects.filter(
                kind=TrainingRun.Kind.RM, status=TrainingRun.Status.SUCCEEDED
            ).order_by("-pk")
        if "model_name" in self.fields:
            self.fields["model_name"].choices = [
                (m.name, m.name) for m in registered_models() if m.ready and m.chat_template
            ]

    def judge_arguments(self) -> dict:
        """The cleaned form as ``judge_create``'s keyword arguments: an endpoint judge's model is
        the served model's name; empty endpoint settings take their defaults; the fields the kind
        does not read take ``judge_create``'s defaults."""
        data = dict(self.cleaned_data)
        if data["kind"] == Judge.Kind.OPENAI:
            data["model_name"] = data.pop("served_model").strip()
            data["max_concurrency"] = data["max_concurrency"] or 4
            data["timeout_s"] = data["timeout_s"] or 60.0
        return data


@role_required(ML_ENGINEER)
@pairwise_only("Model judges")
def judges(request: HttpRequest, slug: str) -> HttpResponse:
    """The project's judges and their jobs; POST creates the next version of a judge and
    launches it (post/redirect/get); a bad form answers 400 with the reasons. The form holds the
    fields of one kind: the posted one, else ``?kind=`` (the kind select reloads with it)."""
    project = get_object_or_404(Project, slug=slug)
    kind = request.POST.get("kind") if request.method == "POST" else request.GET.get("kind", "")
    form = JudgeForm(request.POST or None, kind=kind or "")
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                judge = judge_services.judge_create(
                    project=project, created_by=request.user, **form.judge_arguments()
                )
            except ConcordError as exc:
                form.add_error(None, str(exc))
            else:
                judge_services.judge_launch(judge=judge)
                messages.success(request, f"Judge {judge.name} v{judge.version} queued.")
                return redirect("monitoring:judges", slug=project.slug)
        status = 400
    context = {
        "project": project,
        "judges": judge_selectors.judges_of_project(project=project),
        "form": form,
    }
    return render(request, "monitoring/judges/list.html", context, status=status)


@role_required(ML_ENGINEER)
def judge_report(request: HttpRequest, judge_id: int) -> HttpResponse:
    """One judge version measured like an annotator against the project's humans."""
    judge = get_object_or_404(Judge.objects.select_related("project", "reward_run"), pk=judge_id)
    data = judge_selectors.judge_report_data(judge=judge)
    context = {
        "judge": judge,
        "summary": judge_selectors.judge_report_summary(data),
    }
    return render(request, "monitoring/judges/report.html", context)


@role_required(ML_ENGINEER, methods=("POST",))
def judge_relaunch(request: HttpRequest, judge_id: int) -> HttpResponse:
    """Run a finished or failed judge version's job again: it answers only what is missing (pairs
    added since, answers a crashed job never saved)."""
    judge = get_object_or_404(Judge.objects.select_related("project"), pk=judge_id)
    try:
        judge_services.judge_launch(judge=judge)
    except ConcordError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Judge {judge.name} v{judge.version} queued again.")
    return redirect("monitoring:judges", slug=judge.project.slug)


class VerdictUploadForm(forms.Form):
    """An imported judge's next version: its name, where its verdicts come from, and the file."""

    name = forms.SlugField(max_length=60, help_text="An existing name makes its next version.")
    description = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        max_length=5000,
        help_text="Whose verdicts these are and where they come from (kept with the judge).",
    )
    format = forms.ChoiceField(
        choices=[("jsonl", "Concord JSONL"), ("mt_bench", "MT-Bench pairwise judgments")],
        initial="jsonl",
    )
    file = forms.FileField(help_text="One JSON object a line, one line per comparison.")


@role_required(ML_ENGINEER)
@pairwise_only("Model judges")
def judge_import(request: HttpRequest, slug: str) -> HttpResponse:
    """Upload an imported judge's verdicts (post/redirect/get to its report); a bad file answers
    400 naming every bad line, and nothing is stored."""
    project = get_object_or_404(Project, slug=slug)
    form = VerdictUploadForm(request.POST or None, request.FILES or None)
    errors: list[str] = []
    status = 200
    if request.method == "POST":
        if form.is_valid():
            upload = form.cleaned_data["file"]
            try:
                lines = upload.read().decode("utf-8").splitlines()
                result = judge_verdicts_import(
                    project=project, name=form.cleaned_data["name"],
                    description=form.cleaned_data["description"], lines=lines,
                    fmt=form.cleaned_data["format"], source_name=upload.name,
                    created_by=request.user,
                )  # fmt: skip
            except UnicodeDecodeError:
                form.add_error("file", "The file is not UTF-8 text.")
            except VerdictFileError as exc:
                form.add_error("file", f"{len(exc.errors)} bad line(s); nothing was imported.")
                errors = exc.errors
            except ConcordError as exc:
                form.add_error(None, str(exc))
            else:
                judge = result.judge
                messages.success(
                    request,
                    f"Imported {judge.name} v{judge.version}: {result.comparisons} comparisons "
                    f"({result.inconsistent} inconsistent across orders).",
                )
                return redirect("monitoring:judge-report", judge_id=judge.pk)
        status = 400
    context = {"project": project, "form": form, "errors": errors, "formats": FORMATS}
    return render(request, "monitoring/judges/import.html", context, status=status)
