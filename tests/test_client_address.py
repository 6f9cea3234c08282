"""The client's address (login throttle, anonymous API rate): REMOTE_ADDR unless the request came
through a proxy listed in CONCORD_TRUSTED_PROXIES; only then is X-Forwarded-For read, from the
right, past every trusted hop."""

from __future__ import annotations

import pytest
from django.test import Client, RequestFactory

from common.client_address import MALFORMED, client_address
from common.models import LoginLockout
from tests.factories import UserFactory


def _address(remote: str, forwarded: str | None = None) -> str:
    extra = {"HTTP_X_FORWARDED_FOR": forwarded} if forwarded is not None else {}
    return client_address(RequestFactory().get("/", REMOTE_ADDR=remote, **extra))


def test_without_trusted_proxies_forwarded_for_is_ignored(settings):
    """No proxy configured (the default): a client-written X-Forwarded-For changes nothing."""
    settings.CONCORD_TRUSTED_PROXIES = []
    assert _address("203.0.113.9", "198.51.100.1") == "203.0.113.9"


def test_forwarded_for_from_an_untrusted_address_is_ignored(settings):
    """A proxy is configured, but this request did not come from it: REMOTE_ADDR."""
    settings.CONCORD_TRUSTED_PROXIES = ["10.0.0.0/8"]
    assert _address("203.0.113.9", "198.51.100.1") == "203.0.113.9"


def test_behind_a_trusted_proxy_the_last_hop_is_the_client(settings):
    """Through the proxy 10.0.0.5: the client is the address it appended (the right-most), not
    what the client itself wrote further left."""
    settings.CONCORD_TRUSTED_PROXIES = ["10.0.0.0/8"]
    assert _address("10.0.0.5", "1.2.3.4, 198.51.100.7") == "198.51.100.7"


def test_a_chain_of_trusted_proxies_is_walked(settings):
    """Load balancer 10.1.0.2 then nginx 127.0.0.1: both trusted, the first untrusted hop wins."""
    settings.CONCORD_TRUSTED_PROXIES = ["10.0.0.0/8", "127.0.0.1"]
    assert _address("127.0.0.1", "6.6.6.6, 198.51.100.7, 10.1.0.2") == "198.51.100.7"


def test_ipv6_proxies_and_clients(settings):
    """IPv6 networks work like IPv4 ones."""
    settings.CONCORD_TRUSTED_PROXIES = ["fd00::/8"]
    assert _address("fd00::1", "2001:db8::7") == "2001:db8::7"


def test_only_trusted_hops_falls_back_to_the_left_most(settings):
    """Every hop a trusted proxy (an internal health check): the left-most of them."""
    settings.CONCORD_TRUSTED_PROXIES = ["10.0.0.0/8"]
    assert _address("10.0.0.5", "10.0.0.9") == "10.0.0.9"
    assert _address("10.0.0.5") == "10.0.0.5"


def test_a_malformed_hop_is_one_bucket_not_the_proxy(settings):
    """Garbage before the first untrusted hop is a client's writing: counted under MALFORMED, so
    it neither picks a fresh address per attempt nor locks out the proxy everyone shares."""
    settings.CONCORD_TRUSTED_PROXIES = ["10.0.0.0/8"]
    assert _address("10.0.0.5", "not-an-ip") == MALFORMED
    assert _address("10.0.0.5", f"not-an-ip-{1}, junk") == MALFORMED


@pytest.mark.django_db
def test_the_login_throttle_locks_the_forwarded_client_not_the_proxy(settings):
    """Behind the trusted proxy 10.0.0.5, 3 failures from client 198.51.100.7 lock that client's
    address (limit 3); another client through the same proxy still logs in."""
    settings.CONCORD_TRUSTED_PROXIES = ["10.0.0.5"]
    settings.CONCORD_LOGIN_ADDRESS_LIMIT = 3
    settings.CONCORD_LOGIN_ACCOUNT_LIMIT = 100
    settings.CONCORD_LOGIN_SLOW_AFTER = 0
    UserFactory(username="alice")

    def login(client_ip: str, password: str):
        return Client(REMOTE_ADDR="10.0.0.5", HTTP_X_FORWARDED_FOR=client_ip).post(
            "/accounts/login/", {"username": "alice", "password": password}
        )

    for i in range(3):
        login("198.51.100.7", f"wrong-{i}")
    lockout = LoginLockout.objects.get()
    assert (lockout.kind, lockout.subject) == ("address", "198.51.100.7")
    assert (
        "Too many failed logins" in login("198.51.100.7", "correct horse battery").content.decode()
    )
    assert login("198.51.100.8", "correct horse battery").status_code == 302


@pytest.mark.django_db
def test_without_a_trusted_proxy_forged_forwarded_for_does_not_escape_the_throttle(settings):
    """No proxy configured: a guesser writing a new X-Forwarded-For each time is still one address
    (REMOTE_ADDR) and is locked after the limit."""
    settings.CONCORD_TRUSTED_PROXIES = []
    settings.CONCORD_LOGIN_ADDRESS_LIMIT = 3
    settings.CONCORD_LOGIN_ACCOUNT_LIMIT = 100
    settings.CONCORD_LOGIN_SLOW_AFTER = 0
    UserFactory(username="alice")
    for i in range(5):
        Client(REMOTE_ADDR="203.0.113.9", HTTP_X_FORWARDED_FOR=f"198.51.100.{i}").post(
            "/accounts/login/", {"username": "alice", "password": f"wrong-{i}"}
        )
    lockout = LoginLockout.objects.get()
    assert (lockout.kind, lockout.subject) == ("address", "203.0.113.9")
