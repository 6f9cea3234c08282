"""Eval rounds that generate through an OpenAI-compatible endpoint (a scripted local server,
tests/helpers/fake_chat_server.py): validation, the default queue, both sides' answers and token
counts from the served models, a failing endpoint, the form's fields and the round page."""

import pytest
from django.urls import reverse

from monitoring.models import EvalRound
from monitoring.services import eval_rounds as eval_services
from monitoring.services.eval_rounds import EvalError
from tests.helpers.clients import logged_in
from tests.helpers.eval_rounds import BASELINE, make_round
from tests.helpers.fake_chat_server import Reply, completion, fake_chat_server

pytestmark = pytest.mark.django_db


def served(body: dict, headers: dict) -> Reply:
    """ "<model> says: <prompt>", 7 tokens, ended by itself."""
    return completion(f"{body['model']} says: {body['messages'][-1]['content']}", tokens=7)


def endpoint_of_url(url: str) -> dict:
    return {"base_url": url, "checkpoint_model": "ckpt-4", "baseline_model": "sft"}


def endpoint_of(server) -> dict:
    return endpoint_of_url(server.base_url)


def test_a_round_generates_through_the_endpoint_and_opens(run_with_checkpoints):
    """4 prompts x 2 models = 8 requests; each item holds the checkpoint's and the baseline's
    answer to its own prompt with the server's token counts; the requests carry the round's
    sampling (max_tokens, temperature, top_p, seed)."""
    with fake_chat_server(served) as server:
        round_ = make_round(run_with_checkpoints, endpoint=endpoint_of(server))
        round_ = eval_services.round_generate(round_id=round_.pk)
    assert round_.status == "open", round_.error
    assert len(server.requests) == 8
    assert {r["model"] for r in server.requests} == {"ckpt-4", "sft"}
    assert {
        (r["max_tokens"], r["temperature"], r["top_p"], r["seed"]) for r in server.requests
    } == {(6, 1.0, 0.9, 0)}
    for item in round_.items.select_related("prompt"):
        assert item.checkpoint_text == f"ckpt-4 says: {item.prompt.text}"
        assert item.baseline_text == f"sft says: {item.prompt.text}"
        assert (item.checkpoint_tokens, item.baseline_tokens) == (7, 7)


def test_the_baseline_may_come_from_another_server(run_with_checkpoints):
    """checkpoint_model on one server, baseline_model on a second: each answers its own side."""
    with fake_chat_server(served) as first, fake_chat_server(served) as second:
        endpoint = {**endpoint_of(first), "baseline_base_url": second.base_url}
        round_ = make_round(run_with_checkpoints, endpoint=endpoint)
        round_ = eval_services.round_generate(round_id=round_.pk)
    assert round_.status == "open", round_.error
    assert {r["model"] for r in first.requests} == {"ckpt-4"}
    assert {r["model"] for r in second.requests} == {"sft"}


def test_an_endpoint_round_is_sent_to_the_default_queue(run_with_checkpoints, monkeypatch):
    sent = []
    monkeypatch.setattr(
        "monitoring.services.eval_rounds.task_send",
        lambda name, **kw: sent.append((name, kw["queue"])),
    )
    make_round(run_with_checkpoints, endpoint=endpoint_of_url("http://vllm:8000/v1"), enqueue=True)
    make_round(run_with_checkpoints, enqueue=True)
    assert sent == [
        ("monitoring.tasks.generate_round_responses", "default"),
        ("monitoring.tasks.generate_round_responses", "gpu"),
    ]


@pytest.mark.parametrize(
    "endpoint, message",
    [
        ({"base_url": "vllm:8000"}, r"endpoint \(checkpoint\): base_url must be an http"),
        ({"baseline_model": ""}, r"endpoint \(baseline\): model must name"),
        ({"api_key_env": "not a name"}, "api_key_env must be"),
        ({"tokens": 3}, r"unknown settings \['tokens'\]"),
    ],
)
def test_a_bad_endpoint_is_refused_and_nothing_is_written(run_with_checkpoints, endpoint, message):
    with pytest.raises(EvalError, match=message):
        make_round(run_with_checkpoints, endpoint={**endpoint_of_url("http://h/v1"), **endpoint})
    assert not EvalRound.objects.exists()


def test_a_failing_endpoint_fails_the_round_with_the_servers_message(run_with_checkpoints):
    refuse = lambda body, headers: Reply(404, {"error": {"message": "model 'sft' not found"}})  # noqa: E731
    with fake_chat_server(refuse) as server:
        round_ = make_round(run_with_checkpoints, endpoint=endpoint_of(server))
        round_ = eval_services.round_generate(round_id=round_.pk)
    assert round_.status == "failed" and "HTTP 404: model 'sft' not found" in round_.error
    assert round_.items.exclude(checkpoint_text="").count() == 0


def test_the_form_creates_an_endpoint_round_and_the_page_names_it(
    run_with_checkpoints, reviewers, django_capture_on_commit_callbacks
):
    client = logged_in(reviewers[0])
    checkpoint = run_with_checkpoints.checkpoints.get(step=4)
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(
            reverse("monitoring:eval-rounds"),
            {"checkpoint": checkpoint.pk, "project": run_with_checkpoints.snapshot.export.project.slug,
             "baseline_model": BASELINE, "size": 3, "ci_width": 0.2, "max_new_tokens": 16,
             "endpoint_url": " http://vllm-host:8000/v1 ", "checkpoint_served_model": "ckpt-4",
             "baseline_served_model": "sft", "api_key_env": "VLLM_KEY"},
        )  # fmt: skip
    assert response.status_code == 302, response.content.decode()[:2000]
    round_ = EvalRound.objects.get()
    assert round_.endpoint == {
        "base_url": "http://vllm-host:8000/v1", "checkpoint_model": "ckpt-4",
        "baseline_model": "sft", "api_key_env": "VLLM_KEY",
    }  # fmt: skip
    page = client.get(reverse("monitoring:eval-round", args=[round_.pk])).content.decode()
    assert 'data-testid="round-endpoint"' in page and "http://vllm-host:8000/v1" in page
