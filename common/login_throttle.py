"""Throttled logins: failures are counted per address and per account, in the shared cache.

The address is ``common.client_address``'s: ``REMOTE_ADDR``, or behind a proxy listed in
``CONCORD_TRUSTED_PROXIES`` the client's hop of ``X-Forwarded-For``.

Every password check goes through ``ThrottledModelBackend`` (the login page, the admin's login, HTTP
Basic on the API), so one count covers them all. For each subject (the client's address, the account
tried) the cache holds the failure count and the last failure's time for ``CONCORD_LOGIN_WINDOW_S``,
and while it is locked, the end of the lockout:

- after ``CONCORD_LOGIN_SLOW_AFTER`` failures (0: never) the subject is slowed: the next attempt is
  refused unless ``2 ** (failures - SLOW_AFTER)`` seconds (at most the lockout) have passed since the
  last failure;
- at ``CONCORD_LOGIN_ACCOUNT_LIMIT`` (account) or ``CONCORD_LOGIN_ADDRESS_LIMIT`` (address) failures
  it is locked for ``CONCORD_LOGIN_LOCKOUT_S`` seconds: every attempt is refused, the right password
  too. The lockout is logged (warning) and recorded as a ``LoginLockout`` row the admin lists;
  deleting the row there ends the lockout at once.

A success clears the account's count (not the address's: one right password among many guesses from
an address does not excuse the guesses). Refused attempts never reach the password check and are
not counted, so a lockout ends when its time is up.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from datetime import UTC, datetime

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from common.client_address import client_address
from common.models import LoginLockout

logger = logging.getLogger(__name__)

CACHE_PREFIX = "concord:throttle:login:"


def _key(kind: str, subject: str) -> str:
    return CACHE_PREFIX + kind + ":" + hashlib.sha256(subject.encode()).hexdigest()[:40]


def _subjects(request: HttpRequest, username: str) -> list[tuple[str, str, int]]:
    """(kind, subject, failure limit) for the address and the account."""
    return [
        (LoginLockout.Kind.ADDRESS, client_address(request), settings.CONCORD_LOGIN_ADDRESS_LIMIT),
        (LoginLockout.Kind.ACCOUNT, username.strip().lower(), settings.CONCORD_LOGIN_ACCOUNT_LIMIT),
    ]


def _slow_delay_s(failures: int) -> float:
    """Seconds that must pass after the last failure before the next attempt (0: not slowed)."""
    slow_after = settings.CONCORD_LOGIN_SLOW_AFTER
    if not slow_after or failures < slow_after:
        return 0.0
    return float(min(2 ** (failures - slow_after), settings.CONCORD_LOGIN_LOCKOUT_S))


def login_refusal(*, request: HttpRequest, username: str) -> str | None:
    """Why a login for ``username`` from this request must be refused now, in plain words; None when
    it may go ahead."""
    now = time.time()
    wait_s = 0.0
    for kind, subject, _limit in _subjects(request, username):
        key = _key(kind, subject)
        state = cache.get_many([key + ":lock", key + ":n", key + ":last"])
        locked_until = state.get(key + ":lock", 0.0)
        if locked_until > now:
            wait_s = max(wait_s, locked_until - now)
        elif key + ":last" in state:
            delay = _slow_delay_s(state.get(key + ":n", 0))
            wait_s = max(wait_s, state[key + ":last"] + delay - now)
    if wait_s <= 0:
        return None
    seconds = math.ceil(wait_s)
    when = f"{seconds} second(s)" if seconds < 60 else f"{math.ceil(seconds / 60)} minute(s)"
    return f"Too many failed logins. Try again in {when}."


def login_failure_record(*, request: HttpRequest, username: str) -> None:
    """Count one failed login for the address and the account; lock the ones that reach their limit.

    The count is an atomic increment and the lock is taken with ``cache.add``: parallel guesses
    (several web workers) neither lose counts nor record one lockout twice.
    """
    now = time.time()
    lockout_s = settings.CONCORD_LOGIN_LOCKOUT_S
    window_s = settings.CONCORD_LOGIN_WINDOW_S
    for kind, subject, limit in _subjects(request, username):
        key = _key(kind, subject)
        cache.add(key + ":n", 0, timeout=window_s)
        try:
            failures = cache.incr(key + ":n")
        except ValueError:  # expired between add and incr: this failure starts a new count
            cache.set(key + ":n", 1, timeout=window_s)
            failures = 1
        cache.set(key + ":last", now, timeout=window_s)
        if failures < limit or not cache.add(key + ":lock", now + lockout_s, timeout=lockout_s):
            continue
        cache.delete_many([key + ":n", key + ":last"])  # counting starts again after the lockout
        until = datetime.fromtimestamp(now + lockout_s, tz=UTC)
        LoginLockout.objects.create(
            kind=kind, subject=subject[:254], failures=failures, locked_until=until
        )
        logger.warning(
            "Login lockout: %s %s after %d failed logins, until %s",
            kind,
            subject,
            failures,
            until.isoformat(timespec="seconds"),
        )


def _forget(kind: str, subject: str) -> None:
    key = _key(kind, subject)
    cache.delete_many([key + ":n", key + ":last", key + ":lock"])


def login_success_record(*, request: HttpRequest, username: str) -> None:
    """A right password: forget the account's failures."""
    _forget(LoginLockout.Kind.ACCOUNT, username.strip().lower())


def login_lockout_end(*, lockout: LoginLockout) -> None:
    """An administrator ends a lockout early: its subject's count is forgotten, the row deleted."""
    _forget(lockout.kind, lockout.subject)
    logger.warning("Login lockout ended early: %s %s", lockout.kind, lockout.subject)
    lockout.delete()


class ThrottledModelBackend(ModelBackend):
    """Django's password check behind the login throttle (requests only; commands are not throttled)."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None or username is None:
            return super().authenticate(request, username=username, password=password, **kwargs)
        if login_refusal(request=request, username=username):
            raise PermissionDenied  # authenticate() stops here: no other backend, no password check
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            login_failure_record(request=request, username=username)
        else:
            login_success_record(request=request, username=username)
        return user
