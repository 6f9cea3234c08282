"""A judge job on a real Celery worker subprocess (Redis broker, PostgreSQL): launched from the
judges page, run on the gpu queue to the end (an endpoint judge: on the default queue); a duplicated
message answers nothing twice."""

import time

import pytest
from django.urls import reverse

from monitoring.models import Judge, JudgeOutput
from monitoring.services.judges import judge_create
from monitoring.stats.judging import DEFAULT_TEMPLATE
from monitoring.tasks import judge_run
from tests.helpers.clients import logged_in
from tests.helpers.fake_chat_server import fake_chat_server
from tests.helpers.judge_world import prefers_a

pytestmark = [
    pytest.mark.services,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def _wait_finished(judge: Judge, timeout: float = 180.0) -> Judge:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        judge.refresh_from_db()
        if judge.status in ("succeeded", "failed"):
            return judge
        time.sleep(0.3)
    raise AssertionError(f"timed out: judge is {judge.status}, {judge.done}/{judge.total}")


def test_judge_launched_from_the_page_runs_on_the_gpu_worker(
    judged_project, reward_run, ml_engineer, gpu_worker
):
    response = logged_in(ml_engineer).post(
        reverse("monitoring:judges", args=["judged"]),
        {"name": "rm", "kind": "reward_model", "reward_run": reward_run.pk, "max_new_tokens": 1,
         "template": "x"},
    )  # fmt: skip
    assert response.status_code == 302
    judge = _wait_finished(Judge.objects.get())
    assert judge.status == "succeeded", judge.error
    assert (judge.done, judge.total) == (12, 12)
    assert judge.started_at and judge.finished_at and judge.tie_band is not None
    assert judge.annotator.judgements.count() == 6


def test_duplicate_messages_answer_each_order_once(judged_project, reward_run, gpu_worker):
    judge = judge_create(
        project=judged_project, name="rm", kind="reward_model", created_by=None,
        reward_run=reward_run, tie_band=0.0,
    )  # fmt: skip
    Judge.objects.filter(pk=judge.pk).update(status="queued")
    for _ in range(2):
        judge_run.apply_async(args=[judge.pk], queue=gpu_worker)
    judge = _wait_finished(judge)
    time.sleep(3)  # give the second message time to be taken and found finished
    judge.refresh_from_db()
    assert judge.status == "succeeded", judge.error
    assert JudgeOutput.objects.filter(judge=judge).count() == 12


def test_an_endpoint_judge_runs_on_the_default_queue_worker(
    judged_project, ml_engineer, default_worker
):
    """An openai-kind judge launched from the page reaches the worker of the default queue (no gpu
    worker runs here), which asks the endpoint (a scripted server in this process) for all 12."""
    with fake_chat_server(prefers_a) as server:
        response = logged_in(ml_engineer).post(
            reverse("monitoring:judges", args=["judged"]),
            {"name": "served", "kind": "openai", "endpoint_url": server.base_url,
             "served_model": "smol", "template": DEFAULT_TEMPLATE, "max_new_tokens": 8},
        )  # fmt: skip
        assert response.status_code == 302
        judge = _wait_finished(Judge.objects.get())
    assert judge.status == "succeeded", judge.error
    assert (judge.done, len(server.requests)) == (12, 12)
