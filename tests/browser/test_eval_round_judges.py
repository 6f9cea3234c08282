"""A human-eval round with a judge in headless Chromium: its page shows the human-only and the
prediction-powered intervals side by side with the ratings the judge saved and its kappa, and the
run's stopping panel names the estimate it used, switches to the humans' when the reviewer raises
the kappa threshold, and the decision shows the estimate it rested on. While the judge's job runs,
the round page follows its progress without a reload.

The round (tests/helpers/judged_rounds.py ``rated_round``): 30 items, 24 drawn for one
reviewer each and rated, the judge's verdicts stored through the service on all 30 (its job on a
real tiny model is tested in tests/monitoring_eval/test_round_judges.py); kappa 0.875."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from monitoring.models import EvalRound, StopDecision
from monitoring.services.stopping_panel import stopping_panel_refresh
from tests.helpers import eval_rounds as eval_world
from tests.helpers import judged_rounds
from tests.helpers.browser import log_in

models_dir = eval_world.models_dir
reviewers = eval_world.reviewers
run_with_checkpoints = eval_world.run_with_checkpoints
tiny_tokenizer_dir = eval_world.tiny_tokenizer_dir
rm_judge = judged_rounds.rm_judge
rated_round = judged_rounds.rated_round

INTERVAL = r"\d\.\d+ \[\d\.\d+, \d\.\d+\]"


def test_a_judged_round_shows_two_intervals_and_the_panel_names_its_estimate(
    browser, page: Page, rated_round, reviewers
):
    """The round page: both intervals for win rate and usefulness, n = 24, the ratings saved with
    an explanation on hover, kappa 0.88 on 24 items. The run page: the panel says it used the
    prediction-powered estimates (kappa 0.88 at or above 0.70); with the threshold 0.9 it says it
    used the human-only ones because the kappa is below 0.90; the decision recorded then shows
    the human-only usefulness it rested on."""
    log_in(page, reviewers[0])
    page.goto(f"/monitoring/eval/{rated_round.pk}/")
    judge = page.get_by_test_id("round-judge")
    expect(judge).to_contain_text("Judge: rm v1")
    expect(judge.get_by_test_id("judge-status")).to_have_text("Succeeded")
    expect(judge.get_by_test_id("judge-progress")).to_have_text("60 / 60")
    expect(judge.get_by_test_id("judge-kappa")).to_contain_text("Cohen's kappa 0.88 on 24 items")
    for row in ("ppi-win-rate", "ppi-usefulness"):
        cells = judge.get_by_test_id(row)
        expect(cells.get_by_test_id("human-interval")).to_have_text(
            re.compile(rf"^{INTERVAL} \(n = 24\)$")
        )
        expect(cells.get_by_test_id("ppi-interval")).to_have_text(re.compile(rf"^{INTERVAL}$"))
        saved = cells.get_by_test_id("ratings-saved")
        expect(saved).to_have_text(re.compile(r"^\d+ human-rated items \(\d+ saved\)$"))
        expect(saved).to_have_attribute("title", re.compile(r"n_eff - n = [\d.]+ - 24"))
    expect(judge.get_by_test_id("ppi-explained")).to_contain_text("the ratings the judge saved")

    stopping_panel_refresh(run=rated_round.checkpoint.run)  # the task the ratings scheduled
    page.goto(f"/monitoring/runs/{rated_round.checkpoint.run_id}/")
    panel = page.get_by_test_id("stopping-panel")
    used = panel.get_by_test_id("estimate-used-usefulness")
    expect(used).to_contain_text("Usefulness (prediction-powered): Prediction-powered estimate")
    expect(used).to_contain_text("kappa with the reviewers is 0.88 on 24 shared items")
    expect(used).to_contain_text("at or above your threshold 0.70")
    expect(panel.get_by_test_id("criterion-human_usefulness")).to_contain_text("prediction-powered")

    panel.get_by_label("Trust the round's judge from kappa").fill("0.9")
    panel.get_by_role("button", name="Apply").click()
    expect(page).to_have_url(re.compile(r"\?kappa=0\.9$"))
    used = page.get_by_test_id("estimate-used-usefulness")
    expect(used).to_contain_text("Usefulness (human-only): Human-only estimate")
    expect(used).to_contain_text("0.88 on 24 shared items, below your threshold 0.90")
    expect(page.get_by_test_id("estimate-used-win-rate")).to_contain_text("Win rate (human-only)")

    form = page.get_by_test_id("decision-form")
    form.get_by_label("Continue").check()
    form.get_by_role("button", name="Record decision").click()
    expect(page.locator(".decisions")).to_contain_text("Continue")
    expect(page.locator(".decisions")).to_contain_text(
        re.compile(r"on the human-only usefulness \d\.\d\d \[\d\.\d\d, \d\.\d\d\]")
    )
    decision = StopDecision.objects.get()
    assert decision.estimate_source == "human" and decision.estimate["kappa_threshold"] == 0.9


def test_the_round_page_follows_the_judges_progress(
    browser, page: Page, run_with_checkpoints, rm_judge, reviewers
):
    """While the judge's job runs the page polls the round's progress: 4 / 20 answers, then the
    job's end shows without a reload, and before any rating the intervals say what they need."""
    round_ = judged_rounds.judged_round(run_with_checkpoints, rm_judge, size=10)
    EvalRound.objects.filter(pk=round_.pk).update(
        judge_status="running", judge_done=4, judge_total=20
    )
    log_in(page, reviewers[0])
    page.goto(f"/monitoring/eval/{round_.pk}/")
    judge = page.get_by_test_id("round-judge")
    expect(judge.get_by_test_id("judge-progress")).to_have_text("4 / 20")
    expect(judge.get_by_test_id("ppi-win-rate")).to_contain_text(
        "Not yet: needs human ratings of at least 2 items whose answers differ."
    )
    EvalRound.objects.filter(pk=round_.pk).update(judge_status="succeeded", judge_done=20)
    expect(judge.get_by_test_id("judge-progress")).to_have_text("20 / 20", timeout=15_000)
    expect(judge.get_by_test_id("judge-status")).to_have_text("Succeeded")
