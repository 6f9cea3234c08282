"""The new-round form and a round while its answers are generated, in headless Chromium. The run of
the eval fixtures (tests/helpers/eval_rounds.py) trained on 2 of the project's 10 prompts; the
other 8 are held out. The form caps the number of prompts at the held-out count and says so; the
round page counts the answers as they are generated."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from monitoring.models import EvalRound
from tests.helpers import eval_rounds as eval_world
from tests.helpers.browser import log_in

models_dir = eval_world.models_dir
run_with_checkpoints = eval_world.run_with_checkpoints
tiny_tokenizer_dir = eval_world.tiny_tokenizer_dir


def test_the_form_caps_the_prompts_at_the_held_out_count_and_says_so(
    browser, page: Page, run_with_checkpoints, ml_engineer, monkeypatch
):
    """Choosing step 4 of the run and the eval project: the form says 8 of the 10 prompts are held
    out and lowers its 100 prompts to 8; "Create round" makes a round of those 8 (before: no word,
    and a round of all 10, the 2 trained prompts among them)."""
    monkeypatch.setattr("monitoring.services.eval_rounds.task_send", lambda *args, **kwargs: None)
    run = run_with_checkpoints
    log_in(page, ml_engineer)
    page.goto("/monitoring/eval/")
    page.select_option("#id_checkpoint", str(run.checkpoints.get(step=4).pk))
    page.select_option("#id_project", "eval")
    page.select_option("#id_baseline_model", eval_world.BASELINE)
    expect(page.get_by_test_id("prompts-available")).to_have_text(
        f"8 of the 10 prompts of eval are held out (not in the training data of run #{run.pk}): "
        "a round can use at most 8. The number of prompts was lowered from 100 to 8."
    )
    expect(page.locator("#id_size")).to_have_value("8")
    expect(page.locator("#id_size")).to_have_attribute("max", "8")
    page.get_by_role("button", name="Create round").click()
    expect(page).to_have_url(re.compile(r"/monitoring/eval/\d+/$"))
    round_ = EvalRound.objects.get()
    assert (round_.size, round_.answers_done, round_.answers_total) == (8, 0, 16)
    expect(page.get_by_test_id("answers-progress")).to_have_text("answers 0 of 16")


def test_the_round_page_counts_the_answers_while_they_are_generated(
    browser, page: Page, run_with_checkpoints, reviewer
):
    """A round of 4 prompts generating: "answers 3 of 8", then "answers 6 of 8" as the worker
    counts on, without a reload; once the round opens the page reloads and shows it open (before:
    no count, the page said only "Generating responses" for as long as it took)."""
    round_ = eval_world.make_round(run_with_checkpoints)
    EvalRound.objects.filter(pk=round_.pk).update(answers_done=3)
    log_in(page, reviewer)
    page.goto(f"/monitoring/eval/{round_.pk}/")
    expect(page.get_by_test_id("answers-progress")).to_have_text("answers 3 of 8")
    EvalRound.objects.filter(pk=round_.pk).update(answers_done=6)
    expect(page.get_by_test_id("answers-progress")).to_have_text("answers 6 of 8", timeout=15_000)
    EvalRound.objects.filter(pk=round_.pk).update(answers_done=8, status="open")
    expect(page.get_by_test_id("round-status")).to_have_text("Open for ratings", timeout=15_000)
    expect(page.get_by_test_id("generation-progress")).to_have_count(0)
