"""The labelling screen's pair switch in a real browser: no page load between pairs, the overlap and
the sides right with two annotators labelling at once, every strength key, the reason-box keys, and
a judgement changed from the history.

Projects here have no gold items and no swap repeats, ties allowed, strength scale 3.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from annotation.models import Assignment, Judgement, Side
from tests.factories import ComparisonFactory, PromptFactory, ResponseFactory, UserFactory
from tests.helpers.labelling_screen import (
    PASSWORD,
    XSS_TEXT,
    Setup,
    make_project,
    on_screen,
    other_side,
    settled,
    switch_pair,
)


@pytest.fixture
def fast_hasher(browser, live_server, settings) -> None:
    """Requests ``browser`` first (a missing Chromium skips before any data is made)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _log_in_as(page: Page, username: str) -> None:
    page.set_default_navigation_timeout(30_000)  # the first page of a session can be slow
    page.goto("/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(r"/annotation/$"))


def _open(page: Page, setup: Setup, username: str) -> None:
    _log_in_as(page, username)
    page.goto(setup.label_path)
    expect(page.get_by_test_id("left")).to_be_visible()
    settled(page)
    page.evaluate("window.__sameDocument = true")  # gone if the page is ever reloaded


def _submit(page: Page, *keys: str) -> None:
    for key in keys:
        page.keyboard.press(key)
    switch_pair(page, lambda: page.keyboard.press("Enter"))


def test_pairs_switch_without_a_page_load_and_two_annotators_keep_overlap_and_sides(
    fast_hasher, browser, live_server, page: Page
) -> None:
    """Two annotators label a project of 4 pairs with overlap 2 at the same time, in turns. No
    page is loaded between pairs (a marker set on the first page survives until the end); each
    comparison ends with exactly 2 judgements from the two annotators, who saw opposite sides on
    the left; each stored choice is the response the annotator saw on the left (they always
    pressed 1); both end on the "nothing left" page."""
    setup = make_project(n_pairs=4)
    setup.project.overlap = 2
    setup.project.save()
    second = UserFactory(username="omar", role="Annotator")
    setup.project.members.add(second)
    other_context = browser.new_context(base_url=live_server.url)
    other_context.set_default_timeout(10_000)
    other = other_context.new_page()
    try:
        _open(page, setup, setup.annotator.username)
        _open(other, setup, second.username)
        seen: dict[tuple[str, int], str] = {}  # (who, comparison id) -> stored side shown left
        for round_ in range(4):
            for who, tab in (("lena", page), ("omar", other)):
                comparison, left_side = on_screen(tab, setup)
                assert (who, comparison.pk) not in seen
                seen[(who, comparison.pk)] = left_side
                _submit(tab, "1")
                if round_ < 3:
                    assert tab.evaluate("window.__sameDocument") is True
        for tab in (page, other):
            expect(tab.get_by_test_id("done")).to_be_visible()
    finally:
        other_context.close()

    judgements = list(Judgement.objects.filter(comparison__project=setup.project))
    assert len(judgements) == 8
    for comparison in setup.comparisons:
        mine = [j for j in judgements if j.comparison_id == comparison.pk]
        assert sorted(j.annotator.username for j in mine) == ["lena", "omar"]
        assert {j.shown_left for j in mine} == {Side.A, Side.B}
        for j in mine:
            assert seen[(j.annotator.username, comparison.pk)] == j.shown_left == j.choice
    assert not Assignment.objects.filter(status=Assignment.Status.ACTIVE).exists()


def test_every_strength_key_and_the_reason_box_keys(fast_hasher, page: Page) -> None:
    """1 / 2 pick with "slightly"; Q, W, E set slightly, clearly, much; Shift with the pick sets
    much; R focuses the reason box (the R is not typed into it), Esc leaves it so that the keys
    pick again; 3 is a tie (strength 1)."""
    setup = make_project(n_pairs=7)
    _open(page, setup, setup.annotator.username)
    plan = [
        (["1"], "left", 1),
        (["2", "w"], "right", 2),
        (["Shift+1"], "left", 3),
        (["2", "e"], "right", 3),
        (["Shift+2", "q"], "right", 1),
        (["3"], "tie", 1),
    ]
    expected = {}
    for keys, pick, strength in plan:
        comparison, left_side = on_screen(page, setup)
        for key in keys:
            page.keyboard.press(key)
        expect(page.locator(f'input[name=strength][value="{strength}"]')).to_be_checked()
        choice = {"left": left_side, "right": other_side(left_side), "tie": "tie"}[pick]
        expected[comparison.pk] = (choice, strength, "")
        switch_pair(page, lambda: page.keyboard.press("Enter"))

    comparison, left_side = on_screen(page, setup)
    page.keyboard.press("r")
    expect(page.locator("#rationale")).to_be_focused()
    page.keyboard.type("2 is shorter")  # typed into the box, not taken as a pick
    expect(page.locator("#rationale")).to_have_value("2 is shorter")
    expect(page.locator("button.selected")).to_have_count(0)
    page.keyboard.press("Escape")
    expect(page.locator("#rationale")).not_to_be_focused()
    page.keyboard.press("2")
    page.keyboard.press("w")
    expected[comparison.pk] = (other_side(left_side), 2, "2 is shorter")
    switch_pair(page, lambda: page.keyboard.press("Enter"))

    stored = {
        j.comparison_id: (j.choice, j.strength, j.rationale)
        for j in Judgement.objects.filter(annotator=setup.annotator)
    }
    assert stored == expected
    expect(page.get_by_test_id("done")).to_be_visible()


def test_a_strength_pressed_before_the_pick_is_kept(fast_hasher, page: Page) -> None:
    """The strength may come before the pick (README): E then 1 stores the left response "much"
    (3), W then 2 the right one "clearly" (2), E then Shift+2 still "much" and Shift+1 then Q
    "slightly" (the last key wins); the next pair starts at "slightly" again, so a lone 2 stores 1.
    Before the fix a pick reset the strength to 1, so E then 1 stored "slightly"."""
    setup = make_project(n_pairs=6)
    _open(page, setup, setup.annotator.username)
    plan = [
        (["e", "1"], "left", 3),
        (["w", "2"], "right", 2),
        (["e", "Shift+2"], "right", 3),
        (["Shift+1", "q"], "left", 1),
        (["2"], "right", 1),
    ]
    expected = {}
    for keys, pick, strength in plan:
        comparison, left_side = on_screen(page, setup)
        for key in keys:
            page.keyboard.press(key)
        expect(page.locator(f'input[name=strength][value="{strength}"]')).to_be_checked()
        choice = {"left": left_side, "right": other_side(left_side)}[pick]
        expected[comparison.pk] = (choice, strength)
        switch_pair(page, lambda: page.keyboard.press("Enter"))

    stored = {
        j.comparison_id: (j.choice, j.strength)
        for j in Judgement.objects.filter(annotator=setup.annotator)
    }
    assert stored == expected


def test_a_new_pick_on_the_change_screen_keeps_the_stored_strength(fast_hasher, page: Page) -> None:
    """2 E Enter stores the right response "much" (3); Z opens it on the change screen with "much"
    checked; 1 picks the left response and "much" stays checked; Enter stores (left, 3). Then Z
    again ("much" checked, as stored), W (clearly) before 2: (right, 2). Before the fix the new
    pick reset the strength to "slightly", so the first change stored (left, 1)."""
    setup = make_project(n_pairs=3)
    _open(page, setup, setup.annotator.username)
    comparison, left_side = on_screen(page, setup)
    _submit(page, "2", "e")
    changes = [(["1"], left_side, 3), (["w", "2"], other_side(left_side), 2)]
    for keys, choice, strength in changes:
        with page.expect_navigation():
            page.keyboard.press("z")
        expect(page.locator("p.editing")).to_be_visible()
        assert on_screen(page, setup) == (comparison, left_side)
        expect(page.locator('input[name=strength][value="3"]')).to_be_checked()
        for key in keys:
            page.keyboard.press(key)
        expect(page.locator(f'input[name=strength][value="{strength}"]')).to_be_checked()
        with page.expect_navigation():
            page.keyboard.press("Enter")
        expect(page.locator(".messages")).to_contain_text("Your judgement was changed.")
        judgement = Judgement.objects.get(annotator=setup.annotator, comparison=comparison)
        assert (judgement.choice, judgement.strength) == (choice, strength)
        settled(page)


def test_a_judgement_from_the_history_is_changed(fast_hasher, page: Page) -> None:
    """After three pairs, H opens the history (newest first, three entries); "Change" on the
    oldest re-opens that pair with its sides as shown; 2 E Enter stores "right, much" for it, the
    history says so, and the screen is back on the pair that was current (still leased)."""
    setup = make_project(n_pairs=5)
    _open(page, setup, setup.annotator.username)
    first, first_left = on_screen(page, setup)
    for _ in range(3):
        _submit(page, "1")
    current, _ = on_screen(page, setup)

    page.keyboard.press("h")
    entries = page.get_by_test_id("history-list").locator("li")
    expect(entries).to_have_count(3)
    oldest = entries.nth(2)
    expect(oldest).to_contain_text("Left better, slightly")
    with page.expect_navigation():
        oldest.get_by_role("link", name="Change").click()
    expect(page.locator("p.editing")).to_be_visible()
    assert on_screen(page, setup) == (first, first_left)
    expect(page.locator('button[data-pick="left"]')).to_have_class(re.compile("selected"))
    page.keyboard.press("2")
    page.keyboard.press("e")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    expect(page.locator(".messages")).to_contain_text("Your judgement was changed.")
    assert on_screen(page, setup)[0].pk == current.pk

    judgement = Judgement.objects.get(annotator=setup.annotator, comparison=first)
    assert (judgement.choice, judgement.strength, judgement.shown_left) == (
        other_side(first_left),
        3,
        first_left,
    )
    settled(page)
    page.keyboard.press("h")
    expect(entries.nth(2)).to_contain_text("Right better, much")
    expect(entries.nth(2)).to_contain_text("(changed)")


def test_empty_and_very_long_responses(fast_hasher, page: Page) -> None:
    """An empty (or whitespace-only) response shows a visible "(empty response)" note; a very
    long one scrolls inside its card instead of stretching the page."""
    setup = make_project(n_pairs=0)
    prompt = PromptFactory(project=setup.project, text="Say something long.")
    long_text = "\n\n".join(f"Paragraph {i} of a very long answer." for i in range(400))
    ComparisonFactory(
        project=setup.project,
        prompt=prompt,
        response_a=ResponseFactory(prompt=prompt, text="  \n "),
        response_b=ResponseFactory(prompt=prompt, text=long_text),
    )
    _log_in_as(page, setup.annotator.username)
    page.goto(setup.label_path)
    expect(page.get_by_test_id("empty-response")).to_have_count(1)
    expect(page.get_by_test_id("empty-response")).to_have_text("(empty response)")
    card = page.locator(".response .md")
    sizes = card.evaluate("el => [el.scrollHeight, el.clientHeight]")
    assert sizes[0] > sizes[1] * 2  # the card scrolls
    viewport = page.viewport_size["height"]
    assert sizes[1] <= viewport


def test_z_right_after_enter_waits_for_the_verdict(fast_hasher, page: Page) -> None:
    """Z pressed at once after Enter (the verdict still on its way) opens that very judgement: the
    screen leaves only once the verdict is stored."""
    setup = make_project(n_pairs=3)
    _open(page, setup, setup.annotator.username)
    comparison, left_side = on_screen(page, setup)
    page.keyboard.press("2")
    with page.expect_navigation():
        page.keyboard.press("Enter")
        page.keyboard.press("z")
    expect(page.locator("p.editing")).to_be_visible()
    assert on_screen(page, setup) == (comparison, left_side)
    expect(page.locator('button[data-pick="right"]')).to_have_class(re.compile("selected"))
    judgement = Judgement.objects.get(annotator=setup.annotator)
    assert (judgement.comparison_id, judgement.choice) == (comparison.pk, other_side(left_side))


def test_html_in_a_pair_swapped_in_is_shown_as_text_and_never_runs(fast_hasher, page: Page) -> None:
    """The pair that arrives through the switch (HTML sent as JSON, put in the page) is as inert as
    a page load's: "<script>" is visible text, no script/img/iframe element, nothing runs."""
    setup = make_project(n_pairs=2, texts={1: (XSS_TEXT, "A harmless answer.")})
    _open(page, setup, setup.annotator.username)
    first, _ = on_screen(page, setup)
    assert first.pk == setup.comparisons[0].pk
    _submit(page, "1")
    assert page.evaluate("window.__sameDocument") is True
    screen = page.get_by_test_id("screen")
    expect(screen).to_contain_text("<script>window.__xss=1</script>")
    expect(screen).to_contain_text('<img src=x onerror="window.__xss=2">')
    expect(screen.locator(".md").locator("script, img, iframe, [onerror]")).to_have_count(0)
    expect(screen.locator('.md a[href^="javascript"]')).to_have_count(0)
    page.wait_for_timeout(200)
    assert page.evaluate("typeof window.__xss") == "undefined"


def test_arrow_keys_pick_a_side_and_4_marks_both_bad(fast_hasher, page: Page) -> None:
    """ArrowLeft / ArrowRight pick the left / right answer as 1 / 2 do; 4 is "both bad" where the
    project allows it; the stored choice is in terms of the stored responses, whatever side each
    was shown on."""
    setup = make_project(n_pairs=3)
    type(setup.project).objects.filter(pk=setup.project.pk).update(allow_both_bad=True)
    _open(page, setup, setup.annotator.username)
    expected = {}
    for key, pick in (("ArrowLeft", "left"), ("ArrowRight", "right"), ("4", "both_bad")):
        comparison, left_side = on_screen(page, setup)
        page.keyboard.press(key)
        expect(page.locator("button.selected")).to_have_count(1)
        choice = {"left": left_side, "right": other_side(left_side), "both_bad": "both_bad"}[pick]
        expected[comparison.pk] = choice
        switch_pair(page, lambda: page.keyboard.press("Enter"))
    stored = {
        j.comparison_id: j.choice for j in Judgement.objects.filter(annotator=setup.annotator)
    }
    assert stored == expected
    expect(page.get_by_test_id("done")).to_be_visible()


def test_the_change_screen_lists_only_the_keys_that_work_there(fast_hasher, page: Page) -> None:
    """The labelling screen's key line offers S (skip) and F (flag); the change screen has no pair
    to skip or flag (S and F do nothing there), so its key line lists neither, and keeps the keys
    that do work there (Enter, R, Z, H)."""
    setup = make_project(n_pairs=2)
    _open(page, setup, setup.annotator.username)
    keys = page.locator("p.keys")
    expect(keys).to_contain_text("S skip")
    expect(keys).to_contain_text("F flag the pair")
    _submit(page, "1")
    with page.expect_navigation():
        page.keyboard.press("z")
    expect(page.locator("p.editing")).to_be_visible()
    expect(keys).not_to_contain_text("skip")
    expect(keys).not_to_contain_text("flag")
    expect(keys).to_contain_text(
        "Enter submit, R reason box (Esc leaves it), Z change my last judgement, H history."
    )
