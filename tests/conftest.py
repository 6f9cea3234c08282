"""Shared fixtures: one user per role, and a client logged in as each."""

import pytest
from django.test import Client

from common.roles import ANNOTATOR, ML_ENGINEER, REVIEWER
from tests.factories import UserFactory
from tests.helpers.chromium import browser  # noqa: F401 (the session's one Chromium, a fixture)


@pytest.fixture
def annotator(db):
    return UserFactory(username="annie", role=ANNOTATOR)


@pytest.fixture
def reviewer(db):
    return UserFactory(username="rev", role=REVIEWER)


@pytest.fixture
def ml_engineer(db):
    return UserFactory(username="emily", role=ML_ENGINEER)


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """PBKDF2's deliberate slowness buys nothing in tests."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
