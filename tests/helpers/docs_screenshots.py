"""Screenshots for the documentation, taken by browser tests so they never go stale.

``docs_screenshot(page, "labelling")`` writes ``docs/img/labelling.png`` when the environment has
``CONCORD_DOCS_SCREENSHOTS=1`` (``CONCORD_DOCS_SCREENSHOTS=1 make test
PYTEST_ARGS=tests/browser/test_tutorial.py``) and does nothing otherwise, so the normal
suite leaves the committed images alone. Images are the viewport only (1200 x 760) or one element,
so each stays near a hundred kilobytes."""

from __future__ import annotations

import os
from pathlib import Path

from playwright.sync_api import Locator, Page

DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
ENV = "CONCORD_DOCS_SCREENSHOTS"
VIEWPORT = {"width": 1200, "height": 760}


def screenshots_wanted() -> bool:
    """The run was asked to write the documentation's screenshots."""
    return os.environ.get(ENV) == "1"


def docs_screenshot(
    page: Page, name: str, *, element: Locator | None = None, top: Locator | None = None
) -> Path | None:
    """Write ``docs/img/<name>.png`` from ``page`` (or one ``element`` of it) when screenshots are
    wanted; ``top``: scroll the page so that this element is at the top first. Returns the path
    written, or None."""
    if not screenshots_wanted():
        return None
    page.set_viewport_size(VIEWPORT)
    if top is not None:
        top.evaluate("element => element.scrollIntoView({block: 'start'})")
    raw = element.screenshot() if element is not None else page.screenshot()
    DOCS_IMG.mkdir(parents=True, exist_ok=True)
    path = DOCS_IMG / f"{name}.png"
    path.write_bytes(raw)
    return path
