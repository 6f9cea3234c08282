"""Reviewer and ML engineer pages. Thin: check the role, call selectors, render."""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render

from annotation.selectors import projects_overview
from common.model_registry import registered_models
from common.roles import ML_ENGINEER, REVIEWER, has_role
from monitoring import eval_selectors, selectors
from training.models import TrainingRun


def _may_watch_runs(request: HttpRequest) -> None:
    if not (has_role(request.user, ML_ENGINEER) or has_role(request.user, REVIEWER)):
        raise Http404


@login_required
def review_home(request: HttpRequest) -> HttpResponse:
    """The reviewer's start page: the models that can be evaluated and the state of the data."""
    if not has_role(request.user, REVIEWER):
        raise PermissionDenied
    context = {"models": registered_models(), "projects": projects_overview()}
    return render(request, "monitoring/review_home.html", context)


@login_required
def runs_list(request: HttpRequest) -> HttpResponse:
    """Training runs with status, progress, latest numbers and open alerts."""
    _may_watch_runs(request)
    return render(request, "monitoring/runs.html", {"rows": selectors.runs_overview()})


@login_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    """A run's live page: charts, alerts with their diagnosis, checkpoints, events."""
    _may_watch_runs(request)
    run = get_object_or_404(
        TrainingRun.objects.select_related("snapshot__export__project"), pk=run_id
    )
    context = {
        "run": run,
        "alerts": run.alerts.all(),
        "checkpoints": run.checkpoints.order_by("-step"),
        "events": run.events.select_related("user").order_by("-created_at")[:50],
        "thresholds": selectors.alert_thresholds(),
        "stopping": eval_selectors.run_stopping_panel(run),
        "may_decide": has_role(request.user, REVIEWER),
    }
    return render(request, "monitoring/run_detail.html", context)


@login_required
def run_metrics(request: HttpRequest, run_id: int) -> JsonResponse:
    """The run's state and its metric points after ``?after=STEP`` (the charts poll this)."""
    _may_watch_runs(request)
    run = get_object_or_404(TrainingRun, pk=run_id)
    try:
        after = int(request.GET.get("after", "-1"))
    except ValueError:
        after = -1
    return JsonResponse(
        {
            "status": run.status,
            "step": run.step,
            "total_steps": run.total_steps,
            "progress": run.progress_percent,
            "heartbeat_at": run.heartbeat_at.isoformat() if run.heartbeat_at else None,
            "error": run.error[-2000:],
            "alerts": run.alerts.filter(resolved_at=None).count(),
            "checkpoints": [
                {"step": c.step, "path": c.path, "created_at": c.created_at.isoformat()}
                for c in run.checkpoints.order_by("-step")
            ],
            "series": selectors.run_series(run=run, after_step=after),
        }
    )
