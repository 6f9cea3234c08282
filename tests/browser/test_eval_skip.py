"""Skipping an item on the blind reviewer screen by keyboard, in headless Chromium: S (the
labelling screens' skip key) skips the item on the screen and shows the next; an "s" typed in the
note is text, not a skip. Skipped when Chromium is missing (see tests/browser/conftest.py)."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from monitoring.models import EvalAssignment
from tests.helpers import eval_rounds as eval_world
from tests.helpers.browser import log_in

# The eval fixtures, shared with tests/monitoring_eval (conftest fixtures reach only their folder).
models_dir = eval_world.models_dir
open_round = eval_world.open_round
reviewers = eval_world.reviewers
run_with_checkpoints = eval_world.run_with_checkpoints
tiny_tokenizer_dir = eval_world.tiny_tokenizer_dir


def test_reviewer_skips_an_item_with_the_s_key(browser, page, open_round, reviewers):
    """Item 0 on the screen (4 items left): "s" typed in the note stays in the note; S outside it
    skips item 0 (stored as skipped, nothing rated) and item 1 comes, with 3 items left."""
    log_in(page, reviewers[0])
    page.goto(f"/monitoring/eval/{open_round.pk}/rate/")
    expect(page.get_by_test_id("rate-left")).to_contain_text("4 items left")
    first_prompt = page.get_by_test_id("prompt").inner_text()
    first = EvalAssignment.objects.get(reviewer=reviewers[0])
    assert first.item.position == 0

    page.locator("#note").click()
    page.keyboard.type("so so")
    expect(page.locator("#note")).to_have_value("so so")
    assert EvalAssignment.objects.get(pk=first.pk).status == EvalAssignment.Status.ACTIVE

    page.locator("body").click(position={"x": 1, "y": 1})
    page.keyboard.press("s")
    expect(page.get_by_test_id("prompt")).not_to_have_text(re.compile(re.escape(first_prompt)))
    expect(page.get_by_test_id("rate-left")).to_contain_text("3 items left")
    first.refresh_from_db()
    assert first.status == EvalAssignment.Status.SKIPPED and not hasattr(first, "judgement")
    now = EvalAssignment.objects.get(reviewer=reviewers[0], status=EvalAssignment.Status.ACTIVE)
    assert now.item.position == 1
