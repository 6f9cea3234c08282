"""Suggestions and the judge toggle in a real browser.

- The labelling screen pre-selects a model judge's verdict, mapped to the sides this annotator sees,
  and says so in words; Enter keeps it, a pick key changes it; each judgement records the suggestion.
- The agreement dashboard is human-only until the lead presses "Show the model judges", which lists
  each judge beside the humans with a link to its report.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from annotation.models import Judgement, Project, Side
from annotation.services import agreement as agreement_services
from annotation.tasks import agreement_report_refresh
from common.roles import ML_ENGINEER, machine_account_mark
from monitoring.models import Judge, JudgeOutput
from monitoring.services import judges as judge_services
from tests.factories import ComparisonFactory, JudgementFactory, ProjectFactory, UserFactory
from tests.helpers.browser import log_in
from tests.helpers.labelling_screen import make_project, on_screen, other_side, settled, switch_pair

# The judge's verdict on each of the 3 pairs, in stored terms.
VERDICTS = ["a", "b", "tie"]


@pytest.fixture
def fast_hasher(browser, live_server, settings) -> None:
    """Requests ``browser`` first (a missing Chromium skips before any data is made)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _screen_pick(choice: str, left_side: str) -> str:
    if choice in (Side.A, Side.B):
        return "left" if choice == left_side else "right"
    return choice


def test_the_suggestion_is_preselected_marked_and_recorded(fast_hasher, page: Page) -> None:
    """Pair 1: the suggestion is pre-selected on the side where the judge's preferred response is
    shown, marked "Suggested by helpful v1"; Enter keeps it. Pair 2: the annotator presses the
    other side and Enter: their own choice is stored, with the suggestion they were shown. Pair 3:
    the judge says tie; kept with Enter."""
    setup = make_project(n_pairs=3)
    machine = UserFactory(username=f"judge:{setup.project.slug}:helpful:v1")
    machine_account_mark(user=machine)
    for comparison, choice in zip(setup.comparisons, VERDICTS, strict=True):
        JudgementFactory(comparison=comparison, annotator=machine, choice=choice, shown_left="")
    Project.objects.filter(pk=setup.project.pk).update(suggestion_judge=machine)
    verdict_of = {c.pk: v for c, v in zip(setup.comparisons, VERDICTS, strict=True)}

    log_in(page, setup.annotator)
    page.goto(setup.label_path)
    settled(page)
    stored = {}
    for step in range(3):
        comparison, left_side = on_screen(page, setup)
        suggested = _screen_pick(verdict_of[comparison.pk], left_side)
        note = page.get_by_test_id("suggestion")
        expect(note).to_contain_text("Suggested by helpful v1")
        expect(note).to_have_attribute("data-suggested-pick", suggested)
        button = page.locator(f'button[data-pick="{suggested}"]')
        expect(button).to_have_class(re.compile("selected"))
        expect(button).to_have_attribute("aria-pressed", "true")
        if step == 1 and suggested in ("left", "right"):
            own = "right" if suggested == "left" else "left"
            page.keyboard.press({"left": "1", "right": "2"}[own])
            expect(page.locator(f'button[data-pick="{own}"]')).to_have_class(re.compile("selected"))
            expected = left_side if own == "left" else other_side(left_side)
        else:
            expected = verdict_of[comparison.pk]
        switch_pair(page, lambda: page.keyboard.press("Enter"))
        stored[comparison.pk] = (expected, verdict_of[comparison.pk])

    rows = Judgement.objects.filter(annotator=setup.annotator)
    assert {j.comparison_id: (j.choice, j.suggested_choice) for j in rows} == stored
    assert any(choice != shown for choice, shown in stored.values())  # one was changed


@pytest.fixture
def judged(fast_hasher, settings, monkeypatch) -> Judge:
    """4 pairs judged a, a, b, a by three people, and a judge that agrees with them in both orders
    except on the last pair, where it says the response shown first is better (a swap flip)."""
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "ui"}
    }
    monkeypatch.setattr(agreement_report_refresh, "apply_async", lambda **kwargs: None)
    project = ProjectFactory(slug="toggle")
    people = [UserFactory(username=f"rater{k}", role="Annotator") for k in range(3)]
    comparisons = [ComparisonFactory(project=project) for _ in range(4)]
    for comparison, choice in zip(comparisons, "aaba", strict=True):
        for person in people:
            JudgementFactory(comparison=comparison, annotator=person, choice=choice)
    machine = UserFactory(username="judge:toggle:fair:v1")
    machine.set_unusable_password()
    machine.save()
    machine_account_mark(user=machine)
    judge = Judge.objects.create(
        project=project, name="fair", version=1, kind=Judge.Kind.LOCAL_LLM, annotator=machine,
        model_name="smollm2-135m-instruct", template="{prompt} {response_a} {response_b}",
        status=Judge.Status.SUCCEEDED,
    )  # fmt: skip
    answers = [("a", "a"), ("a", "a"), ("b", "b"), ("a", "b")]
    for comparison, pair in zip(comparisons, answers, strict=True):
        for first, verdict in zip("ab", pair, strict=True):
            JudgeOutput.objects.create(
                judge=judge, comparison=comparison, shown_first=first, raw=verdict,
                verdict=verdict, seconds=0.1,
            )  # fmt: skip
    judge_services.judge_verdicts_store(judge=judge)
    agreement_services.dashboard_refresh(project=project, n_boot=50, pair_boot=20)
    return judge


def test_the_dashboard_toggle_shows_the_judges_beside_the_humans(judged, page: Page) -> None:
    lead = UserFactory(username="lead", role=ML_ENGINEER)
    log_in(page, lead)
    page.goto(f"/annotation/p/{judged.project.slug}/agreement/")
    expect(page.get_by_test_id("annotators")).to_be_visible()
    expect(page.get_by_test_id("judge-figures")).to_have_count(0)
    expect(page.get_by_test_id("annotators")).not_to_contain_text("fair")

    page.get_by_role("button", name="Show the model judges beside the humans").click()
    expect(page).to_have_url(re.compile(r"\?judges=1$"))
    row = page.locator('[data-testid="judge-figures"] tr[data-judge="fair"]')
    expect(row).to_contain_text("fair v1")
    expect(row).to_contain_text("rater0: ")
    expect(row).to_contain_text("1 of 4")  # swap flips: 1 of 4 decisive pairs
    expect(page.get_by_test_id("annotators")).not_to_contain_text("fair")

    row.get_by_role("link", name="judge report").click()
    expect(page.get_by_role("heading", name="Judge report: fair v1")).to_be_visible()
    page.go_back()
    page.get_by_role("button", name="Hide the model judges").click()
    expect(page.get_by_test_id("judge-figures")).to_have_count(0)


def test_the_annotators_table_stays_inside_its_card_on_a_narrow_screen(judged, page: Page) -> None:
    """The annotators table has thirteen columns: on an 800-pixel screen it scrolls inside its
    card (a wrapper of the card's width) instead of running past the card's right edge or making
    the whole page scroll sideways."""
    lead = UserFactory(username="lead", role=ML_ENGINEER)
    page.set_viewport_size({"width": 800, "height": 800})
    log_in(page, lead)
    page.goto(f"/annotation/p/{judged.project.slug}/agreement/")
    table = page.get_by_test_id("annotators")
    expect(table).to_be_visible()
    outside = table.evaluate(
        "t => { const box = t.parentElement.getBoundingClientRect();"
        " return [box.right - t.closest('section').getBoundingClientRect().right,"
        " document.documentElement.scrollWidth - window.innerWidth]; }"
    )
    assert outside[0] <= 0 and outside[1] <= 0, outside
