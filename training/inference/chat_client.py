"""A client for OpenAI-compatible chat completion servers, on the official ``openai`` package (no
torch, no Django).

vLLM, SGLang, llama.cpp's server, TGI and hosted APIs all answer ``POST {base_url}/chat/completions``
with the same JSON. Eval rounds, HTTP judges and (optionally) PPO/RLOO evaluation generate through
``ChatClient`` instead of a model loaded in this process, so a deployment can point them at a serving
engine on its GPUs.

- ``EndpointConfig``: where and how: the base URL (ending in ``/v1``), the served model's name, the
  *name* of the environment variable that holds the API key (the key itself is never stored), the
  per-attempt timeout, the number of retries and the cap on requests in flight.
- ``ChatClient.generate(conversations, max_tokens=..., temperature=..., seed=...) -> list[str]``
  sends one request per conversation, at most ``max_concurrency`` at a time (a thread pool over one
  ``openai.OpenAI`` client), and returns the answers in the conversations' order; ``completions``
  returns them with their token counts.

What the ``openai`` package does (its documented policy, not ours): the transport (httpx), the
timeouts, and the retries: a connection error, a timeout, 408, 409, 429 and any 5xx are retried up to
``max_retries`` times; the k-th retry (k = 0, 1, ...) waits min(8, 0.5 * 2**k) seconds less up to 25 %
of jitter, or what the server's ``Retry-After`` / ``retry-after-ms`` says when that is at most 120 s (a
longer Retry-After is not waited for: the request fails at once). Any other answer (400, 401, 404)
is a mistake that retrying cannot fix and fails at once.

What this module adds on top: the key read from the variable the config names (and nothing else
from the environment: ``OPENAI_API_KEY``, ``OPENAI_ORG_ID`` and ``OPENAI_PROJECT_ID`` are never
sent to the endpoint), the concurrency cap, the answers in the order asked, and one error type:
every failure is an ``EndpointError`` whose message names the URL, the HTTP status (if any), the
server's words and the attempts made (the judge and eval-round pages show it as it is); the
``openai`` exception is its ``__cause__`` for callers that want the typed error.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:  # the package is imported when a client is made: configs stay light
    import openai

Message = dict[str, str]
Conversation = Sequence[Message]
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Headers the openai package would fill from OPENAI_* variables of this process; an endpoint gets
# only the key its config names.
_AMBIENT_HEADERS = ("OpenAI-Organization", "OpenAI-Project")


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
    timeout_s: float = 60.0  # per attempt (connect, and each read or write), seconds
    max_retries: int = 4  # retries after the first attempt (connection errors, 408, 409, 429, 5xx)
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


class ChatClient:
    """Sends chat completion requests to one endpoint; safe to share between threads.

    The API key is read from the environment once, here: a configured variable that is not set is
    an error now, not a 401 on every request later. ``environ`` replaces ``os.environ`` (tests).
    """

    def __init__(self, config: EndpointConfig, *, environ: Mapping[str, str] | None = None) -> None:
        import openai

        self.config = config
        environ = os.environ if environ is None else environ
        key = ""
        if config.api_key_env:
            key = environ.get(config.api_key_env, "")
            if not key:
                raise EndpointError(
                    f"the API key's environment variable {config.api_key_env} is not set"
                )
        # Without a key no Authorization header is sent; the package insists on some key, so it
        # gets a placeholder that the per-request header omission below keeps off the wire.
        omitted = (*_AMBIENT_HEADERS, *(() if key else ("Authorization",)))
        self._extra_headers: dict[str, Any] = {name: openai.omit for name in omitted}
        self._openai = openai.OpenAI(
            api_key=key or "no-key",
            base_url=config.base_url.rstrip("/"),
            timeout=config.timeout_s,
            max_retries=config.max_retries,
        )

    def close(self) -> None:
        """Close the connection pool (also done when the client is garbage-collected)."""
        self._openai.close()

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

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

    def complete(self, messages: Conversation, **options: Any) -> Completion:
        """One request (the package retries it): ``messages`` in, the first choice's answer out.
        ``options`` go into the request body as they are (max_tokens, temperature, seed, top_p...)."""
        import openai

        url = self.config.completions_url
        try:
            answer = self._openai.chat.completions.create(
                model=self.config.model,
                messages=list(messages),  # type: ignore[arg-type]
                extra_headers=self._extra_headers,
                **options,
            )
        except openai.APIStatusError as exc:
            raise EndpointError(
                f"{url}: HTTP {exc.status_code}: {_server_words(exc.body, exc.response.text)}"
                + _attempts(exc.response.request),
                status=exc.status_code,
            ) from exc
        except openai.APITimeoutError as exc:  # before APIConnectionError: it is one
            raise EndpointError(
                f"{url}: no answer within {self.config.timeout_s:g} s" + _attempts(exc.request)
            ) from exc
        except openai.APIConnectionError as exc:
            raise EndpointError(
                f"{url}: cannot connect: {exc.__cause__ or exc}" + _attempts(exc.request)
            ) from exc
        except ValueError as exc:  # a 2xx whose body does not parse as JSON
            raise EndpointError(f"{url}: the answer is not JSON ({exc})") from exc
        except openai.OpenAIError as exc:
            raise EndpointError(f"{url}: {exc}") from exc
        return _completion_from(answer, url=url)


def _attempts(request: Any) -> str:
    """' (gave up after N attempts)' from the retry count the package stamps on each request;
    '' for a request that was tried once."""
    try:
        retries = int(request.headers.get("x-stainless-retry-count", "0"))
    except (AttributeError, TypeError, ValueError):
        return ""
    return f" (gave up after {retries + 1} attempts)" if retries else ""


def _server_words(body: object, text: str) -> str:
    """The server's message from an error body ({"error": {"message": ...}}, which the package
    has already unwrapped to its "error" member, or plain text), at most 300 characters."""
    found = body
    if isinstance(found, dict):
        found = found.get("message", found)
    if not found:
        found = text.strip() or "no body"
    return str(found)[:300]


def _completion_from(answer: openai.types.chat.ChatCompletion | object, *, url: str) -> Completion:
    """The first choice of a chat completion, or EndpointError naming what is missing. The package
    builds its objects without validation, so a body that is not a completion shows up here."""
    try:
        choice = answer.choices[0]  # type: ignore[union-attr]
        text = choice.message.content
    except (AttributeError, IndexError, TypeError):
        shown = answer.model_dump_json() if hasattr(answer, "model_dump_json") else repr(answer)
        raise EndpointError(
            f"{url}: the answer is not a chat completion (no choices[0].message.content): "
            f"{shown[:200]}"
        ) from None
    usage = getattr(answer, "usage", None)
    return Completion(
        text=(text or "").strip(),
        n_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        finished=getattr(choice, "finish_reason", None) == "stop",
    )
