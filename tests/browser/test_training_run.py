"""An ML engineer launches a training run from the admin in a real browser and watches its charts
update live, against a real Celery worker subprocess (Redis broker, the live server's PostgreSQL
test database) training a tiny Llama saved under the registry name smollm2-135m-instruct.

Skipped unless PostgreSQL and Redis are configured (DATABASE_URL, CELERY_BROKER_URL), like
tests/training/test_runs_worker.py, whose ``stack`` fixture and ``Worker`` (tests/helpers/worker.py) are
reused here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from common.roles import ML_ENGINEER
from tests.factories import UserFactory, snapshot_of_pairs, training_run
from tests.helpers import tiny_models
from tests.helpers import worker as worker_helpers
from tests.helpers.worker import Worker
from training.models import MetricPoint, TrainingRun

pytestmark = [pytest.mark.browser, pytest.mark.services]

PASSWORD = "correct horse battery"  # UserFactory's password
SCREENSHOT = "/tmp/concord-run.png"  # noqa: S108 - for humans to look at, never asserted on
# Generous: the 1,200-step run shares the CPU with the worker, the server and Chromium; on a busy
# machine it took over 90 s. A passing run waits only as long as it needs.
LIVE_TIMEOUT_MS = 300_000

# Fixtures of tests/helpers, which this folder's conftest does not import: pytest finds a fixture
# as an attribute of the test module, under the fixture's own name.
tiny_tokenizer_dir = tiny_models.tiny_tokenizer_dir
stack = worker_helpers.stack


@pytest.fixture
def worker(browser, stack) -> Iterator[Worker]:
    """A gpu-queue worker subprocess on this test's own queue. Requests ``browser`` first, so a
    missing Chromium skips the test before the worker starts."""
    process = Worker(stack)
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _draft_run(user) -> TrainingRun:
    """A draft DPO run on 8 preference pairs: 1,200 steps take the CPU worker several seconds, so the
    page (polling every 2 s) sees it running more than once."""
    return training_run(
        snapshot=snapshot_of_pairs(slug="browser-runs"), name="browser dpo run", created_by=user,
        # Long enough that the page sees it running twice even on a quiet, fast machine.
        config={"max_steps": 1200, "batch_size": 2, "max_length": 64, "checkpoint_every": 200,
                "learning_rate": 1e-3, "epochs": 300},
    )  # fmt: skip


def _points(page: Page) -> int:
    return int(page.locator('figure.chart[data-metric="loss"]').get_attribute("data-points"))


def test_ml_engineer_launches_a_run_from_the_admin_and_watches_its_chart_update(
    worker, live_server, page: Page
) -> None:
    """The ML engineer logs in, ticks a draft DPO run in the admin's run list and applies "Launch
    on the gpu queue"; the admin confirms. The run's "charts" link opens its monitoring page, whose
    loss chart appears and gains points between two looks while the worker trains (the page polls
    every 2 s, without a reload), and whose status ends "succeeded" at step 1200/1200. The database
    agrees: the run succeeded, logged a loss per step (as many as the chart draws), saved its six
    checkpoints (the newest five, still on disk, listed on the page once reloaded), and its launch
    is audited under the engineer's name."""
    engineer = UserFactory(username="emily", role=ML_ENGINEER)
    run = _draft_run(engineer)

    page.goto("/accounts/login/")
    page.fill("#id_username", engineer.username)
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).not_to_have_url(re.compile(r"/accounts/login/"))

    page.goto("/admin/training/trainingrun/")
    row = page.locator("#result_list tbody tr").filter(
        has=page.locator(f'input[name="_selected_action"][value="{run.pk}"]')
    )
    expect(row.locator("td.field-status")).to_have_text("Draft")
    row.locator('input[name="_selected_action"]').check()
    page.select_option('select[name="action"]', label="Launch on the gpu queue")
    page.get_by_role("button", name="Go").click()
    expect(page.locator("ul.messagelist")).to_contain_text("Launched 1 run(s).")

    row.get_by_role("link", name="charts").click()
    expect(page).to_have_url(re.compile(rf"/monitoring/runs/{run.pk}/$"))
    chart = page.locator('figure.chart[data-metric="loss"]')
    status = page.get_by_test_id("run-status")

    # First look: the chart is drawn while the run is still running.
    expect(chart).to_have_attribute("data-points", re.compile(r"^[1-9]"), timeout=LIVE_TIMEOUT_MS)
    expect(status).to_have_text("Running")
    first = _points(page)
    page.evaluate("window.concordSamePage = true")  # gone if the page reloads
    # Second look: the page polled again and drew more points, without a reload.
    page.wait_for_function(
        """first => Number(document.querySelector('figure.chart[data-metric="loss"]')
                   ?.dataset.points) > first""",
        arg=first,
        timeout=LIVE_TIMEOUT_MS,
    )
    assert _points(page) > first
    assert page.evaluate("window.concordSamePage") is True

    expect(status).to_have_text("Succeeded", timeout=LIVE_TIMEOUT_MS)
    expect(page.get_by_test_id("run-step")).to_have_text("1200")
    expect(chart.locator("canvas")).to_have_count(1)  # drawn by uPlot
    page.screenshot(path=SCREENSHOT, full_page=True)
    # The polls keep the checkpoints table current, and the server draws the same after a reload:
    # the 5 checkpoints still on disk (keep_checkpoints 5 removed step 200's folder).
    rows = page.get_by_test_id("checkpoints").locator("tbody tr")
    expect(rows).to_have_count(5)
    page.reload()
    expect(rows).to_have_count(5)
    expect(rows.last.locator("td").first).to_have_text("400")

    run.refresh_from_db()
    assert run.status == TrainingRun.Status.SUCCEEDED, run.error
    assert run.step == run.total_steps == 1200
    losses = MetricPoint.objects.filter(run=run, name="loss")
    assert losses.count() >= 1200
    assert _points(page) == losses.values("step").distinct().count()
    assert sorted(run.checkpoints.values_list("step", flat=True)) == [
        200,
        400,
        600,
        800,
        1000,
        1200,
    ]
    assert run.events.filter(action="launched", user=engineer).exists()
