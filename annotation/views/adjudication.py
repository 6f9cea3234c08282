"""The adjudication queue (project leads, superusers and adjudicators) and the annotators' flag.
Thin: check the role or membership, call the adjudication service or a selector, render."""

from __future__ import annotations

import secrets

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from annotation.models import SCREEN_PAIR, Flag, Project
from annotation.selectors import adjudication as selectors
from annotation.services import adjudication as services
from annotation.views.labelling import _member_project, _wants_json
from annotation.views.pairwise_only import pairwise_only
from common.roles import ADJUDICATOR, ML_ENGINEER, role_required
from common.sides import screen_order, screen_side

# A verdict in the words of the screen (the pair as the adjudicator sees it), in this order.
VERDICT_WORDS = {
    "left": "Left better",
    "right": "Right better",
    "tie": "Tie",
    "both_bad": "Both bad",
}
TIMES = "\N{MULTIPLICATION SIGN}"
QUEUE_LISTED = 200  # the queue's table lists the first this many


def _threshold(request: HttpRequest) -> float:
    """The queue's Dawid-Skene threshold from ``?threshold=`` (0-1), else the default."""
    raw = request.GET.get("threshold") or request.POST.get("threshold") or ""
    try:
        value = float(raw)
    except ValueError:
        return selectors.DEFAULT_THRESHOLD
    return value if 0.0 <= value <= 1.0 else selectors.DEFAULT_THRESHOLD


def _int_param(request: HttpRequest, name: str) -> int | None:
    try:
        return int(request.GET.get(name, ""))
    except ValueError:
        return None


def _queue_url(slug: str, threshold: float, **params: int) -> str:
    query = urlencode({"threshold": threshold, **params})
    return f"{reverse('annotation:adjudicate', args=[slug])}?{query}"


def _on_screen(choice: str, shown_left: str) -> str:
    """A stored verdict (a Choice value) in the words of the screen whose left response is
    ``shown_left``: "Left better", "Right better", "Tie" or "Both bad"."""
    pick = choice
    if choice in SCREEN_PAIR:
        pick = screen_side(choice, shown_left=shown_left, pair=SCREEN_PAIR)
    return VERDICT_WORDS[pick]


def _votes_on_screen(votes: dict[str, int], shown_left: str) -> list[tuple[str, int]]:
    """The votes ({stored choice: n}) as (screen words, n): left first, then right, tie, both bad."""
    words = {_on_screen(choice, shown_left): n for choice, n in votes.items()}
    return [(word, words[word]) for word in VERDICT_WORDS.values() if word in words]


def _votes_without_sides(votes: dict[str, int]) -> str:
    """The votes of a pair not on screen, naming no side (the list must not tell which response
    the adjudicator will see where): "2 to 1" for the two responses, the larger first, then ties
    and "both bad" ("tie x 1", with a multiplication sign); "" for no votes."""
    parts = []
    a, b = (votes.get(side, 0) for side in SCREEN_PAIR)
    if a or b:
        parts.append(f"{max(a, b)} to {min(a, b)}")
    parts += [
        f"{VERDICT_WORDS[c].lower()} {TIMES} {votes[c]}"
        for c in ("tie", "both_bad")
        if votes.get(c)
    ]
    return ", ".join(parts)


@role_required(ML_ENGINEER, ADJUDICATOR)
@pairwise_only("Adjudication")
def adjudicate(request: HttpRequest, slug: str) -> HttpResponse:
    """The queue and one comparison to decide: the first in the queue, the first after ``?after=ID``
    (a skip), or ``?comparison=ID`` (any of the project's, e.g. to re-adjudicate)."""
    project = get_object_or_404(Project, slug=slug)
    threshold = _threshold(request)
    queue = selectors.adjudication_queue(project=project, threshold=threshold)
    asked, after = _int_param(request, "comparison"), _int_param(request, "after")
    entry = None
    if asked is not None:
        entry = next((e for e in queue if e.comparison_id == asked), None)
        comparison_id = asked
    else:
        entry = next((e for e in queue if after is None or e.comparison_id > after), None)
        comparison_id = entry.comparison_id if entry else None
    comparison = (
        selectors.queue_comparison(project=project, comparison_id=comparison_id)
        if comparison_id is not None
        else None
    )
    context: dict[str, object] = {
        "project": project,
        "queue": queue,
        "queue_votes": [(e, _votes_without_sides(e.votes)) for e in queue[:QUEUE_LISTED]],
        "threshold": threshold,
        "reasons": {r: sum(r in e.reasons for e in queue) for r in selectors.QUEUE_REASONS},
        "entry": entry,
        "comparison": comparison,
    }
    if comparison is not None:
        shown_left = secrets.choice(SCREEN_PAIR)  # sides randomised as on the labelling screen
        left, right = screen_order(
            shown_left, pair=SCREEN_PAIR, values=(comparison.response_a, comparison.response_b)
        )
        current = selectors.adjudication_for(comparison)
        history = selectors.adjudication_history(comparison)
        context |= {
            "shown_left": shown_left,
            "prompt": comparison.prompt,
            "left": left,
            "right": right,
            "votes": _votes_on_screen(entry.votes, shown_left) if entry else [],
            "current": current,
            "current_words": _on_screen(current.choice, shown_left) if current else "",
            "history": [(a, _on_screen(a.choice, shown_left)) for a in history],
            "flags": selectors.comparison_flags(comparison),
            "skip_url": _queue_url(slug, threshold, after=comparison.pk),
        }
    return render(request, "annotation/adjudication/queue.html", context)


@role_required(ML_ENGINEER, ADJUDICATOR, methods=("POST",))
@pairwise_only("Adjudication")
def adjudicate_save(request: HttpRequest, slug: str, comparison_id: int) -> HttpResponse:
    """Record the verdict (pick, shown_left, note) on the comparison, then show the next one."""
    project = get_object_or_404(Project, slug=slug)
    comparison = get_object_or_404(project.comparisons.select_related("project"), pk=comparison_id)
    threshold = _threshold(request)
    reasons = [r for r in request.POST.getlist("reason") if r in selectors.QUEUE_REASONS]
    try:
        services.adjudication_record(
            comparison=comparison,
            decided_by=request.user,
            pick=request.POST.get("pick", ""),
            shown_left=request.POST.get("shown_left", ""),
            note=request.POST.get("note", ""),
            reasons=reasons,
        )
    except services.AdjudicationError as exc:
        messages.error(request, str(exc))
        return redirect(_queue_url(slug, threshold, comparison=comparison.pk))
    messages.success(request, f"Verdict on comparison {comparison.pk} saved.")
    return redirect(_queue_url(slug, threshold, after=comparison.pk))


@login_required
@require_POST
def label_flag(request: HttpRequest, slug: str, assignment_id: int) -> HttpResponse:
    """Flag the pair of the annotator's assignment (reason, note); the pair stays on screen."""
    project = _member_project(request, slug)
    error = ""
    try:
        flag = services.flag_create(
            annotator=request.user,
            assignment_id=assignment_id,
            reason=request.POST.get("reason", ""),
            note=request.POST.get("note", ""),
        )
        done = (
            f"Flagged as {Flag.Reason(flag.reason).label.lower()}; an adjudicator will look at it."
        )
    except services.AdjudicationError as exc:
        error, done = str(exc), ""
    if _wants_json(request):
        return JsonResponse(
            {"ok": not error, "message": error or done}, status=400 if error else 200
        )
    if error:
        messages.error(request, error)
    else:
        messages.success(request, done)
    return redirect("annotation:label", slug=project.slug)
