"""Undo on the rating and ranking screens: Z (or the link) brings back the session's last answer,
shown as it was left in the order it was made in, to change; only the answer's words change."""

import re

import pytest
from django.urls import reverse

from annotation.models import TaskAnswer, TaskLease
from annotation.services.task_answers import task_answer_edit
from annotation.work_queue.plugins import AnswerError
from tests.helpers.task_items import annotators, ranking_project, rating_project

pytestmark = pytest.mark.django_db

RATED = {"score-helpfulness": "4", "score-correctness": "5", "thumbs": "up", "size": "1"}


def _answer_first_item(client, user, project, form):
    client.force_login(user)
    client.get(reverse("annotation:label", args=[project.slug]))
    lease = TaskLease.objects.get(annotator=user, status="active")
    client.post(reverse("annotation:item-submit", args=[project.slug, lease.pk]), form)
    return TaskAnswer.objects.get(annotator=user), lease


def test_the_screen_offers_undo_only_after_an_answer_of_this_session(client):
    project, _ = rating_project(3, overlap=1)
    (user,) = annotators(project, 1)
    client.force_login(user)
    first = client.get(reverse("annotation:label", args=[project.slug])).content.decode()
    assert 'data-testid="undo"' not in first and "data-undo-url" not in first
    _answer_first_item(client, user, project, RATED)
    page = client.get(reverse("annotation:label", args=[project.slug])).content.decode()
    undo = reverse("annotation:item-edit-last", args=[project.slug])
    assert f'data-undo-url="{undo}"' in page and 'data-testid="undo"' in page
    assert "<kbd>Z</kbd> change your last answer." in page


def test_a_rating_comes_back_filled_in_and_its_change_is_stored(client):
    project, _ = rating_project(3, overlap=1)
    (user,) = annotators(project, 1)
    answer, _ = _answer_first_item(client, user, project, {**RATED, "rationale": "clear"})
    url = reverse("annotation:item-edit-last", args=[project.slug])
    html = client.get(url).content.decode()
    assert 'data-testid="editing"' in html and 'id="skip"' not in html
    assert re.search(r'name="score-helpfulness" value="4" checked', html)
    assert re.search(r'name="score-correctness" value="5" checked', html)
    assert re.search(r'name="thumbs" value="up" checked', html) and ">clear</textarea>" in html
    changed = {**RATED, "score-helpfulness": "2", "thumbs": "down", "rationale": "on reflection"}
    page = client.post(url, changed, follow=True)
    assert b"Your last answer was changed." in page.content
    answer.refresh_from_db()
    assert (answer.scores, answer.thumbs, answer.rationale) == (
        {"helpfulness": 2, "correctness": 5}, False, "on reflection",
    )  # fmt: skip
    assert TaskAnswer.objects.count() == 1


def test_a_ranking_comes_back_in_the_order_it_was_made_and_maps_back(client):
    """The change is read in the answer's own display order, whatever the next lease shows."""
    project, _ = ranking_project(2, k=4, overlap=1)
    (user,) = annotators(project, 1)
    form = {f"rank-{slot}": str(rank) for slot, rank in enumerate([2, 1, 4, 3])}
    answer, lease = _answer_first_item(client, user, project, {**form, "size": "4"})
    html = client.get(reverse("annotation:item-edit-last", args=[project.slug])).content.decode()
    shown = [int(p) for p in re.findall(r"Reply 0\.(\d)", html)]
    assert shown == lease.order
    selected = re.findall(r'<option value="(\d)" selected>', html)
    assert selected == ["2", "1", "4", "3"]
    change = {f"rank-{slot}": str(rank) for slot, rank in enumerate([1, 2, 3, 4])}
    client.post(reverse("annotation:item-edit-last", args=[project.slug]), {**change, "size": "4"})
    answer.refresh_from_db()
    assert [answer.ranks[p] for p in lease.order] == [1, 2, 3, 4]
    assert answer.order == lease.order


def test_a_refused_change_keeps_the_answer_and_says_why(client):
    project, _ = rating_project(2, overlap=1)
    (user,) = annotators(project, 1)
    answer, _ = _answer_first_item(client, user, project, RATED)
    url = reverse("annotation:item-edit-last", args=[project.slug])
    page = client.post(url, {"score-helpfulness": "9", "size": "1"}, follow=True)
    assert b"score correctness" in page.content or b"must be from 1 to 5" in page.content
    answer.refresh_from_db()
    assert answer.scores == {"helpfulness": 4, "correctness": 5}


def test_without_an_answer_this_session_there_is_nothing_to_change(client):
    project, _ = rating_project(2, overlap=1)
    (user,) = annotators(project, 1)
    client.force_login(user)
    page = client.get(reverse("annotation:item-edit-last", args=[project.slug]), follow=True)
    assert b"No answer of this session to change." in page.content


def test_the_service_changes_only_the_annotators_own_answer():
    project, items = rating_project(1, overlap=2)
    owner, other = annotators(project, 2)
    answer = TaskAnswer.objects.create(
        item=items[0], annotator=owner, order=[0], scores={"helpfulness": 3, "correctness": 3},
        thumbs=True,
    )  # fmt: skip
    raw = {"scores": {"helpfulness": 1, "correctness": 1}, "thumbs": "down"}
    with pytest.raises(AnswerError, match="no such answer of yours"):
        task_answer_edit(annotator=other, answer_id=answer.pk, answer=raw)
    answer.refresh_from_db()
    assert answer.scores == {"helpfulness": 3, "correctness": 3}
    changed = task_answer_edit(annotator=owner, answer_id=answer.pk, answer=raw)
    assert (changed.scores, changed.thumbs) == ({"helpfulness": 1, "correctness": 1}, False)
