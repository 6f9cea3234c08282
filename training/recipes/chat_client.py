"""A client for OpenAI-compatible chat completion servers (stdlib only: no torch, no Django).

vLLM, SGLang, llama.cpp's server, TGI and hosted APIs all answer ``POST {base_url}/chat/completions``
with the same JSON. Eval rounds, HTTP judges and (optionally) PPO/RLOO evaluation generate through
``ChatClient`` instead of a model loaded in this process, so a deployment can point them at a serving
engine on its GPUs.

- ``EndpointConfig``: where and how: the base URL (ending in ``/v1``), the served model's name, the
  *name* of the environment variable that holds the API key (the key itself is never stored), the
  per-request timeout, the retry policy and the cap on requests in flight.
- ``ChatClient.generate(conversations, max_tokens=..., temperature=..., seed=...) -> list[str]``
  sends one request per conversation, at most ``max_concurrency`` at a time (a thread pool), and
  returns the answers in the conversations' order; ``completions`` returns them with their token
  counts.

Retries: a connection error, a timeout, 429 and any 5xx are retried up to ``max_retries`` times. The
k-th retry (k = 0, 1, ...) waits ``d_k = min(max_backoff_s, backoff_s * 2**k)`` seconds with "equal
jitter", uniform in ``[d_k / 2, d_k]``, so clients that failed together do not retry together; when
the server sends ``Retry-After`` (seconds or an HTTP date) the wait is that, capped at
``max_backoff_s``. Any other answer (400, 401, 404, a body that is not a completion) is a mistake
that retrying cannot fix: ``EndpointError`` at once, with the status and the server's message.
"""

from __future__ import annotations

import email.utils
import json
import os
import random
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

Message = dict[str, str]
Conversation = Sequence[Message]
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RETRIED_STATUSES = frozenset({408, 429}) | frozenset(range(500, 600))


class EndpointError(Exception):
    """A request that failed for good: the message names the URL, the status (if any) and the
    server's words. ``status`` is the last HTTP status, None for a connection error or timeout."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class EndpointConfig:
    """An OpenAI-compatible chat endpoint and how to talk to it."""

    base_url: str  # e.g. "http://127.0.0.1:8000/v1"; requests go to {base_url}/chat/completions
    model: str  # the served model's name, sent as "model"
    api_key_env: str = ""  # name of the environment variable holding the key; "" sends none
    timeout_s: float = 60.0  # per request (connect + read), seconds
    max_retries: int = 4  # retries after the first attempt (connection errors, 408, 429, 5xx)
    backoff_s: float = 0.5  # the first retry's wait before jitter, seconds; doubles per retry
    max_backoff_s: float = 30.0  # cap on one wait, Retry-After included, seconds
    max_concurrency: int = 4  # requests in flight at once

    def __post_init__(self) -> None:
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(
                f"base_url must be an http(s) URL such as http://host:8000/v1, got {self.base_url!r}"
            )
        if not self.model.strip():
            raise ValueError("model must name the served model")
        if self.api_key_env and not _ENV_NAME.match(self.api_key_env):
            raise ValueError(
                f"api_key_env must be an environment variable's name (letters, digits, _), "
                f"got {self.api_key_env!r}"
            )
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {self.timeout_s}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError("backoff_s and max_backoff_s must be >= 0 seconds")
        if self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {self.max_concurrency}")

    @property
    def completions_url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"


@dataclass(frozen=True)
class Completion:
    """One answer: its text, its length in tokens as the server counted it (0 when the server
    reports no usage), and whether it ended by itself (finish_reason "stop") rather than at
    max_tokens."""

    text: str
    n_tokens: int
    finished: bool


def backoff_delay(
    attempt: int, *, backoff_s: float, max_backoff_s: float, rng: random.Random
) -> float:
    """The wait before retry ``attempt`` (0 for the first retry), seconds: uniform in
    [d / 2, d] with d = min(max_backoff_s, backoff_s * 2**attempt)."""
    ceiling = min(max_backoff_s, backoff_s * 2.0**attempt)
    return ceiling / 2 + rng.uniform(0, ceiling / 2)


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """A Retry-After header's wait in seconds (>= 0): an integer of seconds or an HTTP date;
    None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class ChatClient:
    """Sends chat completion requests to one endpoint; safe to share between threads.

    The API key is read from the environment once, here: a configured variable that is not set is
    an error now, not a 401 on every request later. ``sleep`` and ``rng`` are injectable so tests
    can check the waits without waiting.
    """

    def __init__(
        self,
        config: EndpointConfig,
        *,
        environ: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        environ = os.environ if environ is None else environ
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if config.api_key_env:
            key = environ.get(config.api_key_env, "")
            if not key:
                raise EndpointError(
                    f"the API key's environment variable {config.api_key_env} is not set"
                )
            self._headers["Authorization"] = f"Bearer {key}"
        self._sleep = sleep
        self._rng = rng or random.Random()  # noqa: S311 jitter, not cryptography  # nosec B311
        self._rng_lock = threading.Lock()

    def generate(
        self,
        conversations: Sequence[Conversation],
        *,
        max_tokens: int,
        temperature: float,
        seed: int = 0,
        top_p: float | None = None,
    ) -> list[str]:
        """One answer per conversation, in the conversations' order (texts only)."""
        answers = self.completions(
            conversations, max_tokens=max_tokens, temperature=temperature, seed=seed, top_p=top_p
        )
        return [answer.text for answer in answers]

    def completions(
        self,
        conversations: Sequence[Conversation],
        *,
        max_tokens: int,
        temperature: float,
        seed: int = 0,
        top_p: float | None = None,
    ) -> list[Completion]:
        """One ``Completion`` per conversation, in order, with at most ``max_concurrency``
        requests in flight. Every request carries the same ``seed``, so an answer depends on its
        conversation alone, not on its position or on the other requests. The first request that
        fails for good raises its ``EndpointError`` (requests not yet started are cancelled)."""
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if not conversations:
            return []
        options: dict[str, object] = {
            "max_tokens": max_tokens,
            "temperature": temperature,
            "seed": seed,
        }
        if top_p is not None:
            options["top_p"] = top_p
        workers = min(self.config.max_concurrency, len(conversations))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="chat-client") as pool:
            futures = [pool.submit(self.complete, list(c), **options) for c in conversations]
            try:
                return [future.result() for future in futures]
            except BaseException:
                for future in futures:
                    future.cancel()
                raise

    def complete(self, messages: Conversation, **options: object) -> Completion:
        """One request (with retries): ``messages`` in, the first choice's answer out. ``options``
        go into the request body as they are (max_tokens, temperature, seed, top_p...)."""
        body = json.dumps({"model": self.config.model, "messages": list(messages), **options})
        payload = self._post_with_retries(body.encode())
        return _completion_from(payload, url=self.config.completions_url)

    def _post_with_retries(self, body: bytes) -> dict:
        config = self.config
        url = config.completions_url
        attempt = 0
        while True:
            try:
                return self._post(body)
            except _Retryable as failure:
                if attempt >= config.max_retries:
                    raise EndpointError(
                        f"{url}: {failure.reason} (gave up after {attempt + 1} attempts)",
                        status=failure.status,
                    ) from None
                if failure.retry_after is not None:
                    wait = min(failure.retry_after, config.max_backoff_s)
                else:
                    with self._rng_lock:
                        wait = backoff_delay(
                            attempt,
                            backoff_s=config.backoff_s,
                            max_backoff_s=config.max_backoff_s,
                            rng=self._rng,
                        )
                self._sleep(wait)
                attempt += 1

    def _post(self, body: bytes) -> dict:
        """One attempt: the decoded JSON body of a 2xx answer; ``_Retryable`` for what a retry may
        cure; ``EndpointError`` for the rest."""
        url = self.config.completions_url
        # The scheme was checked in EndpointConfig: http or https only, never file: or custom.
        request = urllib.request.Request(url, data=body, headers=self._headers, method="POST")  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=self.config.timeout_s) as answer:  # noqa: S310  # nosec B310
                raw = answer.read()
        except urllib.error.HTTPError as error:
            status, detail = error.code, _error_detail(error)
            if status in RETRIED_STATUSES:
                raise _Retryable(
                    f"HTTP {status}: {detail}",
                    status=status,
                    retry_after=retry_after_seconds(error.headers.get("Retry-After")),
                ) from None
            raise EndpointError(f"{url}: HTTP {status}: {detail}", status=status) from None
        except TimeoutError as error:
            raise _Retryable(f"no answer within {self.config.timeout_s:g} s ({error})") from None
        except urllib.error.URLError as error:
            if isinstance(error.reason, TimeoutError):
                raise _Retryable(f"no answer within {self.config.timeout_s:g} s") from None
            raise _Retryable(f"cannot connect: {error.reason}") from None
        except (ConnectionError, OSError) as error:  # reset or refused while reading
            raise _Retryable(f"connection failed: {error}") from None
        try:
            return json.loads(raw)
        except ValueError:
            raise EndpointError(f"{url}: the answer is not JSON: {raw[:200]!r}") from None


class _Retryable(Exception):
    def __init__(
        self, reason: str, *, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(reason)
        self.reason, self.status, self.retry_after = reason, status, retry_after


def _error_detail(error: urllib.error.HTTPError) -> str:
    """The server's message from an error body ({"error": {"message": ...}} or text), short."""
    try:
        raw = error.read()[:2000].decode("utf-8", "replace")
    except OSError:
        return error.reason or "no body"
    try:
        payload = json.loads(raw)
    except ValueError:
        return raw.strip()[:300] or str(error.reason)
    found = payload.get("error", payload) if isinstance(payload, dict) else payload
    if isinstance(found, dict):
        found = found.get("message", found)
    return str(found)[:300]


def _completion_from(payload: object, *, url: str) -> Completion:
    """The first choice of a chat completion body, or EndpointError naming what is missing."""
    try:
        choice = payload["choices"][0]  # type: ignore[index]
        text = choice["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise EndpointError(
            f"{url}: the answer is not a chat completion (no choices[0].message.content): "
            f"{json.dumps(payload)[:200]}"
        ) from None
    usage = payload.get("usage") or {}  # type: ignore[union-attr]
    return Completion(
        text=(text or "").strip(),
        n_tokens=int(usage.get("completion_tokens") or 0),
        finished=choice.get("finish_reason") == "stop",
    )
