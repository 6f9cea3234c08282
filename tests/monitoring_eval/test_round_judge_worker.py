"""A round's judge on a real Celery worker subprocess (Redis broker, PostgreSQL): launched from the
round page, the judge_round task runs on the gpu queue to the end; a duplicated message answers
each (item, order) once."""

import time

import pytest
from django.urls import reverse

from monitoring.models import EvalJudgeVerdict, EvalRound
from monitoring.tasks import judge_round
from tests.helpers.clients import logged_in
from tests.helpers.judge_world import gpu_worker
from tests.helpers.judged_rounds import judged_round, rm_judge

gpu_worker, rm_judge = gpu_worker, rm_judge  # the fixtures, from their modules

pytestmark = [
    pytest.mark.services,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def _wait_finished(round_: EvalRound, timeout: float = 180.0) -> EvalRound:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        round_.refresh_from_db()
        if round_.judge_status in ("succeeded", "failed"):
            return round_
        time.sleep(0.3)
    raise AssertionError(f"timed out: the judge is {round_.judge_status}")


def test_the_round_page_runs_its_judge_on_the_gpu_worker(
    run_with_checkpoints, rm_judge, reviewers, gpu_worker
):
    """Run the judge from the round page: the worker answers the 6 items in both orders."""
    round_ = judged_round(run_with_checkpoints, rm_judge, size=6)
    url = reverse("monitoring:eval-round", args=[round_.pk])
    assert logged_in(reviewers[0]).post(url, {"action": "judge"}).status_code == 302
    round_ = _wait_finished(round_)
    assert round_.judge_status == "succeeded", round_.judge_error
    assert (round_.judge_done, round_.judge_total) == (12, 12)


def test_duplicate_messages_answer_each_item_and_order_once(
    run_with_checkpoints, rm_judge, gpu_worker
):
    round_ = judged_round(run_with_checkpoints, rm_judge, size=6)
    EvalRound.objects.filter(pk=round_.pk).update(judge_status="queued")
    for _ in range(2):
        judge_round.apply_async(args=[round_.pk], queue=gpu_worker)
    round_ = _wait_finished(round_)
    time.sleep(3)  # give the second message time to be taken and found finished
    round_.refresh_from_db()
    assert round_.judge_status == "succeeded", round_.judge_error
    assert EvalJudgeVerdict.objects.filter(item__round=round_).count() == 12
