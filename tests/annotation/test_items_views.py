"""The item browser's pages: the table with its GET filters and cursors, the item page, the link."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from annotation.models import Assignment, Judgement
from tests.factories import JudgementFactory, ProjectFactory, UserFactory
from tests.helpers.annotation_data import make_pair
from tests.helpers.clients import logged_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def project():
    return ProjectFactory(slug="browse", overlap=2)


def test_the_table_lists_filters_and_pages(ml_engineer, project):
    pairs = [make_pair(project, prompt=f"question {i} about cats") for i in range(3)]
    make_pair(project, prompt="a question about dogs", b="dogs bark")
    client = logged_in(ml_engineer)
    url = reverse("annotation:items", args=[project.slug])
    page = client.get(url, {"q": "cats", "order": "-id"})
    assert page.status_code == 200
    html = page.content.decode()
    assert "3 matching of 4 comparisons" in html
    assert html.index(f">{pairs[2].pk}</a>") < html.index(f">{pairs[0].pk}</a>")
    assert "dogs" not in html.split("<tbody>")[1]
    # The page size is 50: no next page, no previous one.
    assert 'rel="next"' not in html and 'rel="prev"' not in html


def test_next_and_previous_links_keep_the_filters(ml_engineer, project, monkeypatch):
    monkeypatch.setattr("annotation.selectors.items.PAGE_SIZE", 2)
    pairs = [make_pair(project, prompt=f"prompt {i}") for i in range(5)]
    client = logged_in(ml_engineer)
    url = reverse("annotation:items", args=[project.slug])
    first = client.get(url, {"status": "open"})
    assert [row.id for row in first.context["page"].rows] == [p.pk for p in pairs[:2]]
    cursor = first.context["page"].next_cursor
    assert f"status=open&amp;after={cursor}" in first.content.decode()
    second = client.get(url, {"status": "open", "after": cursor})
    assert [row.id for row in second.context["page"].rows] == [p.pk for p in pairs[2:4]]
    back = client.get(url, {"status": "open", "before": second.context["page"].previous_cursor})
    assert [row.id for row in back.context["page"].rows] == [p.pk for p in pairs[:2]]


def test_a_bad_filter_answers_400_with_the_message(ml_engineer, project):
    client = logged_in(ml_engineer)
    url = reverse("annotation:items", args=[project.slug])
    response = client.get(url, {"margin_min": "lots"})
    assert response.status_code == 400
    assert "margin_min must be a number" in response.content.decode()
    response = client.get(url, {"after": "not-a-cursor"})
    assert response.status_code == 400 and "cursor is damaged" in response.content.decode()


def test_the_item_page_shows_texts_judgements_consensus_and_history(ml_engineer, project):
    pair = make_pair(project, prompt="Why is the sky blue?", a="Rayleigh scattering", b="Magic")
    ann1, ann2 = UserFactory(username="ann1"), UserFactory(username="ann2")
    claimed = timezone.now() - timedelta(minutes=5)
    Assignment.objects.create(
        comparison=pair,
        annotator=ann1,
        shown_left="b",
        status=Assignment.Status.DONE,
        expires_at=claimed + timedelta(minutes=30),
        finished_at=claimed + timedelta(minutes=1),
    )
    Assignment.objects.filter(comparison=pair).update(claimed_at=claimed)  # auto_now_add
    JudgementFactory(
        comparison=pair, annotator=ann1, choice="a", strength=3, shown_left="b",
        elapsed_ms=4321, rationale="physics, obviously",
    )  # fmt: skip
    JudgementFactory(comparison=pair, annotator=ann2, choice="b", shown_left="", elapsed_ms=None)
    Judgement.objects.filter(annotator=ann2).update(
        updated_at=timezone.now() + timedelta(minutes=2)
    )
    response = logged_in(ml_engineer).get(reverse("annotation:item", args=[project.slug, pair.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    for text in ("Why is the sky blue?", "Rayleigh scattering", "Magic", "physics, obviously"):
        assert text in html
    assert "4321 ms" in html
    detail = response.context["item"]
    assert [(r.judgement.annotator.username, r.origin) for r in detail.judgements] == [
        ("ann1", "here"),
        ("ann2", "imported"),
    ]
    rules = {row.rule: row for row in detail.consensus}
    assert rules["Majority (a split is a tie)"].choice == "tie"
    assert rules["Majority (a split is undecided)"].choice is None
    assert rules["Majority (a split is undecided)"].posterior["a"] == pytest.approx(0.5)
    assert rules["Dawid-Skene"].margin is not None
    whats = [event.what for event in detail.history]
    assert whats == [
        "claimed",
        "assignment finished: judged",
        "judgement created (here)",
        "judgement created (imported)",
        "judgement edited",
    ]


def test_an_item_of_another_project_is_404(ml_engineer, project):
    other = make_pair(ProjectFactory(slug="elsewhere"))
    response = logged_in(ml_engineer).get(reverse("annotation:item", args=[project.slug, other.pk]))
    assert response.status_code == 404


def test_the_lead_page_links_to_the_items(ml_engineer, project):
    response = logged_in(ml_engineer).get(reverse("annotation:project-manage", args=[project.slug]))
    assert reverse("annotation:items", args=[project.slug]) in response.content.decode()


def test_annotators_and_reviewers_do_not_see_the_browser(annotator, reviewer, project):
    project.members.add(annotator)
    pair = make_pair(project)
    for user in (annotator, reviewer):
        client = logged_in(user)
        assert client.get(reverse("annotation:items", args=[project.slug])).status_code == 404
        url = reverse("annotation:item", args=[project.slug, pair.pk])
        assert client.get(url).status_code == 404
