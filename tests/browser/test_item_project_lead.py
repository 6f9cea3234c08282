"""A rating or ranking project's lead pages in a real browser: the settings form shows each task
type's own settings (and switches them when the type select changes), the Manage page's
command lines stay inside their card on a narrow window, and its training export leads to the
run form with the export's snapshot."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from playwright.sync_api import Page, expect

from annotation.models import DatasetExport
from common.roles import ML_ENGINEER
from config.celery import app as celery_app
from tests.factories import ProjectFactory, UserFactory
from tests.helpers.browser import log_in
from tests.helpers.task_items import annotators, answered_ranking, rating_project

PAIRWISE_ONLY = ("strength_scale", "allow_both_bad", "queue_order", "continuous_rm")


@pytest.fixture
def lead(browser, live_server, settings):
    """Requests ``browser`` first (a missing Chromium skips before any data is made)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    return UserFactory(username="lena", role=ML_ENGINEER)


def _open(page: Page, user, url: str) -> None:
    page.set_default_navigation_timeout(30_000)
    log_in(page, user)
    expect(page.get_by_test_id("username")).to_have_text(user.username)
    page.goto(url)


def test_settings_show_the_fields_of_the_chosen_task_type(lead, page: Page) -> None:
    """An empty rating project: aspects and thumbs shown, no pairwise verdict settings; choosing
    "ranking" in the select hides the aspects and shows ties; "pairwise" shows its own settings.
    Saving as ranking keeps the hidden strength scale and clears the aspects."""
    project = ProjectFactory(slug="r", task_type="rating", rating_aspects=["helpfulness"],
                             strength_scale=3)  # fmt: skip
    _open(page, lead, reverse("annotation:project-settings", args=[project.slug]))
    form = page.get_by_test_id("project-form")
    expect(form.locator("#id_rating_aspects")).to_be_visible()
    expect(form.locator("#id_allow_ties")).to_be_hidden()
    for name in PAIRWISE_ONLY:
        expect(form.locator(f"#id_{name}")).to_be_hidden()
    form.locator("select[name=task_type]").select_option("ranking")
    expect(form.locator("#id_rating_aspects")).to_be_hidden()
    expect(form.locator("#id_allow_ties")).to_be_visible()
    expect(form.locator("#id_strength_scale")).to_be_hidden()
    form.locator("select[name=task_type]").select_option("pairwise")
    for name in PAIRWISE_ONLY:
        expect(form.locator(f"#id_{name}")).to_be_visible()
    form.locator("select[name=task_type]").select_option("ranking")
    form.get_by_role("button", name="Save settings").click()
    expect(page.locator(".messages")).to_contain_text("Settings saved.")
    project.refresh_from_db()
    assert (project.task_type, project.rating_aspects, project.strength_scale) == (
        "ranking", [], 3,
    )  # fmt: skip


def test_manage_page_commands_wrap_inside_their_card(lead, page: Page) -> None:
    """On a 420-pixel window the import and export command lines wrap: nothing sticks out of the
    card; the annotators table (the include the pairwise page uses too) counts answers."""
    project, _ = rating_project(2, slug="a-rating-project-with-a-long-slug-for-its-commands")
    annotators(project, 1)
    page.set_viewport_size({"width": 420, "height": 800})
    _open(page, lead, reverse("annotation:project-manage", args=[project.slug]))
    commands = page.get_by_test_id("item-commands")
    expect(commands).to_contain_text("import_items")
    overflow = commands.evaluate(
        "el => { const card = el.closest('section').getBoundingClientRect();"
        " const box = el.getBoundingClientRect();"
        " return [el.scrollWidth - el.clientWidth, box.right - card.right]; }"
    )
    assert overflow[0] <= 0 and overflow[1] <= 0
    table = page.get_by_test_id("annotators")
    expect(table.locator("th").nth(1)).to_have_text("Answers")
    expect(table.locator("tbody tr td").nth(1)).to_have_text("0")  # none yet: 0, not blank


@pytest.fixture
def eager_worker():
    """The export job runs in the request that queues it (the worker's part, in-process)."""
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = False


def test_a_rankings_training_export_opens_the_run_form_on_its_snapshot(
    lead, page: Page, eager_worker
) -> None:
    """The lead chooses listwise rows and creates the export: the export job's page shows it
    done with its files, and "Train on this export" opens the run form (kind picker) with the
    export's snapshot chosen; the Manage page lists it."""
    project = answered_ranking(1)
    _open(page, lead, reverse("annotation:project-manage", args=[project.slug]))
    form = page.get_by_test_id("item-export-form")
    form.locator("select[name=format]").select_option("listwise")
    form.get_by_role("button", name="Create export").click()
    expect(page.get_by_test_id("job-state")).to_have_text("Succeeded")
    result = page.get_by_test_id("export-job-result")
    expect(result).to_contain_text("listwise.jsonl")
    export = DatasetExport.objects.get()
    page.goto(reverse("annotation:project-manage", args=[project.slug]))
    exports = page.get_by_test_id("exports")
    expect(exports.locator("tbody tr td").nth(1)).to_have_text("listwise")
    page.go_back()
    page.get_by_test_id("export-job-result").get_by_test_id("train-on-export").click()
    add = reverse("admin:training_trainingrun_add")
    expect(page).to_have_url(re.compile(rf"{re.escape(add)}\?snapshot=\d+$"))
    export.refresh_from_db()
    assert page.url.endswith(f"?snapshot={export.snapshot.pk}")
