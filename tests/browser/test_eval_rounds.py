"""A human-eval round in headless Chromium, as its reviewers and an ML engineer go through it: the
navigation to open rounds and the items left, the last rating closing the round, and items whose
two answers are identical never shown but counted as ties. The eval fixtures come from
tests/helpers/eval_rounds.py (``open_round``: 4 items, "**CKPT** answer <position>" against
"BASE answer", 3 reviewers per item)."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from monitoring.models import EvalItem, EvalRound
from monitoring.services import eval_rounds as eval_services
from monitoring.services.stopping_panel import stopping_panel_refresh
from tests.helpers import eval_rounds as eval_world
from tests.helpers.browser import log_in
from training.models import TrainingRun

# The eval fixtures, shared with tests/monitoring_eval (conftest fixtures reach only their folder).
models_dir = eval_world.models_dir
open_round = eval_world.open_round
reviewers = eval_world.reviewers
run_with_checkpoints = eval_world.run_with_checkpoints
tiny_tokenizer_dir = eval_world.tiny_tokenizer_dir


def _one_reviewer_per_item(round_: EvalRound) -> None:
    EvalRound.objects.filter(pk=round_.pk).update(reviewers_per_item=1)
    round_.refresh_from_db()


def _rate_on_screen(page: Page) -> str:
    """Pick the left answer, rate it 3, submit with Enter; returns the prompt that was rated."""
    prompt = page.get_by_test_id("prompt").inner_text()
    page.keyboard.press("1")
    page.keyboard.press("Shift+Digit3")
    page.keyboard.press("Enter")
    return prompt


def test_reviewer_and_engineer_find_open_rounds_and_their_items_left(
    browser, page, open_round, reviewers, ml_engineer
):
    """The reviewer's navigation leads to Eval rounds, where the open round says 4 items are left
    for them; they rate one from there (the rating screen counts down too) and the list then says
    3. The ML engineer's navigation leads to the same list, which offers the results but no
    rating."""
    log_in(page, reviewers[0])
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Eval rounds").click()
    row = page.get_by_test_id(f"open-round-{open_round.pk}")
    expect(row.get_by_test_id("left-for-me")).to_have_text("4 items left for you")
    row.get_by_role("link", name="Rate").click()
    expect(page).to_have_url(re.compile(rf"/monitoring/eval/{open_round.pk}/rate/$"))
    expect(page.get_by_test_id("rate-left")).to_have_text(
        "4 items left for you, this one included."
    )
    first = _rate_on_screen(page)
    expect(page.get_by_test_id("prompt")).not_to_have_text(first)
    expect(page.get_by_test_id("rate-left")).to_have_text(
        "3 items left for you, this one included."
    )
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Eval rounds").click()
    expect(row.get_by_test_id("left-for-me")).to_have_text("3 items left for you")
    expect(row).to_contain_text("1 / 12 ratings")

    page.context.clear_cookies()
    log_in(page, ml_engineer)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Eval rounds").click()
    row = page.get_by_test_id(f"open-round-{open_round.pk}")
    expect(row).to_contain_text("1 / 12 ratings")
    expect(row.get_by_role("link", name="Rate")).to_have_count(0)
    row.get_by_role("link", name="Results").click()
    expect(page.get_by_test_id("round-status")).to_have_text("Open for ratings")


def test_the_last_rating_closes_the_round_and_the_page_says_so(
    browser, page, open_round, reviewers
):
    """One reviewer per item, three items already rated by others: the reviewer's rating of the
    last one closes the round; the page says so, and the results page shows it closed."""
    _one_reviewer_per_item(open_round)
    for reviewer in reviewers[1:4]:
        assignment = eval_services.eval_claim_next(reviewer=reviewer, round_=open_round)
        eval_services.eval_submit(
            assignment=assignment, reviewer=reviewer, pick="tie", usefulness=3
        )
    open_round.refresh_from_db()
    assert open_round.status == "open"

    log_in(page, reviewers[0])
    page.goto(f"/monitoring/eval/{open_round.pk}/rate/")
    _rate_on_screen(page)
    expect(page.locator(".messages")).to_contain_text("That was the last rating")
    expect(page.get_by_test_id("nothing-left")).to_have_text(
        "This round is closed: it takes no more ratings."
    )
    page.get_by_test_id("results-link").click()
    expect(page.get_by_test_id("round-status")).to_have_text("Closed")
    expect(page.get_by_test_id("win-rate-caption")).to_contain_text("on 4 ratings of 4 items")


def test_identical_answers_are_never_shown_and_count_as_ties(browser, page, open_round, reviewers):
    """Items 1 and 3 have the same answer on both sides (but for spacing). With one reviewer per
    item the reviewer is shown items 0 and 2 only, always two different answers; their second
    rating closes the round, and the results say 2 items had identical answers, each counted once
    as a tie: items 0 and 2 show the checkpoint on the left (first reviewer, even position), so
    key 1 is two wins, and the win rate over the 4 items is (2 + 2 x 0.5) / 4 = 0.75."""
    _one_reviewer_per_item(open_round)
    prompts = {}
    for item in open_round.items.select_related("prompt"):
        prompts[item.position] = item.prompt.text
        if item.position in (1, 3):
            EvalItem.objects.filter(pk=item.pk).update(
                baseline_text=f"**CKPT**  answer {item.position}\n"
            )

    log_in(page, reviewers[0])
    page.goto(f"/monitoring/eval/{open_round.pk}/rate/")
    rated = []
    for _ in range(2):
        expect(page.get_by_test_id("right").or_(page.get_by_test_id("left"))).to_have_count(2)
        both = page.get_by_test_id("left").inner_text() + page.get_by_test_id("right").inner_text()
        assert "BASE answer" in both
        rated.append(_rate_on_screen(page).strip())
        if len(rated) == 1:
            expect(page.get_by_test_id("prompt")).not_to_have_text(rated[0])
    assert rated == [prompts[0], prompts[2]]
    expect(page.get_by_test_id("nothing-left")).to_contain_text("This round is closed")

    page.goto(f"/monitoring/eval/{open_round.pk}/")
    expect(page.get_by_test_id("identical")).to_contain_text(
        "2 items had identical answers: never shown to reviewers, each counts in the win rate once"
    )
    expect(page.get_by_test_id("round-stats")).to_contain_text(
        "On 2 ratings of 2 items and 2 items with identical answers counted as ties"
    )
    expect(page.get_by_test_id("identical-item")).to_have_count(2)
    expect(page.get_by_test_id("win-rate-caption")).to_contain_text(
        "on 2 ratings of 2 items and 2 items with identical answers as ties: 0.750"
    )


def test_a_reviewer_rejects_a_run_whose_checkpoints_all_lose_to_the_base(
    browser, page, run_with_checkpoints, reviewers
):
    """Two rounds against the base, the base preferred on every item, on an ended run: the panel
    advises keeping the base, the reject choice says (advised); choosing it and recording the
    decision names the base model as the run's result and marks no checkpoint."""
    run = run_with_checkpoints
    for step in (2, 4):
        eval_world.hand_rated_round(run, reviewers, step=step, baseline_wins=True)
    TrainingRun.objects.filter(pk=run.pk).update(status=TrainingRun.Status.SUCCEEDED)
    stopping_panel_refresh(run=run)  # the task the ratings scheduled
    log_in(page, reviewers[0])
    page.goto(f"/monitoring/runs/{run.pk}/")
    panel = page.get_by_test_id("stopping-panel")
    expect(panel).to_contain_text("No rated checkpoint beats the base model")
    form = page.get_by_test_id("decision-form")
    reject = form.get_by_test_id("decision-reject")
    expect(form.locator("label:has([data-testid=decision-reject])")).to_have_text(
        re.compile(r"^\s*Reject the run, keep the base model \(advised\)\s*$")
    )
    expect(page.get_by_test_id("result-is-base")).to_have_count(0)
    reject.check()
    form.get_by_label("Note").fill("both rounds lost to the base")
    form.get_by_role("button", name="Record decision").click()
    expect(page.get_by_test_id("result-is-base")).to_contain_text("Result: the base model")
    expect(page.locator(".decisions")).to_contain_text("Reject the run, keep the base model")
    expect(page.locator(".result-mark")).to_have_count(0)
    run.refresh_from_db()
    assert run.result_is_base and run.result_checkpoint is None
