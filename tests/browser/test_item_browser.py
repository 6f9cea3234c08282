"""The item browser in a real browser, keyboard only: a lead opens Items from the project page,
searches (``/``, type, Enter), moves to the row (``j``) and opens it (Enter), reads the item, and
goes back to the same search. No Content-Security-Policy violation or page error on the way."""

from __future__ import annotations

import json
import re

from playwright.sync_api import Page, expect

from annotation.services.importing import comparisons_import, project_get_or_create
from common.roles import ML_ENGINEER
from tests.factories import UserFactory

PASSWORD = "correct horse battery"  # UserFactory's password


def test_a_lead_searches_an_item_and_opens_it_by_keyboard(page: Page):
    UserFactory(username="lena", role=ML_ENGINEER)
    project, _ = project_get_or_create(slug="browse")
    rows = [
        {"prompt": f"Question {i} about gardening", "response_a": f"Water it {i}",
         "response_b": f"Prune it {i}", "judgements": [{"annotator": "u1", "choice": "a"}]}
        for i in range(30)
    ] + [
        {"prompt": "How do volcanoes erupt?", "response_a": "Magma rises through the crust",
         "response_b": "They sneeze", "judgements": [{"annotator": "u1", "choice": "a",
                                                     "rationale": "geology"}]},
    ]  # fmt: skip
    comparisons_import(project=project, lines=[json.dumps(r) for r in rows])
    problems: list[str] = []
    page.on(
        "console",
        lambda msg: (
            problems.append(msg.text)
            if "Content Security Policy" in msg.text
            or (msg.type == "error" and not msg.text.startswith("Failed to load resource"))
            else None
        ),
    )
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))

    page.goto("/accounts/login/")
    page.fill("#id_username", "lena")
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).not_to_have_url(re.compile(r"/accounts/login/"))
    page.goto("/annotation/p/browse/manage/")
    page.get_by_test_id("items-link").click()
    expect(page.get_by_test_id("item-counts")).to_contain_text("31 matching of 31 comparisons")
    page.wait_for_load_state("load")  # the keys are the page script's: pressed before it runs, lost

    page.keyboard.press("/")
    expect(page.get_by_test_id("item-search")).to_be_focused()
    page.keyboard.type("magma")
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"\?q=magma"))
    expect(page.get_by_test_id("item-counts")).to_contain_text("1 matching of 31 comparisons")
    expect(page.locator("table.items tbody tr")).to_have_count(1)
    page.wait_for_load_state("load")

    page.keyboard.press("j")
    expect(page.locator("table.items tbody tr.current")).to_have_count(1)
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("item-prompt")).to_have_text("How do volcanoes erupt?")
    expect(page.get_by_test_id("item-response-a")).to_have_text("Magma rises through the crust")
    expect(page.get_by_test_id("item-judgements")).to_contain_text("geology")
    expect(page.get_by_test_id("item-consensus")).to_contain_text("Dawid-Skene")

    page.get_by_test_id("item-back").click()
    expect(page).to_have_url(re.compile(r"/annotation/p/browse/items/\?q=magma"))
    expect(page.locator("table.items tbody tr")).to_have_count(1)
    assert problems == []
