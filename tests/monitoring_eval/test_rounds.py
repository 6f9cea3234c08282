"""A human-eval round's life: creation (frozen stratified prompts, sample-size hint), generation with
tiny models, three reviewers' blind ratings with counterbalanced sides, results, the decision."""

import math

import pytest
from django.conf import settings as django_settings

from monitoring.models import EvalAssignment, EvalJudgement, EvalRound, StopDecision
from monitoring.selectors import eval_rounds as eval_selectors
from monitoring.selectors import stopping_panel
from monitoring.services import eval_rounds as eval_services
from monitoring.services.eval_rounds import EvalError
from tests.helpers.eval_rounds import make_round
from training.models import Checkpoint, RunEvent, TrainingRun

pytestmark = pytest.mark.django_db


# Sampled, not greedy: greedy tiny random Llamas answer only special tokens, which decode to the same
# empty text for both models (identical answers, never shown); sampled at seed 0 the answers differ.
def _rate_everything(round_, reviewers, verdict) -> int:
    """Each reviewer claims until nothing is left; verdict(assignment) -> (pick, usefulness)."""
    done = 0
    for reviewer in reviewers:
        while assignment := eval_services.eval_claim_next(reviewer=reviewer, round_=round_):
            pick, useful = verdict(assignment)
            eval_services.eval_submit(
                assignment=assignment, reviewer=reviewer, pick=pick, usefulness=useful
            )
            done += 1
    return done


def test_create_freezes_prompts_and_validates(run_with_checkpoints):
    """4 of the project's 8 prompts are frozen in order with one empty item each; the hint for an
    interval 0.1 wide is 385 ratings (z^2/4/0.05^2). Two baselines, none, or a bad width are refused
    and leave nothing behind."""
    round_ = make_round(run_with_checkpoints)
    assert round_.status == "generating" and round_.size == 4 and round_.sample_size_hint == 385
    assert list(round_.items.values_list("prompt_id", flat=True)) == round_.prompt_ids
    ckpt2 = run_with_checkpoints.checkpoints.get(step=2)
    with pytest.raises(EvalError, match="exactly one baseline"):
        make_round(run_with_checkpoints, baseline_checkpoint=ckpt2)
    with pytest.raises(EvalError, match="exactly one baseline"):
        make_round(run_with_checkpoints, baseline_model="")
    with pytest.raises(EvalError, match="sampling"):
        make_round(run_with_checkpoints, sampling={"temperature": -1})
    assert EvalRound.objects.count() == 1


def test_generation_task_is_routed_to_the_gpu_queue(run_with_checkpoints):
    """The task name matches the monitoring.tasks.generate_* route to the gpu queue."""
    from monitoring.tasks import generate_round_responses

    assert generate_round_responses.name == "monitoring.tasks.generate_round_responses"
    assert django_settings.CELERY_TASK_ROUTES["monitoring.tasks.generate_*"] == {"queue": "gpu"}


def test_a_round_from_creation_to_decision(run_with_checkpoints, reviewers):
    """Generation fills both responses with the chat template (tiny models, greedy); three reviewers
    rate every item once each, never an item twice; sides alternate; a fourth reviewer finds nothing
    left. The checkpoint wins 8 of 12 and ties 2: win rate 9/12 = 0.75. A stop decision cancels the
    running run; a roll back makes checkpoint 2 the run's result."""
    run = run_with_checkpoints
    round_ = make_round(run, baseline_checkpoint=run.checkpoints.get(step=2), baseline_model="")
    from monitoring.tasks import generate_round_responses

    assert generate_round_responses.apply(args=[round_.pk]).get() == "open"
    round_.refresh_from_db()
    items = list(round_.items.all())
    assert all(i.checkpoint_tokens > 0 and i.baseline_tokens > 0 for i in items)

    counter = iter(range(100))

    def verdict(assignment):
        k = next(counter)
        checkpoint_side = "left" if assignment.shown_left == "checkpoint" else "right"
        baseline_side = "right" if checkpoint_side == "left" else "left"
        return ("tie" if k in (0, 1) else baseline_side if k in (2, 3) else checkpoint_side), 4

    assert _rate_everything(round_, reviewers[:3], verdict) == 12
    assert eval_services.eval_claim_next(reviewer=reviewers[3], round_=round_) is None
    assignments = EvalAssignment.objects.filter(item__round=round_)
    assert assignments.count() == 12
    for item in items:
        sides = sorted(assignments.filter(item=item).values_list("shown_left", flat=True))
        assert len(set(assignments.filter(item=item).values_list("reviewer", flat=True))) == 3
        assert sides in (
            ["baseline", "checkpoint", "checkpoint"],
            ["baseline", "baseline", "checkpoint"],
        )
    assert assignments.filter(shown_left="checkpoint").count() == 6

    results = eval_selectors.round_results(round_, n_boot=100)
    assert results["n_judgements"] == 12 and results["n_reviewers"] == 3
    assert results["win_rate"].estimate == pytest.approx(0.75)
    assert results["usefulness"].mean.estimate == pytest.approx(4.0)
    assert len(results["over_time"]) == 12

    panel = stopping_panel.run_stopping_panel(run, n_boot=100)
    # Bradley-Terry on one comparison per item (the mean of its 3 ratings: the 4 item means sum
    # to 9/3 = 3 wins and 1 loss), 0.1 virtual wins each way: ln((3 + 0.1) / (1 + 0.1)).
    assert [row["label"] for row in panel["bradley_terry"]] == ["step 4", "step 2"]
    assert panel["bradley_terry"][0]["score"] == pytest.approx(math.log(3.1 / 1.1), abs=1e-6)
    usefulness = panel["panel"].criteria[1]
    assert usefulness.passed is False and usefulness.value == pytest.approx(4.0)  # under 4.2

    eval_services.decision_record(run=run, decision="stop", reviewer=reviewers[0], note="enough")
    run.refresh_from_db()
    assert run.cancel_requested and RunEvent.objects.filter(run=run, action="cancel_requested")
    ckpt2 = Checkpoint.objects.get(run=run, step=2)
    eval_services.decision_record(
        run=run, decision="rollback", checkpoint=ckpt2, reviewer=reviewers[0], round_=round_
    )
    assert TrainingRun.objects.get(pk=run.pk).result_checkpoint == ckpt2
    assert list(StopDecision.objects.values_list("decision", flat=True)) == ["rollback", "stop"]


def test_submit_maps_screen_sides_and_refuses_bad_input(
    open_round, run_with_checkpoints, reviewers
):
    """ "left" is the checkpoint when it was shown left, the baseline otherwise; a second rating, a
    foreign assignment, usefulness 6 and a roll back without checkpoint are refused."""
    round_ = open_round
    first = eval_services.eval_claim_next(reviewer=reviewers[0], round_=round_)
    assert (
        eval_services.eval_claim_next(reviewer=reviewers[0], round_=round_) == first
    )  # unanswered
    with pytest.raises(EvalError, match="another reviewer"):
        eval_services.eval_submit(
            assignment=first, reviewer=reviewers[1], pick="left", usefulness=3
        )
    with pytest.raises(EvalError, match="1 to 5"):
        eval_services.eval_submit(
            assignment=first, reviewer=reviewers[0], pick="left", usefulness=6
        )
    made = eval_services.eval_submit(
        assignment=first, reviewer=reviewers[0], pick="left", usefulness=3
    )
    expected = "a" if first.shown_left == "checkpoint" else "b"
    assert made.preference == expected
    with pytest.raises(EvalError, match="already been rated"):
        eval_services.eval_submit(assignment=first, reviewer=reviewers[0], pick="tie", usefulness=3)
    assert EvalJudgement.objects.count() == 1
    with pytest.raises(EvalError, match="needs the checkpoint"):
        eval_services.decision_record(
            run=run_with_checkpoints, decision="rollback", reviewer=reviewers[0]
        )
