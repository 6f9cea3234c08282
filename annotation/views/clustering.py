"""The clusters page (ML engineers): the 2-D projection coloured by cluster, the cluster table with
top terms, examples and agreement, renaming, and a re-cluster button whose progress is polled.

Thin: check the role, call the clustering service, render. The page never imports torch; the run
happens on the default worker queue.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render

from annotation.models import ClusteringRun, Project, PromptCluster
from annotation.selectors import clustering as selectors
from annotation.services import clustering as service
from annotation.views.pairwise_only import pairwise_only
from common.errors import ConcordError
from common.lifecycle import job_state
from common.roles import ML_ENGINEER, role_required

# Colours cycle after this many clusters (clusters.css defines .cluster-0 ... .cluster-11).
PALETTE_SIZE = 12
SCATTER_WIDTH, SCATTER_HEIGHT = 640, 420


def _run_status(run: ClusteringRun | None) -> dict[str, object]:
    if run is None:
        return {"status": "none"}
    return {
        "id": run.pk,
        "status": run.status,
        "status_label": job_state(run)[1],
        "progress": round(run.progress, 3),
        "stage": run.stage,
        "error": run.error,
        "active": run.status in service.ACTIVE,
    }


@role_required(ML_ENGINEER, methods=("GET",))
@pairwise_only("Prompt clusters")
def clusters(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_object_or_404(Project, slug=slug)
    current = selectors.clustering_run_current(project=project)
    latest = selectors.clustering_run_latest(project=project)
    points, total = ([], 0)
    rows: list[selectors.ClusterRow] = []
    if current is not None:
        rows = selectors.cluster_rows(run=current)
        points, total = selectors.cluster_scatter(
            run=current, width=SCATTER_WIDTH, height=SCATTER_HEIGHT
        )
    context = {
        "project": project,
        "run": current,
        "latest": latest if latest is not None and latest != current else None,
        "latest_status": _run_status(latest),
        "rows": [(row, row.cluster.label % PALETTE_SIZE) for row in rows],
        "points": [(p, p.label % PALETTE_SIZE) for p in points],
        "n_points": total,
        "width": SCATTER_WIDTH,
        "height": SCATTER_HEIGHT,
    }
    return render(request, "annotation/clusters.html", context)


@role_required(ML_ENGINEER, methods=("GET",))
def clusters_status(request: HttpRequest, slug: str) -> JsonResponse:
    """The latest run's state, polled by the page while a run is queued or running."""
    project = get_object_or_404(Project, slug=slug)
    return JsonResponse(_run_status(selectors.clustering_run_latest(project=project)))


@role_required(ML_ENGINEER, methods=("POST",))
@pairwise_only("Prompt clusters")
def clusters_recluster(request: HttpRequest, slug: str) -> HttpResponse:
    project = get_object_or_404(Project, slug=slug)
    raw_k = request.POST.get("k", "").strip()
    try:
        k = int(raw_k) if raw_k else None
        run, created = service.clustering_run_start(project=project, k=k, requested_by=request.user)
    except ValueError:
        messages.error(request, f"k must be a whole number, not {raw_k!r}.")
    except ConcordError as exc:
        messages.error(request, str(exc))
    else:
        if created:
            messages.success(request, "Re-clustering queued.")
        else:
            messages.info(request, f"A clustering run is already {run.status}.")
    return redirect("annotation:clusters", slug=project.slug)


@role_required(ML_ENGINEER, methods=("POST",))
@pairwise_only("Prompt clusters")
def cluster_rename(request: HttpRequest, slug: str, cluster_id: int) -> HttpResponse:
    project = get_object_or_404(Project, slug=slug)
    cluster = get_object_or_404(PromptCluster, pk=cluster_id, run__project=project)
    try:
        service.cluster_rename(cluster=cluster, name=request.POST.get("name", ""))
    except ConcordError as exc:
        messages.error(request, str(exc))
    return redirect("annotation:clusters", slug=project.slug)
