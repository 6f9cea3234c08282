"""Shared fixtures: one user per role (``tests.helpers.clients.logged_in`` gives a client logged in as
one)."""

import pytest

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


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """PBKDF2's deliberate slowness buys nothing in tests."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _agreement_state_in_tmp(settings, tmp_path):
    """The agreement dashboard keeps the rows of its last refresh in files: the test's own folder."""
    settings.AGREEMENT_STATE_DIR = tmp_path / "agreement-state"


@pytest.fixture(autouse=True)
def _no_throttle_counts():
    """Failed logins and API calls are counted in the shared cache (Redis here), per address: every
    test client is 127.0.0.1, so one test's wrong passwords would slow the next test's login. Each
    test starts with no counts."""
    from django.core.cache import cache

    client = getattr(getattr(cache, "_cache", None), "get_client", None)
    if client is None:
        cache.clear()
        return
    redis = client(write=True)
    keys = list(redis.scan_iter(match="*concord:throttle:*", count=1000))
    if keys:
        redis.delete(*keys)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a transactional test that does not restore the migrated data. A plain
    ``transaction=True`` flush sends post_migrate, which makes the role groups again under new
    ids; a later ``serialized_rollback=True`` test then restores the migrated groups under their
    old ids and fails on the unique name, so the suite would depend on its order."""
    plain = [
        item.nodeid
        for item in items
        if (marker := item.get_closest_marker("django_db")) is not None
        and marker.kwargs.get("transaction")
        and not marker.kwargs.get("serialized_rollback")
    ]
    if plain:
        raise pytest.UsageError(
            "transactional tests must also set serialized_rollback=True "
            "(pytest.mark.django_db(transaction=True, serialized_rollback=True)): "
            + ", ".join(plain[:5])
        )
