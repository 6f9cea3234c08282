"""The labelling screen of rating and ranking projects: claim an item through the work queue,
show its responses in the lease's display order, submit or skip, and change the session's last
answer (undo). Thin: the work queue (annotation.work_queue.items) and
annotation.services.task_answers write, the project's task-type plug-in reads the form."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from annotation.models import RATING_SCALE, Project, Prompt, TaskType
from annotation.selectors.task_items import answer_screen, item_progress, task_answer_own
from annotation.services.task_answers import task_answer_edit
from annotation.views.membership import elapsed_ms as _elapsed_ms
from annotation.views.membership import member_project_or_404 as _member_project
from annotation.work_queue import items as work_queue
from annotation.work_queue.plugins import AnswerError
from annotation.work_queue.registry import task_type_of


def _last_answer_key(project: Project) -> str:
    return f"concord:last-answer:{project.pk}"


def _screen(
    request: HttpRequest, project: Project, prompt: Prompt, shown: list[dict], **extra: object
) -> HttpResponse:
    """The item screen: ``shown`` in screen order ({"slot", "response"} and, when changing an
    answer, its "rank"); ``extra``: the action URLs, the lease or the answer being changed."""
    low, high = RATING_SCALE
    context = {
        "project": project,
        "prompt": prompt,
        "shown": shown,
        "ranks": range(1, len(shown) + 1),
        "points": range(low, high + 1),
        "plugin": task_type_of(project),
        "is_ranking": project.task_type == TaskType.RANKING,
        "progress": item_progress(annotator=request.user, project=project),
        **extra,
    }
    editing = extra.get("editing")
    keys = [
        (key, does) for key, does in context["plugin"].keys.items() if not editing or key != "S"
    ]
    if extra.get("undo") and not editing:
        keys.append(("Z", "change your last answer"))
    context["keys"] = keys
    context["aspects"] = [
        {"name": aspect, "current": (editing.scores or {}).get(aspect) if editing else None}
        for aspect in project.rating_aspects or []
    ]
    if editing is not None and editing.thumbs is not None:
        context["current_thumbs"] = "up" if editing.thumbs else "down"
    return render(request, "annotation/label_item.html", context)


def item_label(request: HttpRequest, project: Project) -> HttpResponse:
    """The annotator's current item (claimed if needed), or the done page when none is left.
    Called by ``labelling.label`` for rating and ranking projects."""
    lease = work_queue.item_claim(annotator=request.user, project=project)
    undo = _last_answer_key(project) in request.session
    if lease is None:
        progress = item_progress(annotator=request.user, project=project)
        context = {"project": project, "progress": progress, "undo": undo}
        return render(request, "annotation/label_item_done.html", context)
    return _screen(
        request,
        project,
        lease.item.prompt,
        work_queue.item_screen(lease),
        lease=lease,
        undo=undo,
        action=reverse("annotation:item-submit", args=[project.slug, lease.pk]),
        skip_action=reverse("annotation:item-skip", args=[project.slug, lease.pk]),
    )


@login_required
def item_edit_last(request: HttpRequest, slug: str) -> HttpResponse:
    """Undo (Z on the item screen): the annotator's last answer of this session, shown again in
    the order it was made in with its scores or ranks, to change; POST saves the change."""
    project = _member_project(request, slug)
    answer_id = request.session.get(_last_answer_key(project))
    answer = (
        task_answer_own(annotator=request.user, project=project, answer_id=answer_id)
        if isinstance(answer_id, int)
        else None
    )
    if answer is None:
        messages.info(request, "No answer of this session to change.")
        return redirect("annotation:label", slug=project.slug)
    action = reverse("annotation:item-edit-last", args=[project.slug])
    if request.method == "POST":
        plugin = task_type_of(project)
        try:
            task_answer_edit(
                annotator=request.user,
                answer_id=answer.pk,
                answer=plugin.answer_from_form(project, request.POST, len(answer.order)),
                rationale=request.POST.get("rationale", ""),
            )
        except AnswerError as exc:
            messages.error(request, str(exc))
            return redirect(action)
        messages.success(request, "Your last answer was changed.")
        return redirect("annotation:label", slug=project.slug)
    return _screen(
        request, project, answer.item.prompt, answer_screen(answer), editing=answer, action=action
    )


@login_required
@require_POST
def item_submit(request: HttpRequest, slug: str, lease_id: int) -> HttpResponse:
    """Store the answer on a lease, then show the next item (post/redirect/get); a refused answer
    shows the same item again with the reason."""
    project = _member_project(request, slug)
    plugin = task_type_of(project)
    size = int(request.POST.get("size", "0") or 0)
    try:
        answer = work_queue.item_submit(
            annotator=request.user,
            lease_id=lease_id,
            answer=plugin.answer_from_form(project, request.POST, size),
            rationale=request.POST.get("rationale", ""),
            elapsed_ms=_elapsed_ms(request),
        )
    except AnswerError as exc:
        messages.error(request, str(exc))
    else:
        request.session[_last_answer_key(project)] = answer.pk  # what Z (undo) brings back
    return redirect("annotation:label", slug=project.slug)


@login_required
@require_POST
def item_skip(request: HttpRequest, slug: str, lease_id: int) -> HttpResponse:
    project = _member_project(request, slug)
    work_queue.item_skip(annotator=request.user, lease_id=lease_id)
    return redirect("annotation:label", slug=project.slug)
