"""A reviewer's "reject the run, keep the base model" decision: what the stopping panel advises when
every rated checkpoint loses to the base. It cancels a run still going, keeps no checkpoint (a
roll back before it is undone, and a roll back after it undoes it), refuses a checkpoint, and the
run page says the result is the base model."""

import pytest
from django.urls import reverse

from monitoring.models import StopDecision
from monitoring.services import eval_rounds as eval_services
from monitoring.services.eval_rounds import EvalError
from monitoring.tasks import stopping_panel_refresh
from tests.helpers.caches import private_cache
from tests.helpers.clients import logged_in
from tests.helpers.eval_rounds import hand_rated_round
from training.models import RunEvent, TrainingRun

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _private_cache(settings):
    private_cache(settings, "reject-decision-tests")


def test_a_rejection_cancels_a_running_run_and_keeps_no_checkpoint(run_with_checkpoints, reviewers):
    """On a running run: the cancel is requested and the result is the base; a roll back then
    names a checkpoint again and clears the flag; a second rejection clears the checkpoint."""
    run = run_with_checkpoints
    eval_services.decision_record(run=run, decision="reject", reviewer=reviewers[0], note="worse")
    run.refresh_from_db()
    assert run.cancel_requested and RunEvent.objects.filter(run=run, action="cancel_requested")
    assert run.result_is_base and run.result_checkpoint is None
    step2 = run.checkpoints.get(step=2)
    eval_services.decision_record(
        run=run, decision="rollback", reviewer=reviewers[0], checkpoint=step2
    )
    run.refresh_from_db()
    assert run.result_checkpoint == step2 and not run.result_is_base
    eval_services.decision_record(run=run, decision="reject", reviewer=reviewers[0])
    run.refresh_from_db()
    assert run.result_is_base and run.result_checkpoint is None
    assert list(StopDecision.objects.values_list("decision", flat=True)) == [
        "reject", "rollback", "reject"
    ]  # fmt: skip


def test_a_rejection_naming_a_checkpoint_is_refused_and_changes_nothing(
    run_with_checkpoints, reviewers
):
    run = run_with_checkpoints
    with pytest.raises(EvalError, match="a rejection keeps the base model"):
        eval_services.decision_record(
            run=run, decision="reject", reviewer=reviewers[0],
            checkpoint=run.checkpoints.get(step=4),
        )  # fmt: skip
    run.refresh_from_db()
    assert not StopDecision.objects.exists()
    assert not run.result_is_base and not run.cancel_requested


def test_the_page_advises_the_rejection_and_shows_the_base_as_the_result(
    run_with_checkpoints, reviewers, queued
):
    """Two rounds against the base, the base preferred on every item, on an ended run: the reject
    choice is marked advised; posting it records the decision, and the page names the base model
    as the result with no checkpoint marked."""
    run = run_with_checkpoints
    hand_rated_round(run, reviewers, step=2, baseline_wins=True)
    hand_rated_round(run, reviewers, step=4, baseline_wins=True)
    TrainingRun.objects.filter(pk=run.pk).update(status=TrainingRun.Status.SUCCEEDED)
    stopping_panel_refresh.apply(args=[run.pk])
    client = logged_in(reviewers[0])
    url = reverse("monitoring:run-detail", args=[run.pk])
    page = client.get(url).content.decode()
    assert 'data-testid="decision-reject" data-advised' in page
    assert 'data-testid="result-is-base"' not in page
    response = client.post(
        reverse("monitoring:run-decide", args=[run.pk]),
        {"decision": "reject", "note": "both rounds lost to the base"},
    )
    assert response.status_code == 302
    page = client.get(url).content.decode()
    assert "Decision recorded: reject the run, keep the base model." in page
    assert 'data-testid="result-is-base"' in page and "(result)" not in page
    assert "Reject the run, keep the base model by rev0: both rounds lost to the base" in page
    run.refresh_from_db()
    assert run.result_is_base and run.status == TrainingRun.Status.SUCCEEDED
    runs_page = client.get(reverse("monitoring:runs")).content.decode()
    assert 'data-testid="list-result-is-base"' in runs_page and "rejected: base kept" in runs_page
