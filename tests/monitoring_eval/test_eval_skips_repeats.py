"""Eval rounds' skips and repeats on the shared work queue (monitoring/services/eval_queue.py): a
skipped item goes back to the pool for other reviewers and never to the same one; a repeat of an
item rated at least REPEAT_MIN_DISTANCE ratings before comes every ``repeat_every`` items with the
sides flipped, is stored apart and never counted in the round's results, and feeds each
reviewer's self-consistency figure (monitoring.stats.consistency)."""

import pytest
from django.urls import reverse

from annotation.work_queue.policy import REPEAT_MIN_DISTANCE
from monitoring.models import (
    EvalAssignment,
    EvalItem,
    EvalJudgement,
    EvalRepeatJudgement,
    EvalRound,
)
from monitoring.selectors import eval_rounds as eval_selectors
from monitoring.selectors.eval_repeats import round_repeat_consistency
from monitoring.services import eval_rounds as eval_services
from monitoring.services.eval_rounds import EvalError
from monitoring.stats.consistency import repeat_consistency
from monitoring.views.eval_rounds import RoundForm
from tests.helpers.clients import logged_in
from tests.helpers.eval_rounds import BASELINE

pytestmark = pytest.mark.django_db
Status, Kind = EvalAssignment.Status, EvalAssignment.Kind


def _open_round(run, *, size: int, **kwargs) -> EvalRound:
    """A round of ``size`` held-out prompts, open, with hand-written answers that differ."""
    round_ = eval_services.round_create(
        checkpoint=run.checkpoints.get(step=4), project=run.snapshot.export.project, size=size,
        created_by=None, baseline_model=BASELINE, enqueue=False, **kwargs,
    )  # fmt: skip
    for item in round_.items.all():
        EvalItem.objects.filter(pk=item.pk).update(
            checkpoint_text=f"CKPT answer {item.position}", baseline_text="BASE answer"
        )
    EvalRound.objects.filter(pk=round_.pk).update(status="open")
    round_.refresh_from_db()
    return round_


def _rate(round_, reviewer, *, pick="tie", usefulness=3) -> EvalAssignment | None:
    assignment = eval_services.eval_claim_next(reviewer=reviewer, round_=round_)
    if assignment is not None:
        eval_services.eval_submit(
            assignment=assignment, reviewer=reviewer, pick=pick, usefulness=usefulness
        )
    return assignment


# --- skips ------------------------------------------------------------------------------------


def test_a_skipped_item_goes_back_to_the_pool_for_another_reviewer(open_round, reviewers):
    """One reviewer per item: rev0 takes item 0 and skips it; its place is free again, so rev1's
    first claim is item 0 (the first in round order), not item 1."""
    EvalRound.objects.filter(pk=open_round.pk).update(reviewers_per_item=1)
    open_round.refresh_from_db()
    held = eval_services.eval_claim_next(reviewer=reviewers[0], round_=open_round)
    assert held.item.position == 0
    eval_services.eval_skip(reviewer=reviewers[0], assignment=held)
    held.refresh_from_db()
    assert held.status == Status.SKIPPED and held.finished_at is not None
    other = eval_services.eval_claim_next(reviewer=reviewers[1], round_=open_round)
    assert other.item_id == held.item_id


def test_a_skipped_item_is_never_shown_again_to_the_same_reviewer(open_round, reviewers):
    """rev0 skips item 0, then rates everything handed to them: items 1-3 only, and their count
    of items left drops from 4 to 3 with the skip (the skipped one is not theirs to rate)."""
    assert eval_selectors.items_left_for(open_round, reviewers[0].pk) == 4
    held = eval_services.eval_claim_next(reviewer=reviewers[0], round_=open_round)
    eval_services.eval_skip(reviewer=reviewers[0], assignment=held)
    assert eval_selectors.items_left_for(open_round, reviewers[0].pk) == 3
    positions = []
    while (assignment := _rate(open_round, reviewers[0])) is not None:
        positions.append(assignment.item.position)
    assert positions == [1, 2, 3]


def test_a_skipped_assignment_takes_no_answer_and_no_second_skip(open_round, reviewers):
    """After the skip, its late answer is refused (nothing written) and skipping it again, or an
    answered one, is refused too."""
    held = eval_services.eval_claim_next(reviewer=reviewers[0], round_=open_round)
    eval_services.eval_skip(reviewer=reviewers[0], assignment=held)
    with pytest.raises(EvalError, match="no longer assigned"):
        eval_services.eval_submit(assignment=held, reviewer=reviewers[0], pick="tie", usefulness=3)
    with pytest.raises(EvalError, match="no longer assigned"):
        eval_services.eval_skip(reviewer=reviewers[0], assignment=held)
    rated = _rate(open_round, reviewers[0])
    with pytest.raises(EvalError, match="no longer assigned"):
        eval_services.eval_skip(reviewer=reviewers[0], assignment=rated)
    assert not EvalJudgement.objects.filter(assignment=held).exists()


def test_the_skip_button_skips_and_shows_the_next_item(open_round, reviewers):
    """The screen's skip form posts to eval-skip: the item is skipped and the next one shown;
    another reviewer's assignment cannot be skipped (404)."""
    client = logged_in(reviewers[0])
    rate_url = reverse("monitoring:eval-rate", args=[open_round.pk])
    client.get(rate_url)
    held = EvalAssignment.objects.get(reviewer=reviewers[0])
    skip_url = reverse("monitoring:eval-skip", args=[open_round.pk, held.pk])
    assert skip_url in client.get(rate_url).content.decode()
    page = client.post(skip_url, follow=True).content.decode()
    assert "Skipped: another reviewer rates that one." in page
    assert "<strong>CKPT</strong> answer 1" in page
    held.refresh_from_db()
    assert held.status == Status.SKIPPED
    assert logged_in(reviewers[1]).post(skip_url).status_code == 404


# --- repeats ----------------------------------------------------------------------------------


def test_a_repeat_comes_when_due_and_far_enough_with_the_sides_flipped(
    run_with_checkpoints, reviewers
):
    """repeat_every 3: a repeat is due when 2, 5 or 8 items are done; at 2 and 5 no rating is
    REPEAT_MIN_DISTANCE (5) ratings old, so normal items come; at 8 the oldest, item 0, comes
    back with the other side on the left. Then nothing is left for this reviewer."""
    assert REPEAT_MIN_DISTANCE == 5
    round_ = _open_round(run_with_checkpoints, size=8, repeat_every=3)
    handed = [_rate(round_, reviewers[0]) for _ in range(9)]
    assert [(a.item.position, a.kind) for a in handed] == [
        *((k, Kind.NORMAL) for k in range(8)),
        (0, Kind.REPEAT),
    ]
    assert handed[8].shown_left != handed[0].shown_left
    assert _rate(round_, reviewers[0]) is None
    assert EvalRepeatJudgement.objects.get().assignment == handed[8]


def test_without_repeat_every_no_repeat_is_placed(run_with_checkpoints, reviewers):
    round_ = _open_round(run_with_checkpoints, size=8)
    handed = []
    while (assignment := _rate(round_, reviewers[0])) is not None:
        handed.append(assignment)
    assert round_.repeat_every == 0 and len(handed) == 8
    assert {a.kind for a in handed} == {Kind.NORMAL}


def test_a_repeat_does_not_count_in_the_round_results(run_with_checkpoints, reviewers):
    """rev0 rates the 8 items as ties with usefulness 3, then the repeat of item 0 as a win of the
    checkpoint with usefulness 5: the results still hold 8 judgements, win rate 0.5 and mean
    usefulness 3, and item 0 has one judgement."""
    round_ = _open_round(run_with_checkpoints, size=8, repeat_every=3)
    for _ in range(8):
        _rate(round_, reviewers[0])
    repeat = eval_services.eval_claim_next(reviewer=reviewers[0], round_=round_)
    assert repeat.kind == Kind.REPEAT
    # "left" is the checkpoint's side when the checkpoint is shown on the left.
    pick = "left" if repeat.shown_left == EvalAssignment.Side.CHECKPOINT else "right"
    stored = eval_services.eval_submit(
        assignment=repeat, reviewer=reviewers[0], pick=pick, usefulness=5
    )
    assert isinstance(stored, EvalRepeatJudgement) and stored.preference == "a"
    results = eval_selectors.round_results(round_, n_boot=50)
    assert results["n_judgements"] == 8
    assert results["win_rate"].estimate == pytest.approx(0.5)
    assert results["usefulness"].mean.estimate == pytest.approx(3.0)
    assert len(results["items"][0]["judgements"]) == 1


def test_self_consistency_on_a_hand_made_case():
    """Four repeats, (preference, usefulness) first -> again: (a, 3) -> (a, 3), (b, 4) -> (b, 2),
    (tie, 2) -> (a, 3), (a, 5) -> (a, 5). Usefulness changes 0, 2, 1, 0: exact 2/4, within one
    point 3/4, mean change 3/4; the same preference 3 times of 4."""
    got = repeat_consistency(
        [("a", 3), ("b", 4), ("tie", 2), ("a", 5)], [("a", 3), ("b", 2), ("a", 3), ("a", 5)]
    )
    assert (got.n, got.usefulness_exact, got.usefulness_within_1) == (4, 0.5, 0.75)
    assert (got.preference_same, got.mean_abs_change) == (0.75, 0.75)
    with pytest.raises(ValueError, match="at least one repeat"):
        repeat_consistency([], [])
    with pytest.raises(ValueError, match="differ in length"):
        repeat_consistency([("a", 3)], [])


def test_the_results_page_shows_each_reviewers_self_consistency(run_with_checkpoints, reviewers):
    """rev0's one repeat: item 0, first a tie at 3, again a tie at 4: the same preference (100%),
    not exact (0%), within one point (100%), a mean change of 1.00 point."""
    round_ = _open_round(run_with_checkpoints, size=8, repeat_every=3)
    for _ in range(8):
        _rate(round_, reviewers[0])
    _rate(round_, reviewers[0], usefulness=4)
    (row,) = round_repeat_consistency(round_)
    assert row["reviewer"] == "rev0"
    c = row["consistency"]
    assert (c.n, c.preference_same, c.usefulness_exact, c.usefulness_within_1) == (1, 1, 0, 1)
    page = logged_in(reviewers[1]).get(reverse("monitoring:eval-round", args=[round_.pk]))
    text = page.content.decode()
    assert 'data-testid="self-consistency"' in text
    assert (
        "<tr><td>rev0</td><td>1</td><td>100%</td><td>0%</td><td>100%</td><td>1.00</td></tr>" in text
    )


def test_the_round_form_takes_repeat_every(
    run_with_checkpoints, reviewers, django_capture_on_commit_callbacks
):
    """The new-round form's setting (0, off, by default) is stored with the round, and the results
    page then shows the self-consistency section, empty; round_create refuses a negative."""
    field = RoundForm().fields["repeat_every"]
    assert field.initial == 0 and field.min_value == 0
    client = logged_in(reviewers[0])
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(
            reverse("monitoring:eval-rounds"),
            {"checkpoint": run_with_checkpoints.checkpoints.get(step=4).pk,
             "project": run_with_checkpoints.snapshot.export.project.slug,
             "baseline_model": BASELINE, "size": 3, "ci_width": 0.2, "max_new_tokens": 16,
             "repeat_every": 10},
        )  # fmt: skip
    assert response.status_code == 302, response.content.decode()[:2000]
    round_ = EvalRound.objects.get()
    assert round_.repeat_every == 10
    page = client.get(reverse("monitoring:eval-round", args=[round_.pk])).content.decode()
    assert "Every 10th item" in page and "No repeat answered yet." in page
    with pytest.raises(EvalError, match="repeat_every"):
        _open_round(run_with_checkpoints, size=4, repeat_every=-1)
