"""The Manage page follows a running import without a reload (common/job_poll.js): the badge, the
phase and the rows line (rows of the total, rate, time left) as the worker writes them in the
shared cache, then the summary once it ends. The worker's writes are made here, through the
lifecycle's own steps, on the live server's database and cache."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings
from django.core.cache import cache
from django.test import Client
from playwright.sync_api import Page, expect

from annotation.models import ImportJob
from common.lifecycle import job_claim, job_finish
from common.roles import ML_ENGINEER
from tests.factories import ProjectFactory, UserFactory


@pytest.fixture
def engineer_page(browser, page: Page, live_server) -> Page:
    client = Client()
    client.force_login(UserFactory(username="ivan", role=ML_ENGINEER))
    cookie = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    page.context.add_cookies(
        [{"name": django_settings.SESSION_COOKIE_NAME, "value": cookie, "url": live_server.url}]
    )
    return page


def test_the_manage_page_follows_a_running_import_to_its_summary(engineer_page):
    project = ProjectFactory(slug="imp")
    job = ImportJob.objects.create(
        project=project, path="/nonexistent/rows.jsonl", original_name="rows.jsonl", size_bytes=10
    )
    assert job_claim(model=ImportJob, pk=job.pk)
    engineer_page.goto("/annotation/p/imp/manage/")
    row = engineer_page.locator("tr[data-job-url]", has_text="rows.jsonl")
    expect(row.get_by_test_id("job-state")).to_have_text("Running")
    figures = {"phase": "importing", "rows_done": 1000, "rows_total": 4000, "rows_per_s": 500,
               "eta_s": 6}  # fmt: skip
    cache.set(f"concord:import-job:{job.pk}", figures, 60)
    expect(row.locator(".job-rows")).to_have_text(
        "1000 / 4000, 500 rows/s, 6 s left", timeout=15_000
    )
    expect(row.locator(".job-phase")).to_have_text("importing")
    ImportJob.objects.filter(pk=job.pk).update(result={"summary": "4000 comparisons imported"})
    assert job_finish(model=ImportJob, pk=job.pk, state="succeeded")
    expect(row).to_contain_text("4000 comparisons imported", timeout=15_000)
    expect(row.get_by_test_id("job-state")).to_have_text("Succeeded")
