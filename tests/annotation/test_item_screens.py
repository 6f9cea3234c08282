"""The rating and ranking screens through Django's test client (the browser tests drive the keys):
the label page shows the item in the lease's display order, a form submission stores the answer
mapped back to stored positions, a refused one says why and keeps the item, skip moves on."""

import re

import pytest
from django.urls import reverse

from annotation.models import TaskAnswer, TaskLease
from tests.helpers.task_items import annotators, ranking_project, rating_project

pytestmark = pytest.mark.django_db


def _page(client, user, project):
    client.force_login(user)
    return client.get(reverse("annotation:label", args=[project.slug]))


def test_ranking_page_shows_the_display_order_and_a_form_stores_stored_ranks(client):
    project, _ = ranking_project(1, k=4, overlap=1)
    (user,) = annotators(project, 1)
    page = _page(client, user, project)
    assert page.status_code == 200
    lease = TaskLease.objects.get()
    html = page.content.decode()
    shown = re.findall(r"Reply 0\.(\d)", html)
    assert [int(p) for p in shown] == lease.order
    assert 'src="/static/annotation/label_item.js"' in html or "label_item" in html
    assert "<script>" not in html  # no inline script (CSP)
    form = {f"rank-{slot}": str(rank) for slot, rank in enumerate([2, 1, 4, 3])}
    answer_url = reverse("annotation:item-submit", args=[project.slug, lease.pk])
    done = client.post(answer_url, {**form, "size": "4", "elapsed_ms": "1500"}, follow=True)
    assert b"Nothing left to label" in done.content
    answer = TaskAnswer.objects.get()
    assert [answer.ranks[p] for p in lease.order] == [2, 1, 4, 3]
    assert answer.elapsed_ms == 1500


def test_a_refused_rating_keeps_the_item_and_says_why(client):
    project, _ = rating_project(2, overlap=1)
    (user,) = annotators(project, 1)
    page = _page(client, user, project)
    assert b'data-testid="aspect-helpfulness"' in page.content
    lease = TaskLease.objects.get()
    url = reverse("annotation:item-submit", args=[project.slug, lease.pk])
    again = client.post(url, {"score-helpfulness": "4", "size": "1"}, follow=True)
    assert b"score correctness" in again.content
    assert not TaskAnswer.objects.exists()
    assert TaskLease.objects.get().pk == lease.pk
    form = {"score-helpfulness": "4", "score-correctness": "5", "thumbs": "up", "size": "1"}
    client.post(url, {**form, "rationale": "fine"})
    answer = TaskAnswer.objects.get()
    assert (answer.scores, answer.thumbs, answer.rationale) == (
        {"helpfulness": 4, "correctness": 5},
        True,
        "fine",
    )


def test_skip_moves_to_the_next_item(client):
    project, _ = rating_project(2, overlap=1)
    (user,) = annotators(project, 1)
    _page(client, user, project)
    lease = TaskLease.objects.get()
    client.post(reverse("annotation:item-skip", args=[project.slug, lease.pk]))
    _page(client, user, project)
    assert TaskLease.objects.get(status="active").item_id != lease.item_id


def test_non_members_do_not_see_the_item_screen(client):
    from common.roles import ANNOTATOR
    from tests.factories import UserFactory

    project, _ = rating_project(1)
    stranger = UserFactory(role=ANNOTATOR)
    assert _page(client, stranger, project).status_code == 404
