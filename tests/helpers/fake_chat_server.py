"""A scripted OpenAI-compatible chat server on a free local port (stdlib http.server in a thread),
for the client's and the HTTP judge's tests: each request is answered by ``respond(request_body,
headers) -> Reply``, and the server records every request and the most requests it saw in flight."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    """What the server answers: a status, a JSON body (or raw bytes), headers, after a delay."""

    status: int = 200
    body: object = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


def completion(text: str, *, tokens: int = 3, finish: str = "stop") -> Reply:
    """A 200 chat completion whose first choice says ``text``."""
    return Reply(
        body={
            "object": "chat.completion",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text},
                 "finish_reason": finish}
            ],
            "usage": {"completion_tokens": tokens},
        }
    )  # fmt: skip


def echo_last_message(body: dict, headers: dict) -> Reply:
    """Answers "echo: <the last message's content>"."""
    return completion("echo: " + body["messages"][-1]["content"])


@dataclass
class FakeChatServer:
    respond: Callable[[dict, dict], Reply]
    requests: list[dict] = field(default_factory=list)
    headers: list[dict] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)  # time.monotonic() of each request, seconds
    in_flight: int = 0
    most_in_flight: int = 0
    port: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@contextmanager
def fake_chat_server(respond: Callable[[dict, dict], Reply]) -> Iterator[FakeChatServer]:
    """Serve ``respond`` on 127.0.0.1 at a free port until the block ends."""
    state = FakeChatServer(respond=respond)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            headers = {k.lower(): v for k, v in self.headers.items()}
            with state.lock:
                state.requests.append(body)
                state.headers.append(headers)
                state.arrivals.append(time.monotonic())
                state.in_flight += 1
                state.most_in_flight = max(state.most_in_flight, state.in_flight)
            try:
                reply = state.respond(body, headers)
                time.sleep(reply.delay_s)
            finally:
                with state.lock:
                    state.in_flight -= 1
            data = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
