"""The OpenAI-compatible chat client against a scripted local HTTP server (tests/helpers/
fake_chat_server.py): order kept, the request body and key header, retries with exponential backoff
and jitter, Retry-After, giving up, no retry on a client error, timeouts, the concurrency cap."""

import random
import socket
import threading

import pytest

from tests.helpers.fake_chat_server import Reply, completion, echo_last_message, fake_chat_server
from training.recipes.chat_client import (
    ChatClient,
    EndpointConfig,
    EndpointError,
    backoff_delay,
    retry_after_seconds,
)


def _client(server, sleeps: list[float] | None = None, **kwargs) -> ChatClient:
    """A client of the fake server that records its waits in ``sleeps`` instead of sleeping."""
    config = EndpointConfig(base_url=server.base_url, model="m", **kwargs)
    waits = sleeps if sleeps is not None else []
    return ChatClient(config, environ={}, sleep=waits.append, rng=random.Random(0))


def _conversations(n: int) -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": f"q{k}"}] for k in range(n)]


def _script(*replies: Reply):
    """Answer the k-th request with replies[k] (the last one again after the end)."""
    count = iter(range(10_000))
    lock = threading.Lock()

    def respond(body, headers):
        with lock:
            k = next(count)
        return replies[min(k, len(replies) - 1)]

    return respond


def test_answers_come_back_in_the_conversations_order_with_the_request_fields():
    """Eight conversations through four workers: answer k belongs to conversation k; each request
    carries the model, the messages and the sampling options; the key is read from the variable
    the config names and sent as a bearer token."""
    with fake_chat_server(echo_last_message) as server:
        config = EndpointConfig(
            base_url=server.base_url, model="served", api_key_env="MY_KEY", max_concurrency=4
        )
        client = ChatClient(config, environ={"MY_KEY": "s3cret"})
        answers = client.generate(_conversations(8), max_tokens=5, temperature=0.0, seed=7)
    assert answers == [f"echo: q{k}" for k in range(8)]
    body = next(r for r in server.requests if r["messages"][0]["content"] == "q3")
    assert body == {
        "model": "served", "messages": [{"role": "user", "content": "q3"}],
        "max_tokens": 5, "temperature": 0.0, "seed": 7,
    }  # fmt: skip
    assert {h["authorization"] for h in server.headers} == {"Bearer s3cret"}


def test_completions_report_tokens_and_whether_the_answer_ended():
    with fake_chat_server(_script(completion("cut", tokens=5, finish="length"))) as server:
        [answer] = _client(server).completions(_conversations(1), max_tokens=5, temperature=0)
    assert (answer.text, answer.n_tokens, answer.finished) == ("cut", 5, False)


def test_an_unset_key_variable_is_an_error_naming_it():
    config = EndpointConfig(base_url="http://127.0.0.1:1/v1", model="m", api_key_env="NOPE_KEY")
    with pytest.raises(EndpointError, match="NOPE_KEY is not set"):
        ChatClient(config, environ={})


def test_server_errors_are_retried_with_growing_jittered_waits():
    """Two 503s then an answer: three requests, two waits; the k-th wait lies in
    [d_k / 2, d_k] with d_k = 0.5 * 2**k, i.e. [0.25, 0.5] then [0.5, 1.0]."""
    sleeps: list[float] = []
    script = _script(Reply(503, {"error": "busy"}), Reply(502, {}), completion("ok"))
    with fake_chat_server(script) as server:
        answers = _client(server, sleeps, backoff_s=0.5).generate(
            _conversations(1), max_tokens=4, temperature=0
        )
    assert answers == ["ok"] and len(server.requests) == 3
    assert 0.25 <= sleeps[0] <= 0.5 and 0.5 <= sleeps[1] <= 1.0


def test_backoff_delay_doubles_up_to_the_cap_with_equal_jitter():
    """d = min(cap, 0.5 * 2**k): 0.5, 1, 2, 4, then 5 (the cap); the wait is d/2 + U(0, d/2),
    so with U's draw u in [0, 1) it is d * (1 + u) / 2."""
    ceilings = [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    draws = random.Random(3)
    expected_rng = random.Random(3)
    for k, ceiling in enumerate(ceilings):
        wait = backoff_delay(k, backoff_s=0.5, max_backoff_s=5.0, rng=draws)
        assert wait == pytest.approx(ceiling / 2 + expected_rng.uniform(0, ceiling / 2))
        assert ceiling / 2 <= wait <= ceiling


def test_retry_after_is_honoured_and_capped():
    """429 with Retry-After: 2 waits exactly 2 s (no jitter); 120 s is capped at max_backoff_s."""
    sleeps: list[float] = []
    script = _script(
        Reply(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "2"}),
        Reply(429, {}, headers={"Retry-After": "120"}),
        completion("ok"),
    )
    with fake_chat_server(script) as server:
        _client(server, sleeps, max_backoff_s=10).generate(
            _conversations(1), max_tokens=4, temperature=0
        )
    assert sleeps == [2.0, 10.0]


def test_retry_after_reads_seconds_and_http_dates():
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412490.0) == 0.0
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None


def test_it_gives_up_after_max_retries_and_says_so():
    sleeps: list[float] = []
    with (
        fake_chat_server(_script(Reply(500, {"error": {"message": "boom"}}))) as server,
        pytest.raises(EndpointError, match=r"HTTP 500: boom \(gave up after 3 attempts\)"),
    ):
        _client(server, sleeps, max_retries=2).generate(
            _conversations(1), max_tokens=4, temperature=0
        )
    assert len(server.requests) == 3 and len(sleeps) == 2


def test_a_client_error_is_not_retried():
    """400 (a bad request) cannot be cured by asking again: one request, the server's message."""
    error = Reply(400, {"error": {"message": "model 'm' not found"}})
    refused = pytest.raises(EndpointError, match="HTTP 400: model 'm' not found")
    with fake_chat_server(_script(error)) as server, refused as raised:
        _client(server).generate(_conversations(1), max_tokens=4, temperature=0)
    assert raised.value.status == 400 and len(server.requests) == 1


def test_an_answer_that_is_not_a_completion_is_an_error():
    with (
        fake_chat_server(_script(Reply(200, {"choices": []}))) as server,
        pytest.raises(EndpointError, match=r"not a chat completion"),
    ):
        _client(server).generate(_conversations(1), max_tokens=4, temperature=0)
    with (
        fake_chat_server(_script(Reply(200, raw=b"<html>"))) as server,
        pytest.raises(EndpointError, match="not JSON"),
    ):
        _client(server).generate(_conversations(1), max_tokens=4, temperature=0)


def test_a_slow_server_times_out_and_is_retried():
    """A reply after 1 s with a 0.2 s timeout: both attempts time out, then the error says so."""
    with (
        fake_chat_server(_script(Reply(delay_s=1.0, body={}))) as server,
        pytest.raises(EndpointError, match=r"no answer within 0.2 s.*2 attempts"),
    ):
        _client(server, timeout_s=0.2, max_retries=1).generate(
            _conversations(1), max_tokens=4, temperature=0
        )
    assert len(server.requests) == 2


def test_a_closed_port_is_a_connection_error_after_the_retries():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = EndpointConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=1)
    sleeps: list[float] = []
    client = ChatClient(config, environ={}, sleep=sleeps.append)
    with pytest.raises(EndpointError, match=r"cannot connect.*2 attempts"):
        client.generate(_conversations(1), max_tokens=4, temperature=0)
    assert len(sleeps) == 1


def test_no_more_than_max_concurrency_requests_are_in_flight():
    """Twelve slow requests (0.15 s each) with a cap of 3: the server never sees more than 3 at
    once, and sees 3 (the pool is used)."""
    slow = _script(Reply(delay_s=0.15, body=completion("x").body))
    with fake_chat_server(slow) as server:
        _client(server, max_concurrency=3).generate(_conversations(12), max_tokens=4, temperature=0)
    assert server.most_in_flight == 3 and len(server.requests) == 12


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"base_url": "ftp://x/v1"}, "base_url must be an http"),
        ({"base_url": "localhost:8000"}, "base_url must be an http"),
        ({"model": " "}, "model must name"),
        ({"api_key_env": "MY-KEY"}, "api_key_env must be"),
        ({"timeout_s": 0}, "timeout_s must be > 0"),
        ({"max_retries": -1}, "max_retries must be >= 0"),
        ({"max_concurrency": 0}, "max_concurrency must be >= 1"),
    ],
)
def test_a_bad_config_is_refused_with_the_field_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EndpointConfig(**{"base_url": "http://127.0.0.1:8000/v1", "model": "m", **kwargs})
