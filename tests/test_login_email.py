"""Logging in with an email address instead of the username: the one account that has it only."""

import pytest
from django.test import Client

from common.forms import login_username
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
PASSWORD = "correct horse battery"  # UserFactory's password


def _log_in(identifier: str) -> Client:
    client = Client()
    client.post("/accounts/login/", {"username": identifier, "password": PASSWORD})
    return client


def _who(client: Client) -> str | None:
    user_id = client.session.get("_auth_user_id")
    return None if user_id is None else UserFactory._meta.model.objects.get(pk=user_id).username


def test_the_email_of_one_account_logs_it_in_whatever_its_case():
    """``Ann@Example.ORG`` is the email of exactly one account, ``ann``: typed in lower case it
    logs ``ann`` in; the username itself still works."""
    UserFactory(username="ann", email="Ann@Example.ORG")
    assert _who(_log_in("ann@example.org")) == "ann"
    assert _who(_log_in("ann")) == "ann"


def test_an_email_shared_by_two_accounts_logs_nobody_in():
    """Two accounts share ``team@example.org``: the email names neither, so the login fails (the
    usual error), and ``login_username`` leaves it as typed."""
    UserFactory(username="one", email="team@example.org")
    UserFactory(username="two", email="TEAM@example.org")
    client = _log_in("team@example.org")
    assert _who(client) is None
    assert login_username("team@example.org") == "team@example.org"


def test_a_username_that_looks_like_an_email_wins_over_another_accounts_email():
    """An account named ``x@example.org`` is found by its username before the other account whose
    email is ``x@example.org``."""
    UserFactory(username="x@example.org", email="")
    UserFactory(username="other", email="x@example.org")
    assert login_username("x@example.org") == "x@example.org"
    assert _who(_log_in("x@example.org")) == "x@example.org"
