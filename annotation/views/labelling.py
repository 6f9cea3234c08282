"""The labelling screen: claim, submit, skip, edit the last judgement, history.
Thin: check the membership, call the labelling service or a selector, render."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from annotation.models import SCREEN_PAIR, Flag, Side, TaskType
from annotation.selectors import labelling as selectors
from annotation.services import labelling
from annotation.services.adjudication import guidelines_notice_take
from annotation.views.membership import elapsed_ms as _elapsed_ms
from annotation.views.membership import member_project_or_404 as _member_project
from annotation.views.task_labelling import item_label
from common.roles import machine_account_label
from common.sides import screen_order, screen_side


def _verdict_from(request: HttpRequest) -> labelling.Verdict:
    try:
        strength = int(request.POST.get("strength", "1"))
    except ValueError:
        strength = 0  # rejected by the service with a clear message
    return labelling.Verdict(pick=request.POST.get("pick", ""), strength=strength)


SUGGESTION_TEXT = {
    "left": "the left response is better",
    "right": "the right response is better",
    "tie": "about the same (a tie)",
    "both_bad": "both are bad",
}


def _suggestion(assignment) -> dict[str, str] | None:
    """What the screen says of the pair's suggestion: ``pick`` in screen terms (the stored verdict
    mapped through the sides this annotator sees), its words, and the judge's name; None for none."""
    choice = getattr(assignment, "suggested_choice", "")
    if not choice:
        return None
    pick = choice
    if choice in (Side.A, Side.B):
        pick = screen_side(choice, shown_left=assignment.shown_left, pair=SCREEN_PAIR)
    return {
        "pick": pick,
        "text": SUGGESTION_TEXT[pick],
        "by": machine_account_label(assignment.suggested_by),
    }


def _screen(request: HttpRequest, project, comparison, shown_left: str, **extra) -> HttpResponse:
    left, right = screen_order(
        shown_left, pair=SCREEN_PAIR, values=(comparison.response_a, comparison.response_b)
    )
    context = {
        "project": project,
        "comparison": comparison,
        "prompt": comparison.prompt,
        "left": left,
        "right": right,
        "progress": selectors.labelling_progress(annotator=request.user, project=project),
        "strength_levels": range(1, project.strength_scale + 1),
        **extra,
    }
    return render(request, "annotation/label.html", context)


def _wants_json(request: HttpRequest) -> bool:
    """The labelling screen's script asks for JSON (the pair switch without a page load); a plain
    form submission (no script) gets the post/redirect/get answer."""
    return "application/json" in request.headers.get("Accept", "")


def _pair_json(assignment, project) -> dict[str, object]:
    """What the screen needs to show ``assignment``'s pair: its HTML (prompt and both responses, in
    screen order) and where to submit or skip it."""
    comparison = assignment.comparison
    left, right = screen_order(
        assignment.shown_left,
        pair=SCREEN_PAIR,
        values=(comparison.response_a, comparison.response_b),
    )
    slug = project.slug
    html = render_to_string(
        "annotation/_pair.html",
        {
            "prompt": comparison.prompt,
            "left": left,
            "right": right,
            "suggestion": _suggestion(assignment),
        },
    )
    return {
        "assignment": assignment.pk,
        "submit_url": reverse("annotation:label-submit", args=[slug, assignment.pk]),
        "skip_url": reverse("annotation:label-skip", args=[slug, assignment.pk]),
        "flag_url": reverse("annotation:label-flag", args=[slug, assignment.pk]),
        "html": html,
    }


def _pairs_json(request: HttpRequest, project, error: str = "") -> JsonResponse:
    """The annotator's current pair and the one reserved after it (claimed now, so the screen
    switches to it without asking the server), with the progress bars.

    ``{"current": pair | null, "next": pair | null, "progress_html": str, "error": str}``; a pair
    is ``{"assignment", "submit_url", "skip_url", "flag_url", "html"}``; ``current`` null: nothing left.
    """
    current = labelling.assignment_claim(annotator=request.user, project=project)
    after = None
    if current is not None:
        after = labelling.assignment_reserve_next(
            annotator=request.user, project=project, current_id=current.pk
        )
    progress = selectors.labelling_progress(annotator=request.user, project=project)
    return JsonResponse(
        {
            "current": None if current is None else _pair_json(current, project),
            "next": None if after is None else _pair_json(after, project),
            "progress_html": render_to_string("annotation/_progress.html", {"progress": progress}),
            "error": error,
        }
    )


@login_required
def label(request: HttpRequest, slug: str) -> HttpResponse:
    """Show the annotator's current pair (claiming the next one if needed); a rating or ranking
    project's current item (views.task_labelling)."""
    project = _member_project(request, slug)
    if project.task_type != TaskType.PAIRWISE:
        return item_label(request, project)
    assignment = labelling.assignment_claim(annotator=request.user, project=project)
    if assignment is None:
        context = {
            "project": project,
            "progress": selectors.labelling_progress(annotator=request.user, project=project),
            "entries": selectors.labelling_history(annotator=request.user, project=project),
            "stopped": selectors.labelling_stopped(annotator=request.user, project=project),
        }
        return render(request, "annotation/label_done.html", context)
    return _screen(
        request,
        project,
        assignment.comparison,
        assignment.shown_left,
        assignment=assignment,
        suggestion=_suggestion(assignment),
        action=reverse("annotation:label-submit", args=[slug, assignment.pk]),
        flag_reasons=Flag.Reason.choices,
        guidelines_notice=guidelines_notice_take(project=project, annotator=request.user),
    )


@login_required
@require_POST
def label_ahead(request: HttpRequest, slug: str) -> JsonResponse:
    """JSON for the labelling screen's script: the current pair and the next one, reserved."""
    project = _member_project(request, slug)
    return _pairs_json(request, project)


@login_required
@require_POST
def label_submit(request: HttpRequest, slug: str, assignment_id: int) -> HttpResponse:
    """Store the verdict on an assignment, then show the next pair (post/redirect/get; JSON with
    the next pairs for the screen's script)."""
    project = _member_project(request, slug)
    error = ""
    try:
        labelling.judgement_submit(
            annotator=request.user,
            assignment_id=assignment_id,
            verdict=_verdict_from(request),
            rationale=request.POST.get("rationale", ""),
            elapsed_ms=_elapsed_ms(request),
            project=project,
        )
    except labelling.LabellingError as exc:
        if not _wants_json(request):
            messages.error(request, str(exc))
        error = str(exc)
    if _wants_json(request):
        return _pairs_json(request, project, error)
    return redirect("annotation:label", slug=project.slug)


@login_required
@require_POST
def label_skip(request: HttpRequest, slug: str, assignment_id: int) -> HttpResponse:
    project = _member_project(request, slug)
    labelling.assignment_skip(annotator=request.user, assignment_id=assignment_id)
    if _wants_json(request):
        return _pairs_json(request, project)
    return redirect("annotation:label", slug=project.slug)


@login_required
@require_GET
def label_history(request: HttpRequest, slug: str) -> JsonResponse:
    """JSON ``{"html": ...}``: the annotator's last judgements in the project, each with a link
    that re-opens it for a change."""
    project = _member_project(request, slug)
    entries = selectors.labelling_history(annotator=request.user, project=project)
    html = render_to_string(
        "annotation/_history.html", {"project": project, "entries": entries}, request=request
    )
    return JsonResponse({"html": html})


def _judgement_asked(request: HttpRequest, project):
    """The judgement an edit asks for (``judgement`` in the query or the form: one from the
    history), else the annotator's last; None when they have none (or it is not theirs)."""
    raw = request.POST.get("judgement") or request.GET.get("judgement")
    if not raw:
        return selectors.judgement_last(annotator=request.user, project=project)
    try:
        judgement_id = int(raw)
    except ValueError:
        return None
    return selectors.judgement_own(
        annotator=request.user, project=project, judgement_id=judgement_id
    )


@login_required
def label_edit_last(request: HttpRequest, slug: str) -> HttpResponse:
    """Undo: bring back the annotator's last judgement, or one from their history
    (``?judgement=ID``), to change it (Z on the labelling screen)."""
    project = _member_project(request, slug)
    judgement = _judgement_asked(request, project)
    if judgement is None:
        messages.info(request, "You have no such judgement in this project.")
        return redirect("annotation:label", slug=project.slug)
    if request.method == "POST":
        try:
            labelling.judgement_edit(
                annotator=request.user,
                judgement_id=judgement.pk,
                verdict=_verdict_from(request),
                rationale=request.POST.get("rationale", ""),
            )
        except labelling.LabellingError as exc:
            messages.error(request, str(exc))
            edit_url = reverse("annotation:label-edit-last", args=[slug])
            return redirect(f"{edit_url}?judgement={judgement.pk}")
        messages.success(request, "Your judgement was changed.")
        return redirect("annotation:label", slug=project.slug)
    shown_left = judgement.shown_left or Side.A
    pick = judgement.choice
    if pick in (Side.A, Side.B):
        pick = screen_side(pick, shown_left=shown_left, pair=SCREEN_PAIR)
    return _screen(
        request,
        project,
        judgement.comparison,
        shown_left,
        editing=judgement,
        current_pick=pick,
        action=reverse("annotation:label-edit-last", args=[slug]),
    )
