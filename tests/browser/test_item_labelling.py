"""The rating and ranking screens in a real browser, keyboard only: digits score the focused
aspect and Tab moves between aspects, T / D give thumbs; a number key places the focused
response at a rank, the arrows move the focus, and a keyboard ranking of 4 responses is stored
mapped back through the display order shown."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from playwright.sync_api import Page, expect

from annotation.models import TaskAnswer, TaskLease
from tests.helpers.browser import log_in
from tests.helpers.task_items import annotators, ranking_project, rating_project


@pytest.fixture
def fast_hasher(browser, live_server, settings) -> None:
    """Requests ``browser`` first (a missing Chromium skips before any data is made)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _open(page: Page, user, project) -> None:
    page.set_default_navigation_timeout(30_000)
    log_in(page, user)
    expect(page).to_have_url(re.compile(r"/annotation/$"))
    page.goto(reverse("annotation:label", args=[project.slug]))


def test_rating_by_keyboard(fast_hasher, page: Page) -> None:
    project, _ = rating_project(2, overlap=1)
    (user,) = annotators(project, 1)
    _open(page, user, project)
    expect(page.get_by_test_id("aspect-helpfulness")).to_be_focused()
    page.keyboard.press("4")
    page.keyboard.press("Tab")
    expect(page.get_by_test_id("aspect-correctness")).to_be_focused()
    page.keyboard.press("2")
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("5")  # back on helpfulness: changed to 5
    page.keyboard.press("d")
    page.keyboard.press("r")
    page.keyboard.type("too short")
    page.keyboard.press("Escape")
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("done-count")).to_have_text("1")
    answer = TaskAnswer.objects.get()
    assert answer.scores == {"helpfulness": 5, "correctness": 2}
    assert answer.thumbs is False
    assert answer.rationale == "too short"
    assert answer.elapsed_ms is not None


def test_keyboard_ranking_of_four_responses_maps_back_through_the_display_order(
    fast_hasher, page: Page
) -> None:
    project, _ = ranking_project(1, k=4, overlap=1)
    (user,) = annotators(project, 1)
    _open(page, user, project)
    expect(page.get_by_test_id("candidate-0")).to_be_focused()
    # Screen slots 0..3 get ranks 3, 1, 4, 2: a number places the focused one and moves down.
    for key in ("3", "1", "4"):
        page.keyboard.press(key)
    expect(page.get_by_test_id("candidate-3")).to_be_focused()
    page.keyboard.press("ArrowUp")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("2")
    expect(page.get_by_test_id("rank-1")).to_have_value("1")
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("done")).to_be_visible()
    lease = TaskLease.objects.get()
    answer = TaskAnswer.objects.get()
    assert answer.order == lease.order
    screen = [3, 1, 4, 2]
    assert [answer.ranks[position] for position in lease.order] == screen
    texts = [f"Reply 0.{position}" for position in lease.order]
    best = texts[screen.index(1)]
    assert answer.ranks[int(best.rsplit(".", 1)[1])] == 1


def test_placing_a_taken_rank_swaps_without_ties(fast_hasher, page: Page) -> None:
    project, _ = ranking_project(1, k=3, overlap=1)
    (user,) = annotators(project, 1)
    _open(page, user, project)
    page.keyboard.press("1")  # slot 0 -> 1
    page.keyboard.press("ArrowUp")
    page.keyboard.press("2")  # slot 0 -> 2; nobody had 2
    page.keyboard.press("1")  # slot 1 -> 1
    page.keyboard.press("1")  # slot 2 -> 1: slot 1 takes slot 2's old (empty) rank
    expect(page.get_by_test_id("rank-2")).to_have_value("1")
    expect(page.get_by_test_id("rank-1")).to_have_value("")
    page.keyboard.press("Enter")
    expect(page.locator(".messages")).to_contain_text("rank all 3")
    assert not TaskAnswer.objects.exists()


def test_z_brings_back_the_last_rating_to_change_it(fast_hasher, page: Page) -> None:
    """After a rating, Z opens it again filled in; a changed score and Enter store the change on
    the same answer, and the screen goes on with the next item."""
    project, _ = rating_project(2, overlap=1)
    (user,) = annotators(project, 1)
    _open(page, user, project)
    page.keyboard.press("4")
    page.keyboard.press("Tab")
    page.keyboard.press("3")
    page.keyboard.press("u")
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("done-count")).to_have_text("1")
    expect(page.get_by_test_id("undo")).to_be_visible()
    page.keyboard.press("z")
    expect(page.get_by_test_id("editing")).to_be_visible()
    expect(page.locator('input[name="score-helpfulness"][value="4"]')).to_be_checked()
    expect(page.locator('input[name="thumbs"][value="up"]')).to_be_checked()
    page.keyboard.press("2")  # the first aspect has the focus: helpfulness 4 -> 2
    page.keyboard.press("Enter")
    expect(page.locator(".messages")).to_contain_text("Your last answer was changed.")
    answer = TaskAnswer.objects.get()
    assert (answer.scores, answer.thumbs) == ({"helpfulness": 2, "correctness": 3}, True)
    assert TaskLease.objects.filter(status="active").count() == 1  # the next item is on screen
