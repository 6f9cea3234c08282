"""Start the test OpenID Connect provider (``tests/oidc_provider``, django-oidc-provider) as a second
Django process on a free port of 127.0.0.1, and point Concord's single sign-on settings at it.

``oidc_provider_running`` migrates a fresh SQLite file, generates an RSA signing key, creates the
users and one confidential client whose redirect URIs are the callbacks of the app under test, then
serves it with ``runserver`` until the ``with`` block ends (the process is then terminated).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "provider password 1"  # every provider user's password
CLIENT_ID = "concord-test-client"
CLIENT_SECRET = "concord-test-client-secret"  # a test's client, not a secret
CALLBACK_PATH = "/accounts/sso/callback/"
STARTUP_TIMEOUT_S = 60


@dataclass(frozen=True)
class RunningProvider:
    """The provider's base URL and its OpenID Connect endpoints."""

    url: str

    @property
    def issuer(self) -> str:
        return self.url + "/openid"

    def configure(
        self, settings: Any, *, role_claim: str = "", role_map: dict | None = None
    ) -> None:
        """Point Concord's single sign-on at this provider (a pytest-django ``settings``)."""
        settings.CONCORD_OIDC_ENABLED = True
        settings.CONCORD_OIDC_CLIENT_ID = settings.OIDC_RP_CLIENT_ID = CLIENT_ID
        settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
        settings.CONCORD_OIDC_PROVIDER_NAME = "Test IdP"
        settings.CONCORD_OIDC_ISSUER = self.issuer
        settings.OIDC_OP_AUTHORIZATION_ENDPOINT = self.issuer + "/authorize"
        settings.OIDC_OP_TOKEN_ENDPOINT = self.issuer + "/token"
        settings.OIDC_OP_USER_ENDPOINT = self.issuer + "/userinfo"
        settings.OIDC_OP_JWKS_ENDPOINT = self.issuer + "/jwks"
        settings.OIDC_RP_SCOPES = "openid email profile groups"
        settings.CONCORD_OIDC_ROLE_CLAIM = role_claim
        settings.CONCORD_OIDC_ROLE_MAP = role_map or {}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _provider_env(database: Path) -> dict[str, str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "DATABASE_", "CELERY_", "CONCORD_"))
    }
    return {
        **clean,
        "DJANGO_SETTINGS_MODULE": "tests.oidc_provider.settings",
        "OIDC_TEST_PROVIDER_DB": str(database),
        "PYTHONPATH": str(ROOT),
    }


def _wait_until_up(url: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"The test OIDC provider exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - local http
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"The test OIDC provider did not answer {url} in {STARTUP_TIMEOUT_S} s")


@contextmanager
def oidc_provider_running(
    folder: Path, *, redirect_uris: list[str], users: list[dict[str, Any]]
) -> Iterator[RunningProvider]:
    """Run the provider (its database under ``folder``) for the block; ``users``: dicts with
    username, email, first_name, groups (each gets ``PASSWORD``)."""
    env = _provider_env(folder / "provider.sqlite3")
    python = [sys.executable, "-m"]
    subprocess.run(
        [*python, "django", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT, env=env, check=True, timeout=300,
    )  # fmt: skip
    spec = {
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
        "redirect_uris": redirect_uris,
        "users": [{"password": PASSWORD, **user} for user in users],
    }
    subprocess.run(
        [*python, "tests.oidc_provider.setup_provider"],
        input=json.dumps(spec), text=True, cwd=ROOT, env=env, check=True, timeout=120,
    )  # fmt: skip
    port = _free_port()
    log = (folder / "provider.log").open("w")
    process = subprocess.Popen(
        [*python, "django", "runserver", f"127.0.0.1:{port}", "--noreload"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    provider = RunningProvider(url=f"http://127.0.0.1:{port}")
    try:
        _wait_until_up(provider.issuer + "/.well-known/openid-configuration", process)
        yield provider
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
