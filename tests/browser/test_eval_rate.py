"""The blind reviewer screen in headless Chromium: keyboard verdicts, the note, the next item, and the
stored preference seen from the checkpoint's side. Skipped when Chromium is missing (see
tests/browser/conftest.py). The eval fixtures come from tests/helpers/eval_rounds.py."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from monitoring.models import EvalItem, EvalJudgement, EvalRound
from monitoring.services import eval_rounds as eval_services
from tests.helpers import eval_rounds as eval_world
from tests.helpers.browser import log_in
from tests.helpers.eval_rounds import BASELINE

# The eval fixtures, shared with tests/monitoring_eval (conftest fixtures reach only their folder).
models_dir = eval_world.models_dir
open_round = eval_world.open_round
reviewers = eval_world.reviewers
run_with_checkpoints = eval_world.run_with_checkpoints
tiny_tokenizer_dir = eval_world.tiny_tokenizer_dir


def test_reviewer_rates_blind_with_the_keyboard(browser, page, run_with_checkpoints, reviewers):
    """The reviewer sees two answers labelled only Left and Right, picks the one that reads
    "CKPT" with its arrow key, rates it 4 with Shift+4, writes a note and presses Enter: the verdict
    is stored as a checkpoint win with usefulness 4 and the screen moves to the next prompt."""
    round_ = eval_services.round_create(
        checkpoint=run_with_checkpoints.checkpoints.get(step=4),
        project=run_with_checkpoints.snapshot.export.project, size=2, created_by=None,
        baseline_model=BASELINE, enqueue=False,
    )  # fmt: skip
    EvalItem.objects.filter(round=round_).update(
        checkpoint_text="CKPT **answer**", baseline_text="BASE answer"
    )
    EvalRound.objects.filter(pk=round_.pk).update(status="open")

    log_in(page, reviewers[0])
    page.goto(f"/monitoring/eval/{round_.pk}/rate/")
    first_prompt = page.get_by_test_id("prompt").inner_text()
    left = page.get_by_test_id("left").inner_text()
    assert "CKPT" in left or "CKPT" in page.get_by_test_id("right").inner_text()
    assert BASELINE not in page.content()
    expect(page.get_by_test_id("left").locator("strong")).to_have_count(1 if "CKPT" in left else 0)

    page.keyboard.press("ArrowLeft" if "CKPT" in left else "ArrowRight")
    page.keyboard.press("Shift+Digit4")
    page.fill("#note", "clear and short")
    page.locator("body").click(position={"x": 1, "y": 1})
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("prompt")).not_to_have_text(re.compile(re.escape(first_prompt)))

    made = EvalJudgement.objects.get()
    assert (made.preference, made.usefulness, made.note) == ("a", 4, "clear and short")
    assert made.elapsed_ms > 0


def test_results_chart_follows_ratings_as_they_arrive(browser, page, open_round, reviewers):
    """The results page draws the win rate after each rating and, while the round is open, redraws
    when another reviewer's rating arrives (it polls every 5 s)."""
    round_ = open_round

    def rate_once(reviewer) -> None:
        assignment = eval_services.eval_claim_next(reviewer=reviewer, round_=round_)
        eval_services.eval_submit(
            assignment=assignment, reviewer=reviewer, pick="tie", usefulness=3
        )

    rate_once(reviewers[1])
    log_in(page, reviewers[0])
    page.goto(f"/monitoring/eval/{round_.pk}/")
    caption = page.get_by_test_id("win-rate-caption")
    expect(caption).to_contain_text("on 1 rating of 1 item: 0.500")
    rate_once(reviewers[2])
    expect(caption).to_contain_text("on 2 ratings of", timeout=12_000)
    expect(caption).to_contain_text(": 0.500")


def test_new_round_form_shows_the_interval_width_as_the_prompts_are_typed(page, reviewers):
    """The width a number of prompts gives appears as it is typed (385 prompts: about 0.10), with a
    warning under 30 prompts (20: 2 x 1.96 x sqrt(0.25 / 20) = 0.44); the baseline is a select of
    the registry's generative models."""
    log_in(page, reviewers[0])
    page.goto("/monitoring/eval/")
    width = page.get_by_test_id("interval-width")
    page.fill("#id_size", "385")
    expect(width).to_have_text(re.compile(r"385 prompts give .* about 0\.10 wide"))
    expect(width).not_to_have_class(re.compile("warn"))
    page.fill("#id_size", "20")
    expect(width).to_have_text(re.compile(r"about 0\.44 wide.*Under 30 prompts"))
    expect(width).to_have_class(re.compile("warn"))
    options = page.locator("#id_baseline_model option").all_inner_texts()
    assert any(text.startswith(BASELINE) for text in options)
