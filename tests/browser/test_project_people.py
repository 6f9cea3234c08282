"""A project from nothing, in a real browser: a lead creates it, adds an annotator by email, the
annotator sets a password from the invite link, logs in and labels a pair; then the lead pauses
them and their screen gets no new pair.

The pairs come in through the import service (what the upload and the import command call).
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import Page, expect

from annotation.models import Assignment, Judgement, Project, ProjectEvent
from annotation.services.importing import comparisons_import
from tests.factories import UserFactory
from tests.helpers.labelling_screen import PASSWORD, settled, switch_pair

NEW_PASSWORD = "a fresh long passphrase 7"
SCREENSHOT = "/tmp/concord-people.png"  # noqa: S108 - for humans to look at, never asserted on
ROWS = [
    {"id": f"row-{i}", "prompt": f"Question {i}: how do I sort a list?",
     "response_a": f"Answer {i} alpha: sorted(items).", "response_b": f"Answer {i} bravo: items.sort()."}
    for i in range(3)
]  # fmt: skip


@pytest.fixture
def fast_hasher(browser, live_server, settings) -> None:
    """Requests ``browser`` first (a missing Chromium skips before any data is made)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _log_in(page: Page, username: str, password: str, lands_on: str) -> None:
    page.set_default_navigation_timeout(30_000)  # the first page of a session can be slow
    page.goto("/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(lands_on))


def test_lead_creates_a_project_invites_an_annotator_who_labels_then_pauses_them(
    fast_hasher, browser, live_server, page: Page
) -> None:
    UserFactory(username="lead", role="ML engineer")
    _log_in(page, "lead", PASSWORD, r"/annotation/projects/$|/monitoring/")

    # The lead creates the project (a bad overlap first: the model's error shows on the form).
    page.goto("/annotation/projects/")
    page.get_by_test_id("new-project").click()
    page.fill("#id_name", "Sorting answers")
    page.fill("#id_slug", "sorting")
    page.fill("#id_overlap", "0")
    page.fill("#id_gold_every", "0")
    page.fill("#id_repeat_every", "0")
    page.get_by_role("button", name="Create project").click()
    expect(page.locator(".errorlist")).to_contain_text("greater than or equal to 1")
    assert not Project.objects.filter(slug="sorting").exists()
    page.fill("#id_overlap", "1")
    page.get_by_role("button", name="Create project").click()
    expect(page).to_have_url(re.compile(r"/annotation/p/sorting/members/$"))
    project = Project.objects.get(slug="sorting")
    comparisons_import(project=project, lines=[json.dumps(row) for row in ROWS])

    # ... adds a new person by email, and reads the one-time invite link off the page.
    page.fill("#id_identifier", "nora@example.org")
    page.get_by_role("button", name="Add").click()
    expect(page.locator('tr[data-member="nora"]')).to_contain_text("no password yet")
    invite = page.get_by_test_id("invite-link").input_value()
    assert re.fullmatch(r"https?://\S+/annotation/invite/\S+/", invite)

    # The annotator, in a browser of their own, sets a password, logs in and labels a pair.
    nora = browser.new_context(base_url=live_server.url)
    nora.set_default_timeout(10_000)
    try:
        screen = nora.new_page()
        screen.goto(invite)
        screen.fill("#id_new_password1", NEW_PASSWORD)
        screen.fill("#id_new_password2", NEW_PASSWORD)
        screen.get_by_role("button", name="Set password").click()
        expect(screen).to_have_url(re.compile(r"/accounts/login/"))
        _log_in(screen, "nora", NEW_PASSWORD, r"/annotation/$")
        screen.get_by_test_id("start-sorting").click()  # from her project list
        expect(screen.get_by_test_id("left")).to_be_visible()
        settled(screen)
        screen.keyboard.press("1")
        switch_pair(screen, lambda: screen.keyboard.press("Enter"))
        judgement = Judgement.objects.get(annotator__username="nora")
        assert judgement.comparison.project == project

        # The lead pauses her: her held pairs go back; a reload shows no pair.
        page.reload()
        expect(page.locator('tr[data-member="nora"] td.judgements')).to_have_text("1")
        page.locator('tr[data-member="nora"]').get_by_role("button", name="Pause").click()
        expect(page.locator('tr[data-member="nora"]')).to_contain_text("paused")
        page.screenshot(path=SCREENSHOT, full_page=True)
        assert not Assignment.objects.filter(annotator__username="nora", status="active").exists()
        screen.reload()
        expect(screen.get_by_test_id("left")).to_have_count(0)
    finally:
        nora.close()

    kinds = list(
        ProjectEvent.objects.filter(project=project).order_by("id").values_list("kind", flat=True)
    )
    assert kinds == ["created", "member_added", "member_paused"]
    page.goto("/annotation/p/sorting/settings/")
    expect(page.get_by_test_id("events")).to_contain_text("Member paused")
    page.screenshot(path=SCREENSHOT.replace("people", "settings"), full_page=True)
