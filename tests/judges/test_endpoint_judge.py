"""Judges of kind "openai" (an OpenAI-compatible endpoint) against a scripted local server
(tests/helpers/fake_chat_server.py): validation, the default queue, both orders with every raw answer
kept and unparseable ones recorded as such, the key from the named variable, resuming after the
endpoint failed, the page's form and the command."""

import re
import threading

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.urls import reverse

from annotation.models import Judgement
from monitoring.models import Judge, JudgeOutput
from monitoring.services import judges as judge_services
from monitoring.services.judges import JudgeError, judge_create, judge_launch, judge_run
from tests.helpers.clients import logged_in
from tests.helpers.fake_chat_server import Reply, completion, fake_chat_server
from tests.helpers.judge_world import UNDECIDED, prefers_a

pytestmark = pytest.mark.django_db


def endpoint_judge(project, server, **kwargs) -> Judge:
    args = {"project": project, "name": "served", "kind": "openai", "created_by": None,
            "endpoint_url": server.base_url, "model_name": "smol", "max_new_tokens": 32}  # fmt: skip
    return judge_create(**{**args, **kwargs})


def _run(judge: Judge) -> Judge:
    judge_launch(judge=judge)
    return judge_run(judge_id=judge.pk)


def test_both_orders_are_asked_raw_answers_kept_and_the_unparsed_recorded(judged_project):
    """6 pairs x 2 orders = 12 requests; each answer's verdict is mapped back to the stored
    responses (a in both orders); the undecided answer is stored with its reason and the pair's
    judgement is the other order's verdict alone, with that order as shown_left."""
    with fake_chat_server(prefers_a) as server:
        judge = _run(endpoint_judge(judged_project, server))
    assert judge.status == "succeeded", judge.error
    assert (judge.done, judge.total, len(server.requests)) == (12, 12, 12)
    assert {r["model"] for r in server.requests} == {"smol"}
    assert {(r["temperature"], r["max_tokens"]) for r in server.requests} == {(0.0, 32)}
    outputs = JudgeOutput.objects.filter(judge=judge)
    unparsed = outputs.get(verdict="")
    assert unparsed.raw == "Both are fine, I think." and unparsed.parse_error
    assert unparsed.shown_first == "a" and unparsed.comparison.response_a.text == UNDECIDED
    assert set(outputs.exclude(verdict="").values_list("verdict", flat=True)) == {"a"}
    stored = Judgement.objects.filter(annotator=judge.annotator)
    judgements = {
        j.comparison.response_a.text: j for j in stored.select_related("comparison__response_a")
    }
    assert {j.choice for j in judgements.values()} == {"a"} and len(judgements) == 6
    assert judgements[UNDECIDED].shown_left == "b"


def test_the_key_is_read_from_the_named_variable_and_never_stored(judged_project, monkeypatch):
    monkeypatch.setenv("CONCORD_TEST_JUDGE_KEY", "k-123")
    with fake_chat_server(prefers_a) as server:
        judge = _run(endpoint_judge(judged_project, server, api_key_env="CONCORD_TEST_JUDGE_KEY"))
    assert judge.status == "succeeded"
    assert {h["authorization"] for h in server.headers} == {"Bearer k-123"}
    assert "k-123" not in str(Judge.objects.filter(pk=judge.pk).values().get())


def test_an_unset_key_variable_fails_the_job_with_its_name(judged_project):
    with fake_chat_server(prefers_a) as server:
        judge = _run(endpoint_judge(judged_project, server, api_key_env="CONCORD_UNSET_KEY_X"))
    assert judge.status == "failed" and "CONCORD_UNSET_KEY_X is not set" in judge.error
    assert not server.requests


def test_a_dead_endpoint_fails_the_job_and_a_relaunch_resumes(judged_project, settings):
    """In batches of 4, the server answers 8 requests and then only 500s: the job fails after the
    client's retries with the server's message, keeping the two batches it finished. Launched
    again with the server healthy, it asks only the 4 missing (comparison, order) pairs."""
    lock, seen = threading.Lock(), []

    def flaky(body, headers):
        with lock:
            seen.append(1)
            healthy = len(seen) <= 8 or settings.ENDPOINT_HEALTHY
        return prefers_a(body, headers) if healthy else Reply(500, {"error": {"message": "oom"}})

    settings.ENDPOINT_HEALTHY = False
    with fake_chat_server(flaky) as server:
        judge = endpoint_judge(judged_project, server, max_concurrency=1)
        judge_services.BATCH["openai"], batch = 4, judge_services.BATCH["openai"]
        try:
            failed = _run(judge)
            assert failed.status == "failed" and "HTTP 500: oom" in failed.error
            assert JudgeOutput.objects.filter(judge=judge).count() == 8  # two batches of 4
            settings.ENDPOINT_HEALTHY = True
            asked = len(server.requests)
            done = _run(Judge.objects.get(pk=judge.pk))
        finally:
            judge_services.BATCH["openai"] = batch
    assert done.status == "succeeded" and done.done == 12
    assert len(server.requests) - asked == 4


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"endpoint_url": "localhost:8000/v1"}, "endpoint: base_url must be an http"),
        ({"model_name": ""}, "endpoint: model must name"),
        ({"api_key_env": "sk-abc123"}, "api_key_env must be"),
        ({"max_concurrency": 0}, "max_concurrency must be >= 1"),
        ({"template": "{prompt} {response_a}"}, "{response_b}"),
    ],
)
def test_bad_endpoint_settings_are_refused_and_nothing_is_written(judged_project, kwargs, message):
    users = get_user_model().objects.count()
    with fake_chat_server(prefers_a) as server, pytest.raises(JudgeError, match=re.escape(message)):
        endpoint_judge(judged_project, server, **kwargs)
    assert not Judge.objects.exists() and get_user_model().objects.count() == users


def test_an_endpoint_judge_goes_to_the_default_queue(judged_project, monkeypatch):
    sent = []
    monkeypatch.setattr(
        "monitoring.services.judges.task_send", lambda name, **kw: sent.append((name, kw))
    )
    with fake_chat_server(prefers_a) as server:
        judge_launch(judge=endpoint_judge(judged_project, server))
    [(name, options)] = sent
    assert (name, options["queue"]) == ("monitoring.tasks.judge_run", "default")


def test_the_page_creates_an_endpoint_judge(judged_project, ml_engineer, monkeypatch):
    monkeypatch.setattr("monitoring.services.judges.task_send", lambda name, **kw: None)
    form = {"name": "served", "kind": "openai", "endpoint_url": "http://vllm-host:8000/v1",
            "served_model": "Qwen/Qwen2.5-7B-Instruct", "api_key_env": "VLLM_KEY",
            "max_concurrency": 8, "timeout_s": 30,
            "template": "Compare {prompt}: {response_a} / {response_b}", "max_new_tokens": 64}  # fmt: skip
    client = logged_in(ml_engineer)
    response = client.post(reverse("monitoring:judges", args=["judged"]), form)
    assert response.status_code == 302, response.content.decode()[:2000]
    judge = Judge.objects.get()
    assert (judge.kind, judge.endpoint_url, judge.model_name, judge.api_key_env) == (
        "openai",
        "http://vllm-host:8000/v1",
        "Qwen/Qwen2.5-7B-Instruct",
        "VLLM_KEY",
    )
    assert (judge.max_concurrency, judge.timeout_s, judge.status) == (8, 30.0, "queued")
    page = client.get(reverse("monitoring:judges", args=["judged"])).content.decode()
    assert "http://vllm-host:8000/v1" in page


def test_the_command_runs_an_endpoint_judge(judged_project, capsys):
    with fake_chat_server(prefers_a) as server:
        call_command(
            "judge_run", "--project", "judged", "--judge", "served", "--endpoint",
            server.base_url, "--served-model", "smol", "--max-new-tokens", "16",
        )  # fmt: skip
    assert "served v1: succeeded, 12/12 answers" in capsys.readouterr().out


def test_a_raw_answer_with_a_nul_is_stored_with_u_fffd(judged_project):
    """The served model answers "[[A]]\\x00" (a NUL, which PostgreSQL text cannot hold): the job
    succeeds and each raw answer is stored as "[[A]]\\ufffd" (before: the save failed the job)."""
    with fake_chat_server(lambda body, headers: completion("[[A]]\x00")) as server:
        judge = _run(endpoint_judge(judged_project, server))
    assert judge.status == "succeeded", judge.error
    raws = set(JudgeOutput.objects.filter(judge=judge).values_list("raw", flat=True))
    assert raws == {"[[A]]\ufffd"}
