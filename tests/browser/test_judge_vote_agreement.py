"""The judge report page in headless Chromium shows the MT-Bench paper's agreement figures beside
kappa, with no page error or Content-Security-Policy violation.

The judge answers the project's first two pairs (tests/helpers/judge_world.py) a/a and a/b: pair 0 a
(humans a, a, a), pair 1 a tie (humans a, a, b). Judge vs humans 3 of 6 = 50% with ties, 3 of 3 =
100% without; humans among themselves on those pairs 4 of 6 = 67%, the same without ties.
"""

from __future__ import annotations

from playwright.sync_api import Page, expect

from annotation.services.importing import comparisons_import, project_get_or_create
from monitoring.models import JudgeOutput
from monitoring.services.judges import judge_create, judge_verdicts_store
from tests.helpers.browser import log_in
from tests.helpers.judge_world import rows_jsonl


def test_the_judge_page_shows_the_vote_agreement(browser, page: Page, ml_engineer):
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    project, _ = project_get_or_create(slug="judged", overlap=3)
    comparisons_import(project=project, lines=rows_jsonl())
    judge = judge_create(
        project=project, name="served", kind="openai", created_by=None,
        endpoint_url="http://vllm-host:8000/v1", model_name="qwen",
    )  # fmt: skip
    for comparison, pair in zip(project.comparisons.order_by("pk"), ["aa", "ab"], strict=False):
        for first, verdict in zip("ab", pair, strict=True):
            JudgeOutput.objects.create(
                judge=judge, comparison=comparison, shown_first=first, raw=verdict,
                verdict=verdict, seconds=0.5,
            )  # fmt: skip
    judge_verdicts_store(judge=judge)
    log_in(page, ml_engineer)
    page.goto(f"/monitoring/judges/{judge.pk}/")
    line = page.get_by_test_id("vote-agreement")
    expect(line).to_be_visible()
    expect(line).to_have_text(
        "Votes agreeing, counted as in the MT-Bench paper: the judge with each human vote 50% of 6 "
        "pairs (100% of 3 leaving out ties); the humans with each other on the same pairs 67% of 6 "
        "(67% of 6 leaving out ties)."
    )
    assert problems == []
