"""Agreement dashboard for project leads (ML engineers). Thin: check the role, call the service, render.

The report is computed by a Celery task and cached (annotation.services.agreement); these views only
read the cached copy, and ask for a recomputation when it is missing or out of date.
"""

from datetime import datetime

from django.contrib.auth import get_user_model
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render

from annotation.agreement.bias import flag_label
from annotation.models import Project, TaskType
from annotation.selectors import adjudication as adjudication_selectors
from annotation.selectors import agreement as agreement_selectors
from annotation.services import agreement as agreement_services
from annotation.views.pairwise_only import pairwise_only
from annotation.work_queue.registry import task_type_of
from common.roles import ML_ENGINEER, role_required


@role_required(ML_ENGINEER)
def agreement_dashboard(request: HttpRequest, slug: str) -> HttpResponse:
    """Coefficients with intervals and the target, pairwise kappa, agreement per batch, cluster and
    day, and the annotator table with flags (charts drawn by agreement.js from agreement_data); the
    suggestions' figures when the project has any. People only, unless ``?judges=1``: then each model
    judge of the project is shown beside them."""
    project = get_object_or_404(Project, slug=slug)
    if project.task_type != TaskType.PAIRWISE:
        report = task_type_of(project).agreement(project)
        return render(
            request, "annotation/agreement_items.html", {"project": project, "report": report}
        )
    state = agreement_services.dashboard_state(project=project)
    report = state.payload
    accuracy = adjudication_selectors.annotator_adjudicated_accuracy(project=project)
    suggestions = agreement_selectors.suggestion_report(project=project)
    suggested = suggestions["per_annotator"] if suggestions else {}
    show_judges = request.GET.get("judges") == "1"
    context = {
        "project": project,
        "state": state,
        "report": report,
        "computed_at": datetime.fromisoformat(report["computed_at"]) if report else None,
        "coefficients": _coefficient_rows(report) if report else [],
        "annotators": [
            {
                **row,
                "flag_labels": [flag_label(flag) for flag in row["flags"]],
                "adjudicated": accuracy.get(row["annotator"]),
                "suggested": suggested.get(row["annotator"]),
            }
            for row in (report["summary"]["annotators"] if report else [])
        ],
        "suggestions": suggestions,
        "show_judges": show_judges,
        "judges": (
            agreement_selectors.judges_beside_humans(project=project) if show_judges else []
        ),
        **_by_version(request, project),
    }
    return render(request, "annotation/agreement.html", context)


def _by_version(request: HttpRequest, project: Project) -> dict:
    """The guidelines versions for the select, and the headline figures of the one asked for
    (``?version=N``; ``?version=none``: the judgements made before versioning)."""
    versions = adjudication_selectors.guidelines_versions(project=project)
    raw = request.GET.get("version", "")
    if not versions or not raw:
        return {"versions": versions, "version_asked": "", "version_figures": None}
    number = None if raw == "none" else int(raw) if raw.isdigit() else -1
    figures = adjudication_selectors.headline_by_version(project=project, number=number)
    return {"versions": versions, "version_asked": raw, "version_figures": figures}


def _coefficient_rows(report: dict) -> list[dict]:
    summary = report["summary"]
    labels = {
        "percent_agreement": "Percent agreement",
        "percent_agreement_no_ties": "Percent agreement, ties left out",
        "fleiss_kappa": "Fleiss' kappa (full-overlap comparisons)",
        "krippendorff_alpha": "Krippendorff's alpha (nominal)",
        "gwet_ac1": "Gwet's AC1",
    }
    return [
        {
            "key": key,
            "label": label,
            "value": summary[key],
            "low": summary["intervals"][key][0],
            "high": summary["intervals"][key][1],
        }
        for key, label in labels.items()
    ]


@role_required(ML_ENGINEER)
def agreement_data(request: HttpRequest, slug: str) -> JsonResponse:
    """The cached report as JSON for the charts, with whether it is stale or being recomputed."""
    project = get_object_or_404(Project, slug=slug)
    state = agreement_services.dashboard_state(project=project, schedule=False)
    return JsonResponse(
        {
            "ready": state.payload is not None,
            "stale": state.stale,
            "refreshing": state.refreshing,
            "report": state.payload,
        }
    )


@role_required(ML_ENGINEER, methods=("POST",))
def agreement_refresh(request: HttpRequest, slug: str) -> HttpResponse:
    """Queue a recomputation now (collapses with one already queued)."""
    project = get_object_or_404(Project, slug=slug)
    agreement_services.dashboard_refresh_schedule(project=project, delay=0)
    return redirect("annotation:agreement", slug=project.slug)


@role_required(ML_ENGINEER)
@pairwise_only("An annotator's disagreements")
def agreement_annotator(request: HttpRequest, slug: str, username: str) -> HttpResponse:
    """Drill-down: one annotator's statistics and the comparisons where they differ from the others'
    majority."""
    project = get_object_or_404(Project, slug=slug)
    if not get_user_model().objects.filter(**{get_user_model().USERNAME_FIELD: username}).exists():
        raise Http404
    report = agreement_selectors.cached_dashboard(project=project)
    stats = None
    if report:
        stats = next(
            (row for row in report["summary"]["annotators"] if row["annotator"] == username), None
        )
    rows = agreement_selectors.annotator_disagreements(project=project, username=username)
    context = {
        "project": project,
        "username": username,
        "stats": stats,
        "flag_labels": [flag_label(flag) for flag in stats["flags"]] if stats else [],
        "rows": rows,
    }
    return render(request, "annotation/agreement_annotator.html", context)
