"""What a round's page and the run's stopping panel say about the human win rate: nothing made up
when no human rated (identical answers alone are no human judgement), the item as the unit, the
ratings count before the figure with a warning under 30 rated items, and a finished run's advice."""

from __future__ import annotations

import pytest
from django.urls import reverse

from monitoring.models import EvalItem, EvalRound
from monitoring.selectors import eval_rounds as eval_selectors
from monitoring.services import eval_rounds as eval_services
from monitoring.services.stopping_panel import stopping_panel_refresh
from tests.helpers.clients import logged_in
from tests.helpers.eval_rounds import make_round
from tests.helpers.judged_rounds import (
    judged_round,
    rate_drawn_items,
    rm_judge,
    store_verdicts,
)
from training.models import TrainingRun

rm_judge = rm_judge  # the fixture, from the shared module

pytestmark = pytest.mark.django_db


def _make_identical(round_: EvalRound, positions: list[int]) -> None:
    for item in round_.items.filter(position__in=positions):
        EvalItem.objects.filter(pk=item.pk).update(baseline_text=item.checkpoint_text)


def _rate_all(round_: EvalRound, reviewers, preference: str = "a") -> None:
    """Every reviewer rates every item they are handed with ``preference`` and usefulness 4."""
    for reviewer in reviewers:
        rate_drawn_items(round_, reviewer, {p: (preference, 4) for p in range(round_.size)})


def test_a_judge_round_closed_without_human_ratings_shows_no_human_interval(
    run_with_checkpoints, rm_judge, reviewers
):
    """A judged round of 6 items, 3 with identical answers, the judge's verdicts on all, closed
    with no human rating. Before, the page showed the 9 ties as a Wilson interval (0.500 [0.253,
    0.747]) beside PPI's human-only 0.500 [0.500, 0.500], and the panel "nan [nan, nan]" and "at
    least 0 reviewers per item". Now the page says there is no human rating, the PPI row says what
    it needs, and the panel says no round has a human rating: no interval anywhere."""
    round_ = judged_round(run_with_checkpoints, rm_judge, size=6)
    _make_identical(round_, [0, 1, 2])
    store_verdicts(round_, {p: ("a", 4.0) for p in range(6)})
    EvalRound.objects.filter(pk=round_.pk).update(judge_status="succeeded")
    eval_services.round_close(round_=round_)

    client = logged_in(reviewers[0])
    page = client.get(reverse("monitoring:eval-round", args=[round_.pk])).content.decode()
    assert 'data-testid="no-ratings"' in page and "No human rating yet" in page
    assert 'data-testid="win-rate"' not in page
    assert 'data-testid="human-interval"' not in page  # no human-only column in the PPI table
    assert "needs human ratings of at least 2 items whose answers differ" in page
    assert "nan" not in page and "0.500 [0.500, 0.500]" not in page

    stopping_panel_refresh(run=run_with_checkpoints)
    page = client.get(
        reverse("monitoring:run-detail", args=[run_with_checkpoints.pk])
    ).content.decode()
    panel = page[page.index('data-testid="stopping-panel"') :]
    assert 'data-testid="no-human-rating"' in panel
    assert "nan" not in panel and "at least 0 reviewer" not in panel
    assert "no human rating yet, so no human interval" in panel
    assert eval_selectors.round_outcomes(round_).win_rate() is None


def test_the_ratings_count_comes_first_and_few_items_are_flagged(open_round, reviewers):
    """Items 0 and 2 of 4 identical, 3 reviewers win items 1 and 3: 6 ratings of 2 items. The page
    reads "On 6 ratings of 2 items and 2 items with identical answers counted as ties" before the
    win rate (item means 1, 0.5, 1, 0.5: 0.750 on n = 4 items) and warns that fewer than 30 items
    were rated; the run's panel carries the same warning. The e-process stepped once per completed
    item (2), not once per rating."""
    _make_identical(open_round, [0, 2])
    _rate_all(open_round, reviewers[:3])
    results = eval_selectors.round_results(open_round, n_boot=50)
    assert (results["win_rate"].n, results["win_rate"].estimate) == (4, pytest.approx(0.75))
    assert (results["n_rated_items"], results["few_items"]) == (2, True)
    assert results["eprocess"].wealth.size == 2

    client = logged_in(reviewers[0])
    page = client.get(reverse("monitoring:eval-round", args=[open_round.pk])).content.decode()
    line = page[page.index('data-testid="win-rate-line"') :]
    assert line.index("On <strong") < line.index('data-testid="win-rate"')
    assert (
        "6 ratings of 2 items</strong> and 2 items with identical answers counted as ties" in line
    )
    assert 'data-testid="win-rate">0.750<' in line
    assert 'data-testid="few-items"' in page
    assert "Only 2 items rated by reviewers, fewer than 30" in page

    stopping_panel_refresh(run=open_round.checkpoint.run)
    page = client.get(
        reverse("monitoring:run-detail", args=[open_round.checkpoint.run_id])
    ).content.decode()
    assert 'data-testid="few-items"' in page
    assert "has only 2 items rated by reviewers, fewer than 30" in page


def test_the_eprocess_waits_for_an_item_to_be_complete_while_the_round_is_open(
    open_round, reviewers
):
    """One reviewer of the 3 each item needs rates all 4 items: the round stays open and no item is
    complete, so the e-process has not bet yet (a mean that could still change is not used)."""
    _rate_all(open_round, reviewers[:1])
    open_round.refresh_from_db()
    assert open_round.status == "open"
    results = eval_selectors.round_results(open_round, n_boot=50)
    assert results["eprocess"].wealth.size == 0 and results["win_rate"].n == 4


def test_a_finished_runs_panel_never_says_continue_training(open_round, reviewers):
    """The run has ended (succeeded) with a rated round whose usefulness (4) misses 4.2: the panel
    says the run has ended and advises keeping the final checkpoint or rolling back, never to
    continue training (before it said both). A roll back is confirmed in words, not as the stored
    value "rollback"."""
    _rate_all(open_round, reviewers[:3])
    run = open_round.checkpoint.run
    # Stored while the run was running: the advice follows the run's status at page view.
    stopping_panel_refresh(run=run)
    TrainingRun.objects.filter(pk=run.pk).update(status=TrainingRun.Status.SUCCEEDED)
    page = logged_in(reviewers[0]).get(reverse("monitoring:run-detail", args=[run.pk]))
    page = page.content.decode()
    assert 'data-testid="run-ended"' in page
    assert "Continue training" not in page
    advice = page[page.index('data-testid="stopping-advice"') :]
    assert advice.startswith(
        'data-testid="stopping-advice">The run has ended before every criterion passed: keep the '
        "final checkpoint, or roll back to"
    )
    client = logged_in(reviewers[0])
    response = client.post(
        reverse("monitoring:run-decide", args=[run.pk]),
        {"decision": "rollback", "checkpoint": run.checkpoints.get(step=2).pk},
        follow=True,
    )
    assert "Decision recorded: roll back to a checkpoint." in response.content.decode()


def test_a_generating_round_says_it_is_generating_answers(run_with_checkpoints, reviewers):
    """A round whose answers are still being generated: its page says so, instead of an empty
    round waiting for ratings with "(0 tokens)" answers."""
    round_ = make_round(run_with_checkpoints)
    assert round_.status == "generating"
    page = logged_in(reviewers[0]).get(reverse("monitoring:eval-round", args=[round_.pk]))
    page = page.content.decode()
    assert 'data-testid="generating"' in page and "Generating answers" in page
    assert 'data-testid="no-ratings"' not in page and "(0 tokens)" not in page
    assert page.count("The answers are being generated.") == 4


def test_a_closed_rounds_eprocess_extends_what_the_open_round_showed(open_round, reviewers):
    """Two reviewers per item: the first wins all 4 items for the checkpoint, the second rates 2
    of them as losses, completing them (means 0.5 and 0.5, the e-process's first 2 steps while
    open). Closed by hand, the 2 items with one rating (means 1.0) follow, in the order of their
    last rating: [0.5, 0.5, 1.0, 1.0], the open round's sequence extended."""
    EvalRound.objects.filter(pk=open_round.pk).update(reviewers_per_item=2)
    open_round.refresh_from_db()
    rate_drawn_items(open_round, reviewers[0], {p: ("a", 4) for p in range(4)})
    for _ in range(2):
        assignment = eval_services.eval_claim_next(reviewer=reviewers[1], round_=open_round)
        side = "right" if assignment.shown_left == "checkpoint" else "left"
        eval_services.eval_submit(
            assignment=assignment, reviewer=reviewers[1], pick=side, usefulness=2
        )
    judgements = eval_selectors.round_judgements(open_round)
    assert eval_selectors.completed_item_outcomes(open_round, judgements) == [0.5, 0.5]
    eval_services.round_close(round_=open_round)
    closed = eval_selectors.completed_item_outcomes(open_round, judgements)
    assert closed == [0.5, 0.5, 1.0, 1.0]
    assert eval_selectors.round_results(open_round, n_boot=50)["eprocess"].wealth.size == 4
