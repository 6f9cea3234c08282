"""The stopping panel's stored figures: the task computes them (bootstraps and per-round queries),
the run page reads them (no bootstrap, a number of queries that does not grow with the rounds),
ratings schedule one debounced recomputation, and the stored panel is the fresh one."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from monitoring.models import EvalItem, EvalJudgement, EvalRound, StoppingPanelFigures
from monitoring.selectors import stopping_panel as panel_selectors
from monitoring.services import stopping_panel as panel_services
from monitoring.stats import stopping
from monitoring.tasks import stopping_panel_refresh
from tests.helpers.caches import private_cache
from tests.helpers.clients import logged_in
from tests.helpers.eval_rounds import BASELINE, hand_rated_round
from training.models import TrainingRun

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _private_cache(settings):
    """A cache of the test's own: the debounce marks must not leak between tests."""
    private_cache(settings, "stopping-panel-tests")


def _page_queries(client, run) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(reverse("monitoring:run-detail", args=[run.pk]))
    assert response.status_code == 200
    assert 'data-testid="criterion-human_usefulness"' in response.content.decode()
    return len(captured.captured_queries)


def test_the_page_reads_stored_figures_in_queries_independent_of_the_rounds(
    run_with_checkpoints, reviewers, queued, django_assert_max_num_queries
):
    """With one rated round and with four, the run page issues the same number of queries (the
    figures are one row; the rounds list and the decisions one query each)."""
    run = run_with_checkpoints
    client = logged_in(reviewers[0])
    hand_rated_round(run, reviewers)
    panel_services.stopping_panel_refresh(run=run)
    one_round = _page_queries(client, run)
    for step, usefulness in ((2, 3), (4, 5), (2, 4)):
        hand_rated_round(run, reviewers, step=step, usefulness=usefulness)
    panel_services.stopping_panel_refresh(run=run)
    assert EvalRound.objects.filter(checkpoint__run=run).count() == 4
    with django_assert_max_num_queries(one_round):
        four_rounds = _page_queries(client, run)
    assert four_rounds == one_round
    assert queued == []  # fresh figures: nothing to recompute


def test_a_page_view_runs_no_bootstrap(run_with_checkpoints, reviewers, queued, monkeypatch):
    """After the task ran, viewing the page (default and another kappa threshold) resamples
    nothing: the usefulness and Bradley-Terry bootstraps run in the task only."""
    run = run_with_checkpoints
    hand_rated_round(run, reviewers)
    calls: list[str] = []
    for name in ("usefulness_summary", "bradley_terry"):
        original = getattr(stopping, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(stopping, name, counted)
    stopping_panel_refresh.apply(args=[run.pk])
    assert sorted(calls) == ["bradley_terry", "usefulness_summary"]  # once each, in the task
    calls.clear()
    client = logged_in(reviewers[0])
    url = reverse("monitoring:run-detail", args=[run.pk])
    for query in ({}, {"kappa": "0.5"}):
        page = client.get(url, query).content.decode()
        assert 'data-testid="criterion-human_usefulness"' in page
        assert 'data-testid="bradley-terry"' in page
    assert calls == []


def test_the_stored_panel_is_the_fresh_one(run_with_checkpoints, reviewers, queued):
    """Criteria, advice, estimates, Bradley-Terry scores and the hacking signs read back from the
    stored row (through PostgreSQL's JSON) equal a computation made now, at two thresholds."""
    run = run_with_checkpoints
    hand_rated_round(run, reviewers, step=2, usefulness=3)
    hand_rated_round(run, reviewers, step=4, usefulness=5)
    stopping_panel_refresh.apply(args=[run.pk])
    stored = StoppingPanelFigures.objects.get(run=run)
    assert stored.payload == panel_selectors.stopping_panel_figures(run)
    for threshold in (None, 0.5):
        shown = panel_services.stopping_panel_state(run=run, kappa_threshold=threshold)
        fresh = panel_selectors.run_stopping_panel(run, kappa_threshold=threshold)
        assert not shown["stale"]
        for key in ("estimates", "bradley_terry", "length_ratio", "repetition", "n_rated_items",
                    "best_checkpoint", "few_items", "kappa_threshold"):  # fmt: skip
            assert shown[key] == fresh[key], key
        assert shown["panel"].criteria == fresh["panel"].criteria
        assert shown["panel"].advice == fresh["panel"].advice
        assert shown["latest_round"] == fresh["latest_round"]
    criteria = {c.key: c for c in fresh["panel"].criteria}
    assert criteria["human_usefulness"].value == pytest.approx(5.0)  # the latest round's
    assert {row["label"] for row in fresh["bradley_terry"]} == {"step 4", "step 2", BASELINE}


def test_a_finished_run_whose_rated_checkpoints_all_lose_to_the_base_is_told_to_keep_it(
    run_with_checkpoints, reviewers, queued
):
    """Two rounds against the run's base model, the base preferred on every item: the stored
    figures keep each round's win rate against the base, and the advice is to keep the base
    model, not to roll back to the better of two losing checkpoints."""
    run = run_with_checkpoints
    assert run.base_model == BASELINE
    hand_rated_round(run, reviewers, step=2, baseline_wins=True)
    hand_rated_round(run, reviewers, step=4, baseline_wins=True)
    TrainingRun.objects.filter(pk=run.pk).update(status=TrainingRun.Status.SUCCEEDED)
    run.refresh_from_db()
    stopping_panel_refresh.apply(args=[run.pk])
    stored = StoppingPanelFigures.objects.get(run=run).payload
    assert [w["estimate"] for w in stored["round_base_win_rates"]] == [0.0, 0.0]
    shown = panel_services.stopping_panel_state(run=run, kappa_threshold=None)
    assert shown["panel"].advice.startswith(
        "No rated checkpoint beats the base model: both rounds against it gave a win rate under 0.5"
    )
    page = logged_in(reviewers[0]).get(reverse("monitoring:run-detail", args=[run.pk]))
    assert "Keep the base model rather than a checkpoint of this run" in page.content.decode()


def test_the_page_says_computing_before_the_first_figures_and_queues_them_at_once(
    run_with_checkpoints, reviewers, queued
):
    """No figures yet: the panel says they are being computed (no criterion made up), one task
    run is queued without delay, and a second view queues nothing more."""
    run = run_with_checkpoints
    client = logged_in(reviewers[0])
    url = reverse("monitoring:run-detail", args=[run.pk])
    page = client.get(url).content.decode()
    client.get(url)
    assert 'data-testid="panel-computing"' in page
    assert 'data-testid="criterion-human_usefulness"' not in page
    assert 'data-testid="decision-form"' in page  # a reviewer can still record a decision
    assert queued == [{"args": [run.pk], "countdown": 0}]


def test_ratings_make_the_figures_stale_and_a_burst_schedules_one_run(
    run_with_checkpoints, reviewers, queued, django_capture_on_commit_callbacks
):
    """Twelve ratings in a row schedule one recomputation (debounced); until it runs the page
    shows the older figures marked stale; once it ran the page is current and a new rating
    schedules again."""
    run = run_with_checkpoints
    panel_services.stopping_panel_refresh(run=run)
    with django_capture_on_commit_callbacks(execute=True):
        round_ = hand_rated_round(run, reviewers)
    assert round_.items.filter(assignments__judgement__isnull=False).count() == 12
    assert [call["countdown"] for call in queued] == [panel_services.REFRESH_DELAY_SECONDS]
    page = logged_in(reviewers[0]).get(reverse("monitoring:run-detail", args=[run.pk]))
    assert 'data-testid="panel-stale"' in page.content.decode() and "recomputing" in (
        page.content.decode()
    )
    assert page.context["stopping"]["latest_round"] is None  # the figures before the ratings
    assert len(queued) == 1  # the page found the run pending: no second one
    stopping_panel_refresh.apply(args=[run.pk])
    page = logged_in(reviewers[0]).get(reverse("monitoring:run-detail", args=[run.pk]))
    assert not page.context["stopping"]["stale"]
    assert page.context["stopping"]["latest_round"] == round_
    assert panel_services.stopping_panel_refresh_schedule(run_id=run.pk) is True
    assert panel_services.stopping_panel_refresh_schedule(run_id=run.pk) is False
    assert len(queued) == 2


def test_the_task_skips_a_deleted_run(queued, db):
    """A run deleted between the schedule and the run: nothing to compute."""
    assert stopping_panel_refresh.apply(args=[987654]).get() == {"run": 987654, "status": "gone"}


def test_a_new_metric_point_makes_the_figures_stale(run_with_checkpoints, reviewers, queued):
    """Training writes metric points without telling monitoring: the fingerprint sees a new KL
    value and a replaced reward (a resumed step), so the page marks the figures out of date and
    queues a recomputation."""
    from training import services as training_services

    run = run_with_checkpoints
    training_services.metrics_record(run_id=run.pk, step=1, metrics={"reward_mean": 0.5})
    panel_services.stopping_panel_refresh(run=run)
    fresh = panel_selectors.stopping_panel_fingerprint(run)
    training_services.metrics_record(run_id=run.pk, step=1, metrics={"reward_mean": 0.75})
    replaced = panel_selectors.stopping_panel_fingerprint(run)
    training_services.metrics_record(run_id=run.pk, step=2, metrics={"kl": 0.1})
    assert len({fresh, replaced, panel_selectors.stopping_panel_fingerprint(run)}) == 3
    state = panel_services.stopping_panel_state(run=run)
    assert state["stale"] and state["panel"] is not None
    assert queued == [{"args": [run.pk], "countdown": panel_services.REFRESH_DELAY_SECONDS}]


def _scored_round(run, reviewers, *, step: int, rising: bool) -> EvalRound:
    """A rated round whose items' usefulness rises with their position (2, 3, 4, 5) and whose
    reward-model scores rise with it (``rising``: rho 1) or fall against it (rho -1)."""
    round_ = hand_rated_round(run, reviewers, step=step)
    for item in round_.items.all():
        EvalItem.objects.filter(pk=item.pk).update(
            reward_score=float(item.position if rising else -item.position)
        )
    for judgement in EvalJudgement.objects.filter(assignment__item__round=round_):
        judgement.usefulness = 2 + judgement.assignment.item.position
        judgement.save(update_fields=["usefulness"])
    return round_


def test_the_hacking_alarm_reads_the_fall_of_the_correlation_across_rounds(
    run_with_checkpoints, reviewers, queued
):
    """Each rated round's reward-vs-usefulness correlation is stored; the hacking alarm fires on
    its fall from the first round (1.0 -> -1.0), while a reward model reversed from the first round
    on (-1.0 twice) is a calibration problem: no alarm, and the detail says so."""
    run = run_with_checkpoints
    _scored_round(run, reviewers, step=2, rising=True)
    _scored_round(run, reviewers, step=4, rising=False)
    figures = panel_selectors.stopping_panel_figures(run, n_boot=100)
    assert figures["round_correlations"] == pytest.approx([1.0, -1.0])
    hacking = panel_selectors.run_stopping_panel(run, n_boot=100)["panel"].criteria[3]
    assert hacking.key == "no_hacking" and hacking.passed is False

    for item in EvalItem.objects.filter(round__checkpoint__run=run, round__checkpoint__step=2):
        EvalItem.objects.filter(pk=item.pk).update(reward_score=float(-item.position))
    hacking = panel_selectors.run_stopping_panel(run, n_boot=100)["panel"].criteria[3]
    assert hacking.passed is True
    assert "disagrees with people from the first rated round" in hacking.detail
