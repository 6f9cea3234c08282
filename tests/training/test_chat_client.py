"""The OpenAI-compatible chat client (on the official ``openai`` package) against a scripted local
HTTP server (tests/helpers/fake_chat_server.py), no mocks: order kept, the request body and key
header, nothing else from the environment sent, the package's retries (exponential backoff,
Retry-After), giving up and saying how many attempts, no retry on a client error, timeouts, the
concurrency cap, and one error type whose cause is the package's typed error."""

import socket
import threading

import openai
import pytest

from tests.helpers.fake_chat_server import Reply, completion, echo_last_message, fake_chat_server
from training.inference.chat_client import ChatClient, EndpointConfig, EndpointError

# The package's documented retry waits (openai/_constants.py): 0.5 s doubling, at most 8 s, less up
# to 25 % of jitter; a Retry-After of up to 120 s is waited for as it is, a longer one not at all.
FIRST_WAIT_S, JITTER = 0.5, 0.25
# A retry-after-ms header keeps a retrying test fast without changing what it checks.
QUICK = {"retry-after-ms": "10"}
# The scheduling slack allowed above a wait on a shared, loaded machine, seconds.
SLACK_S = 1.5


def _client(server, **kwargs) -> ChatClient:
    """A client of the fake server, without a key."""
    return ChatClient(EndpointConfig(base_url=server.base_url, model="m", **kwargs), environ={})


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


def _gaps(server) -> list[float]:
    """Seconds between consecutive requests as the server saw them arrive."""
    return [b - a for a, b in zip(server.arrivals, server.arrivals[1:], strict=False)]


def test_answers_come_back_in_the_conversations_order_with_the_request_fields():
    """Eight conversations through four workers: answer k belongs to conversation k; each request
    carries the model, the messages and the sampling options and nothing else; the key is read
    from the variable the config names and sent as a bearer token."""
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


def test_only_the_named_key_reaches_the_endpoint(monkeypatch):
    """The openai package would read OPENAI_API_KEY, OPENAI_ORG_ID and OPENAI_PROJECT_ID from this
    process's environment and send them to whatever base_url it is given. A client without a key
    variable sends no Authorization header at all, and neither client sends the organisation or
    project of the worker's environment."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-of-the-worker")
    monkeypatch.setenv("OPENAI_ORG_ID", "org-of-the-worker")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-of-the-worker")
    monkeypatch.setenv("JUDGE_KEY", "judge-secret")
    with fake_chat_server(echo_last_message) as server:
        ChatClient(EndpointConfig(base_url=server.base_url, model="m")).generate(
            _conversations(1), max_tokens=4, temperature=0
        )
        named = EndpointConfig(base_url=server.base_url, model="m", api_key_env="JUDGE_KEY")
        ChatClient(named).generate(_conversations(1), max_tokens=4, temperature=0)
    sent = [{k: h[k] for k in h if k in ("authorization", "openai-organization", "openai-project")}
            for h in server.headers]  # fmt: skip
    assert sent == [{}, {"authorization": "Bearer judge-secret"}]


def test_completions_report_tokens_and_whether_the_answer_ended():
    with fake_chat_server(_script(completion("cut", tokens=5, finish="length"))) as server:
        [answer] = _client(server).completions(_conversations(1), max_tokens=5, temperature=0)
    assert (answer.text, answer.n_tokens, answer.finished) == ("cut", 5, False)


def test_an_unset_key_variable_is_an_error_naming_it():
    config = EndpointConfig(base_url="http://127.0.0.1:1/v1", model="m", api_key_env="NOPE_KEY")
    with pytest.raises(EndpointError, match="NOPE_KEY is not set"):
        ChatClient(config, environ={})


def test_server_errors_are_retried_with_growing_jittered_waits():
    """Two 503s then an answer: three requests. The package waits 0.5 * 2**k s less up to 25 %
    before retry k: at least 0.375 s, then at least 0.75 s (at most 0.5 and 1.0, plus the
    machine's scheduling slack)."""
    script = _script(Reply(503, {"error": "busy"}), Reply(502, {}), completion("ok"))
    with fake_chat_server(script) as server:
        answers = _client(server).generate(_conversations(1), max_tokens=4, temperature=0)
    assert answers == ["ok"] and len(server.requests) == 3
    first, second = _gaps(server)
    assert FIRST_WAIT_S * (1 - JITTER) <= first <= FIRST_WAIT_S + SLACK_S
    assert 2 * FIRST_WAIT_S * (1 - JITTER) <= second <= 2 * FIRST_WAIT_S + SLACK_S


def test_retry_after_is_honoured():
    """429 with Retry-After: 1 waits the whole second (the backoff alone would wait at most 0.5 s);
    429 with retry-after-ms: 50 waits 50 ms, not the 0.75 s of the second backoff step."""
    script = _script(
        Reply(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "1"}),
        Reply(429, {}, headers={"retry-after-ms": "50"}),
        completion("ok"),
    )
    with fake_chat_server(script) as server:
        _client(server).generate(_conversations(1), max_tokens=4, temperature=0)
    first, second = _gaps(server)
    assert 1.0 <= first <= 1.0 + SLACK_S
    assert 0.05 <= second < 2 * FIRST_WAIT_S * (1 - JITTER)


def test_a_retry_after_beyond_two_minutes_is_not_waited_for():
    """The package does not sleep 300 s inside a job: the 429 is final at once."""
    script = _script(Reply(429, {"error": {"message": "quota"}}, headers={"Retry-After": "300"}))
    with fake_chat_server(script) as server, pytest.raises(EndpointError, match="HTTP 429: quota"):
        _client(server).generate(_conversations(1), max_tokens=4, temperature=0)
    assert len(server.requests) == 1


def test_it_gives_up_after_max_retries_and_says_so():
    error = Reply(500, {"error": {"message": "boom"}}, headers=QUICK)
    with (
        fake_chat_server(_script(error)) as server,
        pytest.raises(
            EndpointError, match=r"HTTP 500: boom \(gave up after 3 attempts\)"
        ) as raised,
    ):
        _client(server, max_retries=2).generate(_conversations(1), max_tokens=4, temperature=0)
    assert len(server.requests) == 3 and raised.value.status == 500
    assert isinstance(raised.value.__cause__, openai.InternalServerError)


def test_a_client_error_is_not_retried():
    """400 (a bad request) cannot be cured by asking again: one request, the server's message, and
    the package's typed error as the cause."""
    error = Reply(400, {"error": {"message": "model 'm' not found"}})
    refused = pytest.raises(EndpointError, match=r"HTTP 400: model 'm' not found$")
    with fake_chat_server(_script(error)) as server, refused as raised:
        _client(server).generate(_conversations(1), max_tokens=4, temperature=0)
    assert raised.value.status == 400 and len(server.requests) == 1
    assert isinstance(raised.value.__cause__, openai.BadRequestError)


def test_an_error_body_in_plain_text_is_shown_as_it_is():
    with (
        fake_chat_server(_script(Reply(404, raw=b"no such route\n"))) as server,
        pytest.raises(EndpointError, match=r"HTTP 404: no such route$"),
    ):
        _client(server).generate(_conversations(1), max_tokens=4, temperature=0)


def test_an_answer_that_is_not_a_completion_is_an_error():
    for body in ({"choices": []}, {}):
        with (
            fake_chat_server(_script(Reply(200, body))) as server,
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
        pytest.raises(EndpointError, match=r"no answer within 0.2 s.*2 attempts") as raised,
    ):
        _client(server, timeout_s=0.2, max_retries=1).generate(
            _conversations(1), max_tokens=4, temperature=0
        )
    assert len(server.requests) == 2 and raised.value.status is None
    assert isinstance(raised.value.__cause__, openai.APITimeoutError)


def test_a_closed_port_is_a_connection_error_after_the_retries():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = EndpointConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=1)
    with pytest.raises(EndpointError, match=r"cannot connect.*2 attempts") as raised:
        ChatClient(config, environ={}).generate(_conversations(1), max_tokens=4, temperature=0)
    assert isinstance(raised.value.__cause__, openai.APIConnectionError)


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
