"""API tokens on the user's own page, in a real browser: a lead opens the page from the header,
creates a token limited to one project, sees it once, uses it, and revokes it."""

from __future__ import annotations

import re
import urllib.error
import urllib.request

import pytest
from playwright.sync_api import Page, expect

from tests.factories import ProjectFactory, UserFactory
from tests.helpers.labelling_screen import PASSWORD


@pytest.fixture
def fast_hasher(browser, live_server, settings) -> None:
    """Requests ``browser`` first (a missing Chromium skips before any data is made)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _api_status(base_url: str, slug: str, token: str) -> int:
    """Status of an empty import POST with ``Authorization: Bearer token`` (no cookies): 400 when
    the token gets through to the input check, 401 refused, 403 outside its scope."""
    request = urllib.request.Request(  # noqa: S310 - an http URL of the live server
        f"{base_url}/api/projects/{slug}/imports/",
        data=b"",
        method="POST",
        headers={"Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_lead_creates_a_scoped_token_sees_it_once_uses_it_and_revokes_it(
    fast_hasher, browser, live_server, page: Page
) -> None:
    """The token shows once in a read-only field; it reaches alpha's API (400: input check) but not
    beta's (403); after a reload only its prefix is listed; after Revoke it is refused (401)."""
    UserFactory(username="lead", role="ML engineer")
    ProjectFactory(slug="alpha", name="Alpha")
    ProjectFactory(slug="beta", name="Beta")
    page.set_default_navigation_timeout(30_000)
    page.goto("/accounts/login/")
    page.fill("#id_username", "lead")
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.get_by_test_id("username").click()
    expect(page).to_have_url(re.compile(r"/accounts/me/$"))
    expect(page.get_by_role("heading", name="API tokens")).to_be_visible()

    page.fill("#id_name", "nightly import")
    page.select_option("#id_lifetime", label="30 days")
    page.select_option("#id_project", label="Alpha")
    page.get_by_role("button", name="Create token").click()
    field = page.get_by_test_id("token-value")
    expect(field).to_have_value(re.compile(r"^concord_[0-9a-f]{8}_[A-Za-z0-9_-]{43}$"))
    expect(page.get_by_test_id("new-token")).to_contain_text("shown only this once")
    token = field.input_value()
    prefix = token.split("_")[1]
    assert _api_status(live_server.url, "alpha", token) == 400
    assert _api_status(live_server.url, "beta", token) == 403

    page.goto("/accounts/me/")
    expect(page.get_by_test_id("token-value")).to_have_count(0)
    assert token not in page.content()
    row = page.locator(f"tr[data-token='{prefix}']")
    expect(row).to_contain_text(f"concord_{prefix}_…")
    expect(row).to_contain_text("Alpha")
    expect(row.locator("td.status")).to_have_text("active")

    row.get_by_role("button", name="Revoke").click()
    expect(page.locator(".messages")).to_contain_text("“nightly import” revoked")
    expect(page.locator(f"tr[data-token='{prefix}'] td.status")).to_have_text("revoked")
    assert _api_status(live_server.url, "alpha", token) == 401
