"""Adjudication pages for the Adjudicator role (a column the shared matrix does not have): the queue
and the verdict for adjudicators, nothing else of the lead's; annotators get 404 everywhere but
their own flag, and a flag on another project's pair is 404."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from annotation.models import Adjudication, Assignment, Flag
from tests.factories import ComparisonFactory, ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def test_adjudicator_decides_but_sees_no_other_lead_page():
    project = ProjectFactory(slug="adj")
    comparison = ComparisonFactory(project=project)
    adjudicator = _client(UserFactory(username="ada", role="Adjudicator"))
    assert adjudicator.get("/annotation/p/adj/adjudicate/").status_code == 200
    saved = adjudicator.post(
        f"/annotation/p/adj/adjudicate/{comparison.pk}/", {"pick": "left", "shown_left": "b"}
    )
    assert saved.status_code == 302
    assert Adjudication.objects.get().choice == "b"
    for page in ("agreement/", "manage/", "clusters/", "label/"):
        assert adjudicator.get(f"/annotation/p/adj/{page}").status_code == 404, page
    assert adjudicator.get("/annotation/p/no-such/adjudicate/").status_code == 404


def test_annotator_cannot_adjudicate_or_flag_another_projects_pair():
    own, other = ProjectFactory(slug="own"), ProjectFactory(slug="other")
    annie = UserFactory(username="annie", role="Annotator")
    own.members.add(annie)
    theirs = Assignment.objects.create(
        comparison=ComparisonFactory(project=other), annotator=annie, shown_left="a",
        expires_at=timezone.now() + timedelta(minutes=30),
    )  # fmt: skip
    client = _client(annie)
    assert client.get("/annotation/p/own/adjudicate/").status_code == 404
    pair = ComparisonFactory(project=own)
    assert (
        client.post(f"/annotation/p/own/adjudicate/{pair.pk}/", {"pick": "left"}).status_code == 404
    )
    flagged = client.post(f"/annotation/p/other/label/{theirs.pk}/flag/", {"reason": "unclear"})
    assert flagged.status_code == 404
    assert not Adjudication.objects.exists() and not Flag.objects.exists()
