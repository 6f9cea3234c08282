"""The labelling screen of rating and ranking projects: claim an item through the work queue,
show its responses in the lease's display order, submit or skip. Thin: the work queue
(annotation.work_queue.items) writes, the project's task-type plug-in reads the form."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from annotation.models import RATING_SCALE, Project, TaskType
from annotation.selectors.task_items import item_progress
from annotation.views.membership import elapsed_ms as _elapsed_ms
from annotation.views.membership import member_project_or_404 as _member_project
from annotation.work_queue import items as work_queue
from annotation.work_queue.plugins import AnswerError
from annotation.work_queue.registry import task_type_of


def item_label(request: HttpRequest, project: Project) -> HttpResponse:
    """The annotator's current item (claimed if needed), or the done page when none is left.
    Called by ``labelling.label`` for rating and ranking projects."""
    lease = work_queue.item_claim(annotator=request.user, project=project)
    progress = item_progress(annotator=request.user, project=project)
    if lease is None:
        return render(
            request, "annotation/label_item_done.html", {"project": project, "progress": progress}
        )
    plugin = task_type_of(project)
    shown = work_queue.item_screen(lease)
    low, high = RATING_SCALE
    context = {
        "project": project,
        "lease": lease,
        "prompt": lease.item.prompt,
        "shown": shown,
        "ranks": range(1, len(shown) + 1),
        "points": range(low, high + 1),
        "plugin": plugin,
        "is_ranking": project.task_type == TaskType.RANKING,
        "progress": progress,
        "action": reverse("annotation:item-submit", args=[project.slug, lease.pk]),
        "skip_action": reverse("annotation:item-skip", args=[project.slug, lease.pk]),
    }
    return render(request, "annotation/label_item.html", context)


@login_required
@require_POST
def item_submit(request: HttpRequest, slug: str, lease_id: int) -> HttpResponse:
    """Store the answer on a lease, then show the next item (post/redirect/get); a refused answer
    shows the same item again with the reason."""
    project = _member_project(request, slug)
    plugin = task_type_of(project)
    size = int(request.POST.get("size", "0") or 0)
    try:
        work_queue.item_submit(
            annotator=request.user,
            lease_id=lease_id,
            answer=plugin.answer_from_form(project, request.POST, size),
            rationale=request.POST.get("rationale", ""),
            elapsed_ms=_elapsed_ms(request),
        )
    except AnswerError as exc:
        messages.error(request, str(exc))
    return redirect("annotation:label", slug=project.slug)


@login_required
@require_POST
def item_skip(request: HttpRequest, slug: str, lease_id: int) -> HttpResponse:
    project = _member_project(request, slug)
    work_queue.item_skip(annotator=request.user, lease_id=lease_id)
    return redirect("annotation:label", slug=project.slug)
