"""The one headless Chromium of a test session (Debian's package, driven by sync Playwright).

``browser`` is a session fixture, registered in tests/conftest.py so that a browser test anywhere in
the tree shares it: two sync Playwright instances in one session collide ("Playwright Sync API inside
the asyncio loop"). When Chromium is missing, tests that use it skip, unless
``CONCORD_REQUIRE_BROWSER=1`` (CI), in which case they fail and say why.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = Path(os.environ.get("CONCORD_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _chromium_available() -> bool:
    return CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    """One headless Chromium for the whole session (sync Playwright)."""
    if not _chromium_available():
        message = (
            f"Chromium not found at {CHROMIUM} "
            "(set CONCORD_CHROMIUM, or run scripts/ensure_chromium.sh)"
        )
        if os.environ.get("CONCORD_REQUIRE_BROWSER") == "1":
            pytest.fail(f"CONCORD_REQUIRE_BROWSER=1 but {message}", pytrace=False)
        pytest.skip(message)

    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an asyncio event loop marked as running in the main thread from
    # start() to stop(). Django sees that running loop and raises SynchronousOnlyOperation on every
    # ORM call made from the main thread (fixtures creating data, pytest-django's flush between
    # transactional tests, and any later test in the session, since this fixture lives until the
    # session ends), although nothing here is really asynchronous: the ORM calls are plain blocking
    # calls made between Playwright calls, never from inside a coroutine. Allow them while the
    # browser is up, and put the setting back afterwards.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    playwright = sync_playwright().start()
    try:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield chromium
        finally:
            chromium.close()
    finally:
        playwright.stop()
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous
