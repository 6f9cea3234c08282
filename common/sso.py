"""Single sign-on with OpenID Connect (the authorization-code flow with PKCE, mozilla-django-oidc).

The login page's "Sign in with <provider>" button opens ``sso-login``, which sends the browser to
the provider with a fresh state, nonce and PKCE challenge kept in the session. The provider sends it
back to ``sso-callback`` with a code; the state must be one this session issued (else 400), the code
is exchanged for an ID token, whose RS256 signature (the provider's JWKS), nonce, issuer, audience
and expiry must all hold (else 400), then the user info is fetched and its ``sub`` must be the ID
token's. ``sso_user_resolve`` then finds the account:

1. by the (issuer, sub) pair of an earlier sign-in (``SsoIdentity``);
2. else by email, only when the provider says it is verified and one account has it;
3. else a new account: a username from ``preferred_username`` or the email (made unique), no
   usable password, and no role, until someone gives one in the admin, unless
   ``CONCORD_OIDC_ROLE_CLAIM`` carries a value that ``CONCORD_OIDC_ROLE_MAP`` maps to a role.

Mapped roles are added at every sign-in (never removed: a role given in the admin stays).
"""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Any

import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from common.errors import ConcordError
from common.models import SsoIdentity
from common.roles import role_assign

logger = logging.getLogger(__name__)

_USERNAME_UNSAFE = re.compile(r"[^\w.@+-]")


class SsoError(ConcordError):
    """The provider's answer cannot sign anyone in (no subject, several accounts with the email)."""


def sso_enabled() -> bool:
    """Whether single sign-on is configured (``CONCORD_OIDC_CLIENT_ID`` set)."""
    return bool(settings.CONCORD_OIDC_ENABLED)


def _role_values(claims: dict[str, Any]) -> list[str]:
    """The role claim's values: a string, or a list of strings (groups), or nothing."""
    claim = settings.CONCORD_OIDC_ROLE_CLAIM
    if not claim:
        return []
    value = claims.get(claim)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, str)]
    return []


def sso_mapped_roles(*, claims: dict[str, Any]) -> list[str]:
    """The roles ``CONCORD_OIDC_ROLE_MAP`` gives for the claims (sorted, without repeats)."""
    mapping = settings.CONCORD_OIDC_ROLE_MAP
    return sorted({mapping[value] for value in _role_values(claims) if value in mapping})


def _free_username(claims: dict[str, Any], subject: str) -> str:
    """A username not taken yet, from preferred_username, else the email's local part, else sub."""
    user_model = get_user_model()
    email = claims.get("email") or ""
    candidates = [claims.get("preferred_username") or "", email.split("@")[0]]
    base = next(
        (_USERNAME_UNSAFE.sub("", c)[:120] for c in candidates if _USERNAME_UNSAFE.sub("", c)),
        "sso-" + hashlib.sha256(subject.encode()).hexdigest()[:12],
    )
    username, n = base, 1
    while user_model.objects.filter(username__iexact=username).exists():
        n += 1
        username = f"{base}-{n}"
    return username


def _user_by_verified_email(claims: dict[str, Any]) -> AbstractBaseUser | None:
    """The one account whose email the provider says is verified; None when unverified or none.
    Several accounts with it: refused (picking one could sign in as someone else)."""
    email = claims.get("email")
    if not email or claims.get("email_verified") is not True:
        return None
    users = list(get_user_model().objects.filter(email__iexact=email)[:2])
    if len(users) > 1:
        raise SsoError(f"Several accounts have the email {email}: ask an administrator.")
    return users[0] if users else None


def sso_user_resolve(*, issuer: str, claims: dict[str, Any]) -> AbstractBaseUser:
    """The account for a verified sign-in (see the module docstring): found by (issuer, sub), by
    verified email, or created without a role; the mapped roles of the claims added."""
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise SsoError("The provider's user info has no subject (sub).")
    with transaction.atomic():
        identity = (
            SsoIdentity.objects.select_for_update()
            .select_related("user")
            .filter(issuer=issuer, subject=subject)
            .first()
        )
        if identity is None:
            user = _user_by_verified_email(claims)
            if user is None:
                user = get_user_model().objects.create_user(
                    _free_username(claims, subject),
                    email=claims.get("email") or "",
                    first_name=(claims.get("given_name") or "")[:150],
                    last_name=(claims.get("family_name") or "")[:150],
                )  # no password: an unusable one
                logger.info("Single sign-on created the account %s", user.get_username())
            identity = SsoIdentity.objects.create(user=user, issuer=issuer, subject=subject)
        identity.last_login_at = timezone.now()
        identity.save(update_fields=["last_login_at"])
        for role in sso_mapped_roles(claims=claims):
            role_assign(user=identity.user, role=role)
        return identity.user


class SsoBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend, answering only the callback (which passes the nonce) and only
    when single sign-on is configured; it also checks the ID token's issuer and audience, and that
    the user info describes the ID token's subject."""

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> AbstractBaseUser | None:
        # A password login whose URL happens to carry ?code=&state= must not start a token exchange.
        if not sso_enabled() or "nonce" not in kwargs:
            return None
        try:
            return super().authenticate(request, **kwargs)
        except requests.RequestException as error:  # the provider is down or refused the code
            logger.warning(
                "Single sign-on failed: the provider did not answer as expected: %s", error
            )
            return None

    def get_user(self, user_id: int) -> AbstractBaseUser | None:
        # Django's rule, not mozilla-django-oidc's (which returns deactivated accounts too): a
        # session signed in through the provider ends when the account is deactivated.
        return ModelBackend.get_user(self, user_id)

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        try:
            payload = super().verify_token(token, **kwargs)
        except jwt.InvalidTokenError as error:  # expired, not yet valid, malformed: not a 500
            raise SuspiciousOperation(f"The ID token is not valid: {error}") from None
        if payload.get("iss") != settings.CONCORD_OIDC_ISSUER:
            raise SuspiciousOperation(
                f"The ID token's issuer {payload.get('iss')!r} is not CONCORD_OIDC_ISSUER."
            )
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if self.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation("The ID token was not issued to this client (aud).")
        if "exp" not in payload:
            raise SuspiciousOperation("The ID token has no expiry (exp).")
        return payload

    def get_or_create_user(
        self, access_token: str, id_token: str, payload: dict[str, Any]
    ) -> AbstractBaseUser | None:
        claims = self.get_userinfo(access_token, id_token, payload)
        if claims.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("The user info is not about the ID token's subject.")
        try:
            return sso_user_resolve(issuer=payload["iss"], claims=claims)
        except SsoError as error:
            logger.warning("Single sign-on refused: %s", error)
            return None
