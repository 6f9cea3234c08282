"""A failed request shows a readable page, never a traceback: 503 with Retry-After while the
database is not answering (a restart), 500 otherwise; the API answers in JSON."""

import psycopg
import pytest
from django.db import IntegrityError, OperationalError
from django.test import Client
from django.urls import reverse

from annotation.services import labelling
from tests.factories import ProjectFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def member(annotator):
    project = ProjectFactory(slug="p", gold_every=0, repeat_every=0)
    project.members.add(annotator)
    client = Client(raise_request_exception=False)
    client.force_login(annotator)
    return client


def _submit(client: Client):
    return client.post(
        reverse("annotation:label-submit", args=["p", 1]), {"pick": "left", "strength": "1"}
    )


def _failing_submit(monkeypatch, exc: Exception) -> None:
    def fail(**kwargs):
        raise exc

    monkeypatch.setattr(labelling, "judgement_submit", fail)


def test_database_down_is_a_503_page_with_retry_after(member, monkeypatch):
    """Django wraps psycopg's connection failure in its OperationalError, as when PostgreSQL
    restarts under a request."""
    cause = psycopg.OperationalError("connection failed: Connection refused")
    error = OperationalError("connection failed")
    error.__cause__ = cause
    _failing_submit(monkeypatch, error)
    response = _submit(member)
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    page = response.content.decode()
    assert "<h1>Back in a moment</h1>" in page
    assert "not stored twice" in page and "Traceback" not in page


def test_other_errors_are_a_plain_500_page(member, monkeypatch):
    _failing_submit(monkeypatch, IntegrityError("duplicate key value"))
    response = _submit(member)
    assert response.status_code == 500
    assert not response.has_header("Retry-After")
    page = response.content.decode()
    assert "<h1>Something went wrong</h1>" in page
    assert "duplicate key" not in page and "Traceback" not in page


def test_the_api_answers_json(ml_engineer, monkeypatch):
    from annotation import apis

    def fail(**kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(apis, "dataset_export", fail)
    ProjectFactory(slug="p")
    client = Client(raise_request_exception=False)
    client.force_login(ml_engineer)
    response = client.post("/api/projects/p/exports/", {}, content_type="application/json")
    assert response.status_code == 503
    assert response.json() == {"detail": "The database is not answering; retry in a few seconds."}


def test_favicon_is_served_not_404(client):
    """Pages without an icon link (the admin) make browsers ask for /favicon.ico."""
    response = client.get("/favicon.ico")
    from django.contrib.staticfiles import finders

    assert response.status_code == 302 and response.url.endswith("favicon.ico")
    assert finders.find("favicon.ico")  # what the redirect points at exists
