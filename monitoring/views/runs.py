"""Reviewer and ML engineer pages. Thin: check the role, call selectors, render."""

from django import forms
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse

from annotation.selectors.projects import projects_overview
from common.lifecycle import job_state
from common.model_registry import registered_models
from common.roles import ML_ENGINEER, REVIEWER, has_role, role_required
from monitoring.selectors import runs as selectors
from monitoring.services.stopping_panel import stopping_panel_state
from training.models import TrainingRun, kind_choices

COMPARE_MAX_RUNS = 8


@role_required(REVIEWER, hide=False)
def review_home(request: HttpRequest) -> HttpResponse:
    """The reviewer's start page: the models that can be evaluated and the state of the data."""
    context = {"models": registered_models(), "projects": projects_overview()}
    return render(request, "monitoring/review_home.html", context)


def _kind_filter_choices() -> list[tuple[str, str]]:
    """Any kind, then the registry's kinds as they are when the form is made."""
    return [("", "any kind"), *kind_choices()]


class RunsFilterForm(forms.Form):
    """The runs list's filters (GET); empty: any."""

    kind = forms.ChoiceField(choices=_kind_filter_choices, required=False)
    status = forms.ChoiceField(
        choices=[("", "any status"), *TrainingRun.Status.choices], required=False
    )
    project = forms.CharField(max_length=100, required=False)


@role_required(ML_ENGINEER, REVIEWER)
def runs_list(request: HttpRequest) -> HttpResponse:
    """Training runs with status, progress, each kind's headline numbers and open alerts;
    filtered by kind, status and project; ticked runs open the compare page."""
    form = RunsFilterForm(request.GET or None)
    filters = form.cleaned_data if form.is_valid() else {}
    context = {
        "rows": selectors.runs_overview(**filters),
        "form": form,
        "choices": selectors.runs_filter_choices(),
        "filtered": any(filters.values()),
    }
    return render(request, "monitoring/runs.html", context)


class KappaThresholdForm(forms.Form):
    """The stopping panel's trust rule (GET): the judge's kappa with the reviewers on the round
    at or above which the panel uses the prediction-powered estimate."""

    kappa = forms.FloatField(
        min_value=-1,
        max_value=1,
        required=False,
        label="Trust the round's judge from kappa",
        help_text="Cohen's kappa with the reviewers on the items both rated (default 0.7, the "
        "agreement target for annotators).",
    )


@role_required(ML_ENGINEER, REVIEWER)
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    """A run's live page: grouped charts, summary, alerts with their diagnosis, checkpoints,
    samples, config, events."""
    run = get_object_or_404(
        TrainingRun.objects.select_related("snapshot__export__project", "reward_model_run"),
        pk=run_id,
    )
    context = {
        "run": run,
        "alerts": run.alerts.all(),
        "phase": selectors.run_phase(run),
        "checkpoints": selectors.run_checkpoints(
            run, eval_round_url=reverse("monitoring:eval-rounds")
        ),
        "config_rows": selectors.run_config_rows(run),
        "events": run.events.select_related("user").order_by("-created_at")[:50],
        "thresholds": selectors.alert_thresholds(),
        "groups": selectors.groups_order(),
        # DPO, PPO and RLOO train a policy that human-eval rounds can judge; a reward model not.
        "is_policy_run": run.kind != TrainingRun.Kind.RM,
        "keeps_samples": selectors.run_keeps_samples(run),
        "finished": run.status in TrainingRun.FINISHED,
        "may_decide": has_role(request.user, REVIEWER),
    }
    if context["is_policy_run"]:
        trust = KappaThresholdForm(request.GET or None)
        threshold = trust.cleaned_data["kappa"] if trust.is_valid() else None
        context["stopping"] = stopping_panel_state(run=run, kappa_threshold=threshold)
        context["trust_form"] = trust
        context["checkpoint_choices"] = run.checkpoints.on_disk().order_by("-step")
    return render(request, "monitoring/run_detail.html", context)


def _int_param(request: HttpRequest, name: str, default: int) -> int:
    try:
        return int(request.GET.get(name, str(default)))
    except ValueError:
        return default


@role_required(ML_ENGINEER, REVIEWER)
def run_metrics(request: HttpRequest, run_id: int) -> JsonResponse:
    """The run's state, its metric points after ``?after=STEP``, its checkpoints, and its samples
    after ``?samples_after=STEP`` (the page polls this)."""
    run = get_object_or_404(TrainingRun, pk=run_id)
    series = selectors.run_series(run=run, after_step=_int_param(request, "after", -1))
    return JsonResponse(
        {
            "id": run.pk,
            "name": run.name,
            "kind": run.kind,
            "status": run.status,
            "status_label": job_state(run)[1],
            "step": run.step,
            "total_steps": run.total_steps,
            "progress": run.progress_percent,
            "phase": selectors.run_phase(run),
            "heartbeat_at": run.heartbeat_at.isoformat() if run.heartbeat_at else None,
            "error": run.error[-2000:],
            "alerts": run.alerts.filter(resolved_at=None).count(),
            "checkpoints": selectors.run_checkpoints(
                run, eval_round_url=reverse("monitoring:eval-rounds")
            ),
            "series": series,
            "meta": selectors.metric_meta(series),
            "samples": selectors.run_samples(
                run, after_step=_int_param(request, "samples_after", -1)
            ),
        }
    )


@role_required(ML_ENGINEER, REVIEWER)
def runs_compare(request: HttpRequest) -> HttpResponse:
    """Several runs (``?runs=ID&runs=ID``) overlaid on shared axes, configs side by side."""
    raw = request.GET.getlist("runs")
    error, bad_input = "", False
    run_ids: list[int] = []
    for value in raw:
        try:
            run_ids.append(int(value))
        except ValueError:
            error, bad_input = f"runs: {value!r} is not a run number", True
            break
    if not error and len(set(run_ids)) > COMPARE_MAX_RUNS:
        error, bad_input = (
            f"Compare at most {COMPARE_MAX_RUNS} runs (got {len(set(run_ids))}).",
            True,
        )
    if not error and len(set(run_ids)) < 2:
        error = "Tick at least two runs in the runs list to compare them."
    comparison = (
        selectors.runs_compare(run_ids=run_ids) if not error else {"runs": [], "config": []}
    )
    if not error and len(comparison["runs"]) < 2:
        error = "Fewer than two of those runs exist."
    context = {
        "error": error,
        "comparison": comparison,
        "sources": [
            {
                "id": run.pk,
                "label": f"#{run.pk} {run.name}",
                "url": reverse("monitoring:run-metrics", args=[run.pk]),
            }
            for run in comparison["runs"]
        ],
        "groups": selectors.groups_order(),
        "thresholds": selectors.alert_thresholds(),
    }
    return render(request, "monitoring/compare.html", context, status=400 if bad_input else 200)
