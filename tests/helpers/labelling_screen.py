"""The labelling screen's browser-test helpers: a small project with one annotator, reading which
pair is on screen and which stored response is on the left, and waiting for a pair switch."""

from __future__ import annotations

from dataclasses import dataclass

from playwright.sync_api import Page, expect

from annotation.models import Comparison, Project, Side
from tests.factories import (
    ComparisonFactory,
    ProjectFactory,
    PromptFactory,
    ResponseFactory,
    UserFactory,
)
from tests.helpers.browser import PASSWORD  # noqa: F401 (re-exported for the labelling tests)

XSS_TEXT = (
    "Here is some HTML:\n\n"
    "<script>window.__xss=1</script>\n\n"
    '<img src=x onerror="window.__xss=2">\n\n'
    '<a href="javascript:window.__xss=3">x</a>\n\n'
    '<iframe src="https://example.com"></iframe>\n\n'
    "[markdown link](javascript:window.__xss=4)"
)


@dataclass
class Setup:
    project: Project
    annotator: object
    comparisons: list[Comparison]
    # response text -> (comparison, "a" or "b")
    by_text: dict[str, tuple[Comparison, str]]

    @property
    def label_path(self) -> str:
        return f"/annotation/p/{self.project.slug}/label/"


def make_project(n_pairs: int, texts: dict[int, tuple[str, str]] | None = None) -> Setup:
    project = ProjectFactory(
        name="Browser labelling",
        slug="browser-labelling",
        overlap=1,
        allow_ties=True,
        allow_both_bad=False,
        strength_scale=3,
        gold_every=0,
        repeat_every=0,
        guidelines="Pick the **more helpful** answer.",
    )
    annotator = UserFactory(username="lena", role="Annotator")
    project.members.add(annotator)
    comparisons, by_text = [], {}
    for i in range(n_pairs):
        text_a, text_b = (texts or {}).get(
            i, (f"Pair {i} answer alpha: use a loop.", f"Pair {i} answer bravo: use recursion.")
        )
        prompt = PromptFactory(project=project, text=f"Question {i}: how do I sum a list?")
        comparison = ComparisonFactory(
            project=project,
            prompt=prompt,
            response_a=ResponseFactory(prompt=prompt, text=text_a),
            response_b=ResponseFactory(prompt=prompt, text=text_b),
        )
        comparisons.append(comparison)
        by_text[text_a] = (comparison, Side.A)
        by_text[text_b] = (comparison, Side.B)
    return Setup(project, annotator, comparisons, by_text)


def on_screen(page: Page, setup: Setup) -> tuple[Comparison, str]:
    """The comparison on screen and which stored response ("a"/"b") is on the left, read from the
    page text (and checked against the right panel)."""
    left = page.get_by_test_id("left").locator(".md").inner_text().strip()
    right = page.get_by_test_id("right").locator(".md").inner_text().strip()
    comparison, left_side = setup.by_text[left]
    right_comparison, right_side = setup.by_text[right]
    assert right_comparison.pk == comparison.pk
    assert {left_side, right_side} == {Side.A, Side.B}
    return comparison, left_side


def other_side(side: str) -> str:
    return Side.B if side == Side.A else Side.A


def settled(page: Page) -> None:
    """Wait until every verdict the screen sent was answered (and the next pair reserved)."""
    expect(page.locator("#verdict")).to_have_attribute("data-pending", "0")


def switch_pair(page: Page, act) -> None:
    """Do ``act`` (a key press or a click that moves on) and wait for the next pair, swapped in
    without a page load (or the "nothing left" page), and for the verdict to be stored."""
    before = page.locator("#screen").get_attribute("data-assignment")
    act()
    page.wait_for_function(
        "old => !document.getElementById('screen')"
        " || document.getElementById('screen').dataset.assignment !== old",
        arg=before,
    )
    if page.locator("#verdict").count():
        settled(page)
