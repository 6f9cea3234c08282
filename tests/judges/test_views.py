"""The judges page (create a version and launch it) and the judge report page."""

import pytest
from django.urls import reverse

from monitoring.models import Judge, JudgeOutput
from monitoring.services.judges import judge_create, judge_verdicts_store
from tests.helpers.clients import logged_in
from tests.helpers.judge_world import JUDGE_MODEL

pytestmark = pytest.mark.django_db


def rm_judge(project, run) -> Judge:
    return judge_create(
        project=project, name="rm", kind="reward_model", created_by=None, reward_run=run
    )


def test_post_creates_the_next_version_and_queues_its_job(
    judged_project, reward_run, ml_engineer, django_capture_on_commit_callbacks
):
    client = logged_in(ml_engineer)
    url = reverse("monitoring:judges", args=["judged"])
    form = {"name": "rm", "kind": "reward_model", "reward_run": reward_run.pk, "tie_band": "",
            "template": "ignored {prompt}", "max_new_tokens": 256}  # fmt: skip
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post(url, form)
    assert response.status_code == 302 and len(callbacks) == 1  # the task, sent after commit
    judge = Judge.objects.get()
    assert (judge.version, judge.status, judge.tie_band, judge.template) == (1, "queued", None, "")
    assert judge.created_by == ml_engineer
    page = client.get(url).content.decode()
    assert "rm v1" in page and "Queued" in page


def test_a_bad_template_is_refused_with_the_reason(judged_project, judge_models, ml_engineer):
    response = logged_in(ml_engineer).post(
        reverse("monitoring:judges", args=["judged"]),
        {"name": "llm", "kind": "local_llm", "model_name": JUDGE_MODEL,
         "template": "Which is better, {response_a} or {respons_b}?", "max_new_tokens": 64},
    )  # fmt: skip
    assert response.status_code == 400
    assert "unknown placeholder {respons_b} on line 1" in response.content.decode()
    assert not Judge.objects.exists()


def test_report_page_shows_the_figures_and_escapes_raw_answers(
    judged_project, reward_run, ml_engineer
):
    judge = rm_judge(judged_project, reward_run)
    comparisons = list(judged_project.comparisons.order_by("pk"))
    for comparison, first, verdict in [(comparisons[0], "a", "a"), (comparisons[0], "b", "b")]:
        JudgeOutput.objects.create(
            judge=judge, comparison=comparison, shown_first=first, raw="x", verdict=verdict,
            seconds=1.0,
        )  # fmt: skip
    JudgeOutput.objects.create(
        judge=judge, comparison=comparisons[1], shown_first="a", raw="<b>bold</b> maybe A",
        parse_error="no verdict found", seconds=1.0,
    )  # fmt: skip
    judge_verdicts_store(judge=judge)
    page = logged_in(ml_engineer).get(reverse("monitoring:judge-report", args=[judge.pk]))
    body = page.content.decode()
    assert page.status_code == 200
    assert "Swap-flip rate" in body and "1 flips on 1 pairs decisive in both orders" in body
    assert "Unparsed answers: 1" in body and "&lt;b&gt;bold&lt;/b&gt; maybe A" in body
    assert "ann1" in body and judge.annotator.username not in body.split("Agreement with")[1]


def test_run_again_queues_a_failed_version_and_refuses_a_queued_one(
    judged_project, reward_run, ml_engineer
):
    judge = rm_judge(judged_project, reward_run)
    Judge.objects.filter(pk=judge.pk).update(status="failed", error="worker lost")
    client = logged_in(ml_engineer)
    url = reverse("monitoring:judge-relaunch", args=[judge.pk])
    assert client.post(url).status_code == 302
    judge.refresh_from_db()
    assert (judge.status, judge.error) == ("queued", "")
    page = client.post(url, follow=True).content.decode()
    assert "is already queued" in page


def test_the_lead_page_links_to_the_judges(judged_project, ml_engineer):
    page = logged_in(ml_engineer).get(reverse("annotation:project-manage", args=["judged"]))
    judges = reverse("monitoring:judges", args=["judged"])
    assert f'href="{judges}" data-testid="judges-link"' in page.content.decode()
