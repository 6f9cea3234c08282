"""An export job's page follows the job without a reload: the badge, the phase and the progress
line (rows, rate, time left) as the worker writes them, then, when it ends, the downloads. The
worker's writes are made here on the live server's database, through the lifecycle's own steps."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings
from django.test import Client
from playwright.sync_api import Page, expect

from annotation.models import ExportJob
from annotation.services.export_jobs import PHASE_EXPORTING, ExportCancelled, ExportProgress
from annotation.services.exporting import dataset_export
from common.lifecycle import job_claim, job_finish
from common.roles import ML_ENGINEER
from tests.factories import UserFactory
from tests.helpers.annotation_data import project_with_votes


@pytest.fixture
def project(browser, settings, tmp_path):
    """Project "exp" with votes (requests ``browser`` first: no Chromium, no data)."""
    settings.EXPORT_DIR = tmp_path / "exports"
    return project_with_votes()


@pytest.fixture
def engineer_page(page: Page, live_server) -> Page:
    client = Client()
    client.force_login(UserFactory(username="emily", role=ML_ENGINEER))
    cookie = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    page.context.add_cookies(
        [{"name": django_settings.SESSION_COOKIE_NAME, "value": cookie, "url": live_server.url}]
    )
    return page


def test_the_job_page_shows_progress_then_the_downloads(project, engineer_page):
    """Queued, then running with 4,000 of 10,000 judged comparisons at 2,000/s (3 s left), then
    succeeded: the page shows each in turn by itself, and finally the export's downloads."""
    job = ExportJob.objects.create(project=project, options={"consensus": "majority"})
    engineer_page.goto(f"/annotation/p/exp/export-jobs/{job.pk}/")
    badge = engineer_page.get_by_test_id("job-state")
    expect(badge).to_have_text("Queued")
    assert job_claim(model=ExportJob, pk=job.pk)
    ExportJob.objects.filter(pk=job.pk).update(
        phase=PHASE_EXPORTING, rows_done=4000, rows_total=10_000, rows_per_s=2000, eta_s=3
    )
    expect(badge).to_have_text("Running", timeout=15_000)
    expect(engineer_page.get_by_test_id("export-job-phase")).to_have_text("exporting")
    expect(engineer_page.get_by_test_id("export-job-rows")).to_have_text(
        "4,000 of 10,000 judged comparisons, 2,000/s, 3 s left"
    )
    export = dataset_export(project=project)
    assert job_finish(model=ExportJob, pk=job.pk, state="succeeded", updates={"export": export})
    result = engineer_page.get_by_test_id("export-job-result")
    expect(result).to_contain_text(export.sha256[:16], timeout=15_000)
    expect(engineer_page.get_by_test_id("job-state")).to_have_text("Succeeded")
    expect(result.get_by_role("link", name="pairs")).to_be_visible()


def test_cancel_stops_a_running_job_and_the_manage_page_follows_it(project, engineer_page):
    """Cancel on a running job's page: the button becomes "Stopping…"; the worker's next progress
    write stops it and the page shows Cancelled by itself. The Manage page's export list follows a
    running job the same way."""
    job = ExportJob.objects.create(project=project, options={"consensus": "majority"})
    assert job_claim(model=ExportJob, pk=job.pk)
    engineer_page.goto(f"/annotation/p/exp/export-jobs/{job.pk}/")
    engineer_page.get_by_role("button", name="Cancel this export").click()
    expect(engineer_page.get_by_text("will stop within a second")).to_be_visible()
    expect(engineer_page.get_by_role("button", name="Stopping…")).to_be_disabled()
    with pytest.raises(ExportCancelled):
        ExportProgress(job_id=job.pk).report(PHASE_EXPORTING, 0, None)
    assert job_finish(model=ExportJob, pk=job.pk, state="cancelled")
    expect(engineer_page.get_by_test_id("job-state")).to_have_text("Cancelled", timeout=15_000)
    expect(engineer_page.get_by_role("button", name="Stopping…")).to_have_count(0)
    other = ExportJob.objects.create(project=project, options={"consensus": "majority"})
    assert job_claim(model=ExportJob, pk=other.pk)
    engineer_page.goto("/annotation/p/exp/manage/")
    row = engineer_page.get_by_test_id("export-jobs").locator("tr", has_text=f"Export #{other.pk}")
    expect(row.get_by_test_id("job-state")).to_have_text("Running")
    ExportJob.objects.filter(pk=other.pk).update(phase=PHASE_EXPORTING, rows_done=2, rows_total=3)
    expect(row).to_contain_text("2 of 3 judged comparisons", timeout=15_000)
    assert job_finish(model=ExportJob, pk=other.pk, state="failed", error="disk full")
    expect(row).to_contain_text("disk full", timeout=15_000)
