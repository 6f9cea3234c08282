"""The labelling screen in a real browser: keyboard and mouse verdicts, skip, undo, and inert HTML.

Each test builds its own small project (overlap 1, ties allowed, strength scale 3, no gold items and
no swap repeats), with one annotator member, against pytest-django's live server.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Page, expect

from annotation.models import Assignment, Judgement, Side
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

SCREENSHOT = "/tmp/concord-labelling.png"  # noqa: S108 - for humans to look at, never asserted on


@pytest.fixture
def fast_hasher(browser, live_server, settings) -> None:
    """Requests ``browser`` first (a missing Chromium skips before any data is made); hashes the
    annotator's password with a fast hasher (the live server thread shares these settings)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _log_in(page: Page, setup: Setup) -> None:
    page.goto("/accounts/login/")
    page.fill("#id_username", setup.annotator.username)
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(r"/annotation/$"))


def _open_label(page: Page, setup: Setup) -> None:
    _log_in(page, setup)
    page.goto(setup.label_path)
    expect(page.get_by_test_id("left")).to_be_visible()


def _press_and_wait(page: Page, key: str) -> None:
    """Press a key that navigates (Z; Enter on the edit screen) and wait for the next page."""
    with page.expect_navigation():
        page.keyboard.press(key)


def test_keyboard_labelling_and_undo_map_sides_back_to_a_b(fast_hasher, page: Page) -> None:
    """Keyboard only: Shift+1 Enter stores "left much better" (the response shown on the left,
    strength 3); 3 Enter stores a tie (strength 1); 2 Enter stores "right" (the response shown on
    the right, strength 1). Z on the next screen opens the last judgement (same pair, same sides);
    1 Enter changes it to the left response. Every judgement stores the side shown on the left
    (both sides occur: consecutive comparisons alternate) and a positive elapsed_ms."""
    setup = make_project(n_pairs=5)
    _open_label(page, setup)
    settled(page)
    page.screenshot(path=SCREENSHOT, full_page=True)

    expected: dict[int, tuple[str, int, str]] = {}  # comparison id -> (choice, strength, shown)
    for keys, pick in ((["Shift+1"], "left"), (["3"], "tie"), (["2"], "right")):
        comparison, left_side = on_screen(page, setup)
        assignment = Assignment.objects.get(
            comparison=comparison, annotator=setup.annotator, status=Assignment.Status.ACTIVE
        )
        assert assignment.shown_left == left_side
        for key in keys:
            page.keyboard.press(key)
        expect(page.locator(f'button[data-pick="{pick}"]')).to_have_class(re.compile("selected"))
        switch_pair(page, lambda: page.keyboard.press("Enter"))
        choice = {"left": left_side, "right": other_side(left_side), "tie": "tie"}[pick]
        strength = 3 if keys == ["Shift+1"] else 1
        expected[comparison.pk] = (choice, strength, left_side)
        last_comparison, last_left = comparison, left_side

    # The fourth pair is on screen; Z brings back the third judgement with its sides as shown.
    fourth, _ = on_screen(page, setup)
    assert fourth.pk not in expected
    _press_and_wait(page, "z")
    expect(page).to_have_url(re.compile(re.escape(setup.label_path) + "last/$"))
    expect(page.locator("p.editing")).to_be_visible()
    comparison, left_side = on_screen(page, setup)
    assert (comparison.pk, left_side) == (last_comparison.pk, last_left)
    expect(page.locator('button[data-pick="right"]')).to_have_class(re.compile("selected"))
    page.keyboard.press("1")
    expect(page.locator('button[data-pick="left"]')).to_have_class(re.compile("selected"))
    _press_and_wait(page, "Enter")
    expect(page.locator(".messages")).to_contain_text("Your judgement was changed.")
    assert on_screen(page, setup)[0].pk == fourth.pk  # back to the pair still leased
    expected[comparison.pk] = (left_side, 1, left_side)

    judgements = {j.comparison_id: j for j in Judgement.objects.filter(annotator=setup.annotator)}
    assert set(judgements) == set(expected)
    for comparison_id, (choice, strength, shown) in expected.items():
        judgement = judgements[comparison_id]
        assert (judgement.choice, judgement.strength, judgement.shown_left) == (
            choice,
            strength,
            shown,
        ), comparison_id
        assert isinstance(judgement.elapsed_ms, int)
        assert judgement.elapsed_ms > 0
    shown = {j.shown_left for j in judgements.values()}
    assert Side.B in shown
    assert Side.A in shown
    assert {j.choice for j in judgements.values()} >= {"tie"}


def test_html_in_responses_is_shown_as_text_and_never_runs(
    fast_hasher, live_server, page: Page
) -> None:
    """A response (and prompt) containing <script>, <img onerror>, a javascript: link and an
    <iframe> is shown as literal text: "<script>" is visible text, no such elements exist in the
    rendered Markdown, window.__xss stays undefined after load and after clicking around, and no
    request leaves for another host (example.com)."""
    setup = make_project(n_pairs=1, texts={0: (XSS_TEXT, "A harmless answer.")})
    prompt = setup.comparisons[0].prompt
    prompt.text = XSS_TEXT
    prompt.save()
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    _open_label(page, setup)

    shown_left = Assignment.objects.get(annotator=setup.annotator).shown_left
    xss_panel = page.get_by_test_id("left" if shown_left == Side.A else "right")
    for locator in (xss_panel, page.get_by_test_id("prompt")):
        expect(locator).to_contain_text("<script>window.__xss=1</script>")
        expect(locator).to_contain_text('<img src=x onerror="window.__xss=2">')
        expect(locator).to_contain_text('<iframe src="https://example.com"></iframe>')
    markdown = page.locator(".md")
    expect(markdown.locator("script, img, iframe, [onerror]")).to_have_count(0)
    expect(markdown.locator('a[href^="javascript"]')).to_have_count(0)
    assert page.evaluate("typeof window.__xss") == "undefined"

    xss_panel.locator(".md").click()
    page.get_by_test_id("prompt").click()
    page.get_by_test_id("guidelines").locator("summary").click()
    links = xss_panel.locator(".md a")
    for i in range(links.count()):
        links.nth(i).click()
    page.wait_for_timeout(200)
    assert page.evaluate("typeof window.__xss") == "undefined"

    server = urlsplit(live_server.url).netloc
    assert requests
    assert [url for url in requests if urlsplit(url).netloc != server] == []


def test_skip_with_s_moves_on_and_never_shows_the_pair_again(fast_hasher, page: Page) -> None:
    """S skips the pair on screen: the next pair appears, no judgement is stored for the skipped
    one, and labelling through the rest of the project never shows the skipped pair again (it ends
    on the "Nothing left to label" page)."""
    setup = make_project(n_pairs=3)
    _open_label(page, setup)
    settled(page)
    skipped, _ = on_screen(page, setup)
    switch_pair(page, lambda: page.keyboard.press("s"))

    seen = []
    while page.get_by_test_id("done").count() == 0:
        comparison, _ = on_screen(page, setup)
        assert comparison.pk != skipped.pk
        seen.append(comparison.pk)
        page.keyboard.press("1")
        switch_pair(page, lambda: page.keyboard.press("Enter"))
        assert len(seen) <= 2
        page.wait_for_load_state("load")
    assert sorted(seen) == sorted(c.pk for c in setup.comparisons if c.pk != skipped.pk)
    assert not Judgement.objects.filter(comparison=skipped).exists()
    assert Assignment.objects.get(comparison=skipped).status == Assignment.Status.SKIPPED
    page.goto(setup.label_path)
    expect(page.get_by_test_id("done")).to_be_visible()


def test_click_submits_at_once_and_double_click_stores_one(fast_hasher, page: Page) -> None:
    """A click on "Right is better" submits at once: one judgement for the response shown on the
    right, and the next pair is shown. A fast double-click on the next pair stores exactly one
    judgement for that pair (and nothing for the pair after it)."""
    setup = make_project(n_pairs=3)
    _open_label(page, setup)

    settled(page)
    first, first_left = on_screen(page, setup)
    switch_pair(page, lambda: page.get_by_role("button", name="Right is better").click())
    second, second_left = on_screen(page, setup)
    assert second.pk != first.pk
    judgements = Judgement.objects.filter(annotator=setup.annotator)
    assert [(j.comparison_id, j.choice) for j in judgements] == [(first.pk, other_side(first_left))]

    switch_pair(page, lambda: page.get_by_role("button", name="Right is better").dblclick())
    third, _ = on_screen(page, setup)
    assert third.pk not in (first.pk, second.pk)
    page.wait_for_timeout(300)  # let any second request land before counting
    settled(page)
    judgements = Judgement.objects.filter(annotator=setup.annotator).order_by("pk")
    assert [(j.comparison_id, j.choice, j.strength) for j in judgements] == [
        (first.pk, other_side(first_left), 1),
        (second.pk, other_side(second_left), 1),
    ]


def test_a_conversation_names_each_turn_in_words(fast_hasher, page: Page) -> None:
    """A multi-turn prompt shows who speaks as a person reads it: "System", "User", "Assistant",
    "User" in the order of the turns, not the stored roles (system, user, ...) nor those upper-cased
    by the stylesheet (USER)."""
    setup = make_project(n_pairs=1)
    prompt = setup.comparisons[0].prompt
    prompt.messages = [
        {"role": "system", "content": "You answer briefly."},
        {"role": "user", "content": "How do I sum a list?"},
        {"role": "assistant", "content": "Use sum(items)."},
        {"role": "user", "content": "And in reverse order?"},
    ]
    prompt.text = "And in reverse order?"
    prompt.save(update_fields=["messages", "text"])
    _open_label(page, setup)
    speakers = page.get_by_test_id("prompt").locator(".turn .who")
    expect(speakers).to_have_count(4)
    assert speakers.all_inner_texts() == ["System", "User", "Assistant", "User"]
