"""The lead downloads the project's archive from its settings page; the file restores the project
(all its judgements) after the project is gone."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from playwright.sync_api import Page

from annotation.demo import demo_load
from annotation.models import Judgement, Project
from tests.factories import UserFactory
from tests.helpers.archives import measures, purge
from tests.helpers.browser import log_in


@pytest.fixture
def lead(browser, live_server, settings, tmp_path):
    """Requests ``browser`` first (a missing Chromium skips before any data is made)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.EXPORT_DIR = tmp_path / "exports"
    demo_load()
    return UserFactory(username="archive-lead", role="ML engineer")


def test_lead_downloads_the_archive_and_it_restores(lead, page: Page, tmp_path) -> None:
    """The settings page's "Download archive" gives DEMO-....concord.zip; restoring it after the
    project is deleted gives back its judgements and the same agreement report."""
    project = Project.objects.get(slug="demo")
    before = measures(project)
    n_judgements = Judgement.objects.filter(comparison__project=project).count()
    log_in(page, lead)
    page.goto("/annotation/p/demo/settings/")
    with page.expect_download() as info:
        page.get_by_role("link", name="Download archive").click()
    download = info.value
    assert download.suggested_filename.startswith("demo-")
    assert download.suggested_filename.endswith(".concord.zip")
    path = tmp_path / download.suggested_filename
    download.save_as(path)
    purge(project)
    call_command("restore_project", str(path))
    restored = Project.objects.get(slug="demo")
    assert Judgement.objects.filter(comparison__project=restored).count() == n_judgements > 0
    assert measures(restored) == before
