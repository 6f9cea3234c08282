"""Model judge pages (ML engineers and project leads): a project's judges with a form that creates
the next version of one and launches its job, and each judge version's report. Thin: parse, call
a service or selector, render."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from annotation.models import Project
from common.errors import ConcordError
from common.model_registry import registered_models
from common.roles import ML_ENGINEER, role_required
from monitoring import judge_selectors, judge_services
from monitoring.judging import DEFAULT_TEMPLATE
from monitoring.models import Judge
from training.models import TrainingRun


class JudgeForm(forms.Form):
    """A new judge version. The fields of the other kind are ignored."""

    name = forms.SlugField(max_length=60)
    kind = forms.ChoiceField(choices=Judge.Kind.choices)
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

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Any project's reward model: one trained on other data is measured here on new pairs.
        self.fields["reward_run"].queryset = TrainingRun.objects.filter(
            kind=TrainingRun.Kind.RM, status=TrainingRun.Status.SUCCEEDED
        ).order_by("-pk")
        self.fields["model_name"].choices = [
            (m.name, m.name) for m in registered_models() if m.ready and m.chat_template
        ]

    def judge_arguments(self) -> dict:
        """The cleaned form as ``judge_create``'s keyword arguments: an endpoint judge's model is
        the served model's name; empty endpoint settings take their defaults."""
        data = dict(self.cleaned_data)
        served = data.pop("served_model").strip()
        if data["kind"] == Judge.Kind.OPENAI:
            data["model_name"] = served
        data["max_concurrency"] = data["max_concurrency"] or 4
        data["timeout_s"] = data["timeout_s"] or 60.0
        return data


@role_required(ML_ENGINEER)
def judges(request: HttpRequest, slug: str) -> HttpResponse:
    """The project's judges and their jobs; POST creates the next version of a judge and
    launches it (post/redirect/get); a bad form answers 400 with the reasons."""
    project = get_object_or_404(Project, slug=slug)
    form = JudgeForm(request.POST or None)
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
