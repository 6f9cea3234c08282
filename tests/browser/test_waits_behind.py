"""A queued job's page says what it waits behind on its queue, in plain words, and the line goes
once a worker takes the job. The jobs are rows written straight to the live server's database (no
worker): the line is about what the page shows."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings
from django.test import Client
from playwright.sync_api import Page, expect

from annotation.models import ClusteringRun, ImportJob
from common.roles import ML_ENGINEER
from tests.factories import UserFactory, snapshot_of_pairs
from training.models import TrainingRun


@pytest.fixture
def snapshot(browser, settings, tmp_path):
    """A snapshot of the 8 tiny pairs (requests ``browser`` first: no Chromium, no data)."""
    settings.EXPORT_DIR = tmp_path / "exports"
    settings.CONCORD_GPU_QUEUE = "gpu"
    return snapshot_of_pairs(slug="waits-behind")


@pytest.fixture
def engineer_page(page: Page, live_server) -> Page:
    client = Client()
    client.force_login(UserFactory(username="emily", role=ML_ENGINEER))
    cookie = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    page.context.add_cookies(
        [{"name": django_settings.SESSION_COOKIE_NAME, "value": cookie, "url": live_server.url}]
    )
    return page


def _run(snapshot, status: str) -> TrainingRun:
    return TrainingRun.objects.create(
        name=f"{status} run", kind="dpo", base_model="smollm2-135m-instruct", snapshot=snapshot,
        status=status, total_steps=100,
    )  # fmt: skip


def test_a_queued_run_says_which_run_it_waits_behind_until_it_starts(snapshot, engineer_page):
    """Run A occupies the gpu queue; queued run B's page names A. When B starts (A done), the
    page's polling hides the line without a reload."""
    running = _run(snapshot, "running")
    queued = _run(snapshot, "queued")
    engineer_page.goto(f"/monitoring/runs/{queued.pk}/")
    line = engineer_page.get_by_test_id("waits-behind")
    expect(line).to_have_text(
        f"Queued: waiting behind training run #{running.pk} (running) on the gpu queue."
    )
    TrainingRun.objects.filter(pk=running.pk).update(status="succeeded")
    TrainingRun.objects.filter(pk=queued.pk).update(status="running")
    expect(line).to_be_hidden(timeout=15_000)
    expect(engineer_page.get_by_test_id("run-status")).to_have_text("Running")


def test_a_queued_import_names_the_default_queue_job_ahead_not_training(snapshot, engineer_page):
    """On the project's manage page, a queued import waits behind the running clustering run
    (default queue); the training run on the gpu queue is not ahead of it. When a worker takes
    it, its badge says Running and the line goes, without a reload."""
    project = snapshot.export.project
    _run(snapshot, "running")
    clustering = ClusteringRun.objects.create(project=project, status="running", model_name="m")
    job = ImportJob.objects.create(
        project=project, path="/nowhere", original_name="more.jsonl", size_bytes=10
    )
    engineer_page.goto(f"/annotation/p/{project.slug}/manage/")
    table = engineer_page.get_by_test_id("import-jobs")
    expect(table.get_by_test_id("waits-behind")).to_have_text(
        f"Queued: waiting behind clustering run #{clustering.pk} (running) on the default queue."
    )
    # The lifecycle's badge follows the job without a reload: a worker takes it.
    badge = table.get_by_test_id("job-state")
    expect(badge).to_have_text("Queued")
    ImportJob.objects.filter(pk=job.pk).update(status="running")
    expect(badge).to_have_text("Running", timeout=15_000)
    expect(badge).to_have_attribute("data-state", "running")
    expect(table.get_by_test_id("waits-behind")).to_be_hidden()
