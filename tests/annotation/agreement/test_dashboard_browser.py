"""The agreement dashboard in headless Chromium: the script draws every chart without an error.

Uses the session's one Chromium (tests/helpers/chromium.py), so it runs in any order beside
tests/browser. Uses the demo project, whose annotators have known habits, when it is generated.
"""

import pytest
from django.test import Client

from annotation.demo import DEMO_COMPARISONS, DEMO_SLUG, demo_load
from annotation.models import Project
from annotation.selectors import agreement as agreement_selectors
from annotation.services import agreement as agreement_services
from annotation.tasks import agreement_report_refresh
from common.roles import ML_ENGINEER
from tests.factories import UserFactory
from tests.helpers.agreement_jsonl import import_file, synthetic_rows, write_jsonl

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


@pytest.fixture
def project(settings, tmp_path, monkeypatch) -> Project:
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "ui"}
    }
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    monkeypatch.setattr(agreement_report_refresh, "apply_async", lambda **kwargs: None)
    if DEMO_COMPARISONS.is_file():
        demo_load()
        project = Project.objects.get(slug=DEMO_SLUG)
    else:
        import_file(write_jsonl(tmp_path / "rows.jsonl", synthetic_rows(90)), "ui")
        project = Project.objects.get(slug="ui")
    agreement_services.dashboard_refresh(project=project, n_boot=200, pair_boot=50)
    return project


def test_dashboard_draws_every_chart(browser, live_server, project, settings, tmp_path):
    lead = UserFactory(username="lead", role=ML_ENGINEER)
    client = Client()
    client.force_login(lead)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 900})
    context.add_cookies(
        [{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": live_server.url}]
    )
    context.set_default_timeout(10_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    def console(message) -> None:
        # The browser asks for /favicon.ico on its own; that 404 is not the dashboard's.
        if message.type == "error" and "favicon" not in message.location.get("url", ""):
            errors.append(message.text)

    page.on("console", console)
    page.goto(f"/annotation/p/{project.slug}/agreement/")
    page.wait_for_selector("#coefficient-chart svg circle")
    n = len(agreement_selectors.cached_dashboard(project=project)["heatmap"]["annotators"])
    assert page.locator("#coefficient-chart svg circle").count() == 5
    assert page.locator("#coefficient-chart svg .target-line").count() == 1
    assert page.locator("#kappa-heatmap svg rect").count() >= n * (n - 1)
    for chart in ("#by-batch", "#by-day"):
        assert page.locator(f"{chart} svg circle").count() >= 1, chart
    page.screenshot(path=str(tmp_path / "agreement.png"), full_page=True)
    # The annotator's own link in the table: a name like "ana" is also part of the sub-navigation's
    # "Manage", so a link found by its name could be another.
    page.locator("table.annotators a").first.click()
    page.wait_for_selector("h1")
    assert "disagree" in page.content().lower()
    context.close()
    assert errors == []
