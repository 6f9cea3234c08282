"""Browser-test helpers shared by every page family."""

from __future__ import annotations

from playwright.sync_api import Page

PASSWORD = "correct horse battery"  # UserFactory's password


def log_in(page: Page, user) -> None:
    """Log ``user`` (made by UserFactory) in through the login form."""
    page.goto("/accounts/login/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
