"""Logging in through the real login page, and where each role lands."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from annotation.demo import DEMO_PASSWORD

LOGIN_PATH = "/accounts/login/"
SCREENSHOT = "/tmp/concord-label.png"  # noqa: S108 - for humans to look at, never asserted on


def _log_in(page: Page, username: str, password: str = DEMO_PASSWORD) -> None:
    page.goto("/")
    expect(page).to_have_url(re.compile(re.escape(LOGIN_PATH)))
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.get_by_role("button", name="Log in").click()


def _path(page: Page) -> str:
    return re.sub(r"^https?://[^/]+", "", page.url)


@pytest.fixture(autouse=True)
def _demo_loaded(demo) -> None:
    """Every test here starts from the loaded demo."""


def test_annotator_lands_on_label_page_with_demo_project(page: Page) -> None:
    """ana (Annotator) logs in from the login page and lands on /annotation/ (the Label page),
    which shows her name in the header and the demo project as a row of her projects table."""
    _log_in(page, "ana")

    expect(page).to_have_url(re.compile(r"/annotation/$"))
    expect(page).to_have_title(re.compile(r"^Label"))
    expect(page.get_by_test_id("username")).to_have_text("ana")
    projects = page.get_by_test_id("my-projects")
    expect(projects.locator("tbody tr").filter(has_text="Demo: SmolLM2 answers")).to_have_count(1)
    page.screenshot(path=SCREENSHOT, full_page=True)


def test_wrong_password_shows_error_and_stays_on_login(page: Page) -> None:
    """A wrong password re-renders the login page with an error alert; the user is not logged in."""
    _log_in(page, "ana", password="not-the-password")

    expect(page.locator("p.error[role=alert]")).to_be_visible()
    assert _path(page).startswith(LOGIN_PATH)
    expect(page.get_by_test_id("username")).to_have_count(0)
    expect(page.locator("#id_username")).to_have_value("ana")


def test_reviewer_lands_on_review_page_with_models(page: Page) -> None:
    """rita (Reviewer) lands on /monitoring/ (the Review page) and sees the models table."""
    _log_in(page, "rita")

    expect(page).to_have_url(re.compile(r"/monitoring/$"))
    expect(page.get_by_test_id("username")).to_have_text("rita")
    expect(page.get_by_role("heading", name="Review", exact=True)).to_be_visible()
    expect(page.get_by_test_id("models")).to_be_visible()


def test_ml_engineer_lands_on_projects_page(page: Page) -> None:
    """mel (ML engineer) lands on /annotation/projects/, whose projects table lists the demo
    project."""
    _log_in(page, "mel")

    expect(page).to_have_url(re.compile(r"/annotation/projects/$"))
    expect(page.get_by_test_id("username")).to_have_text("mel")
    projects = page.get_by_test_id("projects")
    expect(projects.locator("tbody tr").filter(has_text="Demo: SmolLM2 answers")).to_have_count(1)


def test_logout_returns_to_login_and_pages_need_login_again(page: Page) -> None:
    """Clicking "Log out" returns to the login page; /annotation/ then redirects to the login page
    (with ?next=/annotation/) instead of showing the Label page."""
    _log_in(page, "ana")
    expect(page).to_have_url(re.compile(r"/annotation/$"))

    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(re.escape(LOGIN_PATH) + "$"))
    expect(page.get_by_test_id("username")).to_have_count(0)

    page.goto("/annotation/")
    expect(page).to_have_url(re.compile(re.escape(LOGIN_PATH) + r"\?next=/annotation/$"))
    expect(page.locator("#id_username")).to_be_visible()


def test_annotator_is_forbidden_from_project_overview(page: Page) -> None:
    """An annotator who opens /annotation/projects/ (for ML engineers and reviewers) gets a 403."""
    _log_in(page, "ana")
    expect(page).to_have_url(re.compile(r"/annotation/$"))

    response = page.goto("/annotation/projects/")
    assert response is not None
    assert response.status == 403
