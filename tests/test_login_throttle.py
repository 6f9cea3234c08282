"""Throttled logins: failures are counted per account and per address; past the limit every
attempt is refused for a while (the right password too), the lockout is logged and listed in the
admin, and other accounts and addresses log in as before."""

from __future__ import annotations

import base64
import logging
import time

import pytest
from django.test import Client

from common.models import LoginLockout
from common.roles import ML_ENGINEER
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery"  # the factories' password
REFUSED = "Too many failed logins."
WRONG = "did not match"
ATTEMPTS = 1000


def _login(username: str, password: str, address: str):
    return Client(REMOTE_ADDR=address).post(
        "/accounts/login/", {"username": username, "password": password}
    )


@pytest.fixture
def limits(settings):
    """Low limits so the test is fast: 5 failures lock an account, 20 an address; no slowing."""
    settings.CONCORD_LOGIN_ACCOUNT_LIMIT = 5
    settings.CONCORD_LOGIN_ADDRESS_LIMIT = 20
    settings.CONCORD_LOGIN_SLOW_AFTER = 0
    settings.CONCORD_LOGIN_LOCKOUT_S = 900
    return settings


def test_a_thousand_wrong_passwords_against_one_account(limits, caplog):
    """1,000 wrong passwords for victim from 1,000 addresses (so only the account limit applies):
    the first 5 are checked ("wrong password"), the other 995 refused without a check. Then victim's
    right password is refused too, while alice logs in (302); one lockout is recorded and logged."""
    UserFactory(username="victim")
    UserFactory(username="alice")
    caplog.set_level(logging.WARNING, logger="common.login_throttle")
    outcomes = []
    for i in range(ATTEMPTS):
        body = _login("victim", f"guess-{i}", f"10.0.{i // 250}.{i % 250}").content.decode()
        outcomes.append("refused" if REFUSED in body else "wrong" if WRONG in body else "other")
    assert outcomes == ["wrong"] * 5 + ["refused"] * 995
    right = _login("victim", PASSWORD, "192.0.2.1")
    assert right.status_code == 200 and REFUSED in right.content.decode()
    assert _login("alice", PASSWORD, "192.0.2.1").status_code == 302
    lockout = LoginLockout.objects.get()
    assert (lockout.kind, lockout.subject, lockout.failures) == ("account", "victim", 5)
    assert [r.getMessage().split(",")[0] for r in caplog.records] == [
        "Login lockout: account victim after 5 failed logins"
    ]


def test_a_thousand_wrong_passwords_from_one_address(limits):
    """1,000 wrong passwords from 203.0.113.7, each for a different username (so only the address
    limit applies): the first 20 are checked, 980 refused. alice's right password from that address
    is refused; from another address it logs her in."""
    UserFactory(username="alice")
    outcomes = []
    for i in range(ATTEMPTS):
        body = _login(f"guess{i}", "wrong", "203.0.113.7").content.decode()
        outcomes.append("refused" if REFUSED in body else "wrong" if WRONG in body else "other")
    assert outcomes == ["wrong"] * 20 + ["refused"] * 980
    assert REFUSED in _login("alice", PASSWORD, "203.0.113.7").content.decode()
    assert _login("alice", PASSWORD, "198.51.100.2").status_code == 302
    lockout = LoginLockout.objects.get()
    assert (lockout.kind, lockout.subject, lockout.failures) == ("address", "203.0.113.7", 20)


def test_email_and_username_count_against_the_same_account(limits):
    """Guessing through the account's email address adds to the username's count: 3 by name and 2
    by email lock it (5)."""
    UserFactory(username="victim", email="victim@example.org")
    for i in range(3):
        _login("victim", f"g{i}", f"10.1.0.{i}")
    for i in range(2):
        _login("VICTIM@example.org", f"h{i}", f"10.2.0.{i}")
    assert REFUSED in _login("victim", PASSWORD, "10.3.0.1").content.decode()


def test_a_right_password_clears_the_accounts_count(limits):
    """4 failures, a success, 4 failures: never 5 in a row, so never locked (the 10th login: 302)."""
    UserFactory(username="alice")
    for i in range(4):
        _login("alice", f"g{i}", f"10.4.0.{i}")
    assert _login("alice", PASSWORD, "10.4.1.1").status_code == 302
    for i in range(4):
        _login("alice", f"h{i}", f"10.4.2.{i}")
    assert _login("alice", PASSWORD, "10.4.3.1").status_code == 302
    assert not LoginLockout.objects.exists()


def test_failures_slow_logins_before_the_lockout(limits):
    """SLOW_AFTER 2: after the 2nd failure the next attempt must wait 2**0 = 1 s; sooner, even the
    right password is refused ("1 second(s)"); after the wait it logs in."""
    limits.CONCORD_LOGIN_SLOW_AFTER = 2
    UserFactory(username="alice")
    for i in range(2):
        assert WRONG in _login("alice", f"g{i}", "10.5.0.1").content.decode()
    early = _login("alice", PASSWORD, "10.5.0.1").content.decode()
    assert "Too many failed logins. Try again in 1 second(s)." in early
    time.sleep(1.1)
    assert _login("alice", PASSWORD, "10.5.0.1").status_code == 302


def test_basic_auth_on_the_api_shares_the_count(limits, settings):
    """Wrong Basic-auth passwords on the API count like the login page's: after 5, the right
    password is refused (401) on the API and on the login page."""
    UserFactory(username="emily", role=ML_ENGINEER)

    def basic(password: str) -> int:
        token = base64.b64encode(f"emily:{password}".encode()).decode()
        return (
            Client(REMOTE_ADDR="10.6.0.1")
            .get("/api/projects/x/imports/1/", HTTP_AUTHORIZATION=f"Basic {token}")
            .status_code
        )

    assert basic(PASSWORD) == 404  # authenticated: the job does not exist
    assert [basic(f"g{i}") for i in range(5)] == [401] * 5
    assert basic(PASSWORD) == 401
    assert REFUSED in _login("emily", PASSWORD, "10.7.0.1").content.decode()


def test_lockouts_are_listed_in_the_admin_and_deleting_one_ends_it(limits):
    """The superuser's admin list of login lockouts shows the locked account; deleting the row
    (the admin's delete confirmation) lets the right password in at once (302)."""
    UserFactory(username="victim")
    for i in range(5):
        _login("victim", f"g{i}", "10.8.0.1")
    admin = UserFactory(username="root", is_superuser=True, is_staff=True)
    client = Client()
    client.force_login(admin)
    page = client.get("/admin/common/loginlockout/")
    assert page.status_code == 200
    assert "victim" in page.content.decode()
    assert REFUSED in _login("victim", PASSWORD, "10.8.0.2").content.decode()
    lockout = LoginLockout.objects.get()
    client.post(f"/admin/common/loginlockout/{lockout.pk}/delete/", {"post": "yes"})
    assert not LoginLockout.objects.exists()
    assert _login("victim", PASSWORD, "10.8.0.2").status_code == 302


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_parallel_failures_are_all_counted_and_lock_once(limits):
    """8 threads record 25 failures each for one account (limit 200), as parallel web workers would:
    none is lost, so exactly one lockout is recorded, at 200 failures."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection
    from django.test import RequestFactory

    from common.login_throttle import login_failure_record

    limits.CONCORD_LOGIN_ACCOUNT_LIMIT = 200
    limits.CONCORD_LOGIN_ADDRESS_LIMIT = 10_000

    def guess(thread: int) -> None:
        request = RequestFactory().post("/accounts/login/", REMOTE_ADDR=f"10.9.0.{thread}")
        try:
            for _ in range(25):
                login_failure_record(request=request, username="victim")
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(guess, range(8)))
    assert list(LoginLockout.objects.values_list("kind", "subject", "failures")) == [
        ("account", "victim", 200)
    ]
