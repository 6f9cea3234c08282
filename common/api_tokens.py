"""Personal API tokens: create (the secret is returned once), revoke, look up a presented token.

A token reads ``concord_<prefix>_<secret>``: ``prefix`` is 8 random hex characters (stored, shown on
the user's page, used to find the row), ``secret`` is ``secrets.token_urlsafe(32)`` (32 random bytes,
43 characters). At rest only an HMAC-SHA256 of the whole token, keyed with ``SECRET_KEY``, is kept:
a fast hash is enough for 256 random bits (no dictionary to guess from), and the key means a copy of
the database alone cannot even test a candidate. The digest is compared in constant time.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.crypto import constant_time_compare, salted_hmac

from common.errors import ConcordError
from common.models import ApiToken

logger = logging.getLogger(__name__)

# The fixed start of every token (so leaked tokens are recognisable), not a secret.
TOKEN_PREFIX = "concord_"  # noqa: S105  # nosec B105
PREFIX_CHARS = 8
# The longest lifetime offered on the page (days); None there means "never expires".
MAX_LIFETIME_DAYS = 366


@dataclass(frozen=True)
class CreatedToken:
    """The stored row and the token itself, which exists only here: show it once, keep it nowhere."""

    token: ApiToken
    plaintext: str


def token_digest(plaintext: str) -> str:
    """HMAC-SHA256 of ``plaintext`` keyed with SECRET_KEY: 64 hex characters."""
    return salted_hmac("concord.api-token", plaintext, algorithm="sha256").hexdigest()


def _split(plaintext: str) -> str | None:
    """The prefix of a well-formed token, else None."""
    if not plaintext.startswith(TOKEN_PREFIX):
        return None
    prefix, sep, secret = plaintext.removeprefix(TOKEN_PREFIX).partition("_")
    if not sep or len(prefix) != PREFIX_CHARS or not secret:
        return None
    return prefix


def scope_projects() -> list[tuple[int, str]]:
    """(id, name) of the projects a token may be limited to, by name. The project model is reached
    through the token's foreign key: common imports nothing from annotation."""
    project_model = ApiToken._meta.get_field("project").related_model
    return list(project_model._default_manager.order_by("name").values_list("pk", "name"))


def api_token_create(
    *, user, name: str, lifetime_days: int | None = None, project_id: int | None = None
) -> CreatedToken:
    """Create a token for ``user``; ``lifetime_days`` None: no expiry; ``project_id``: its scope.

    Raises ConcordError (nothing written) for an empty name, a lifetime outside 1..366 days or a
    project that does not exist.
    """
    project = None
    if project_id is not None:
        project_model = ApiToken._meta.get_field("project").related_model
        project = project_model._default_manager.filter(pk=project_id).first()
        if project is None:
            raise ConcordError("No such project.")
    name = name.strip()
    if not name:
        raise ConcordError("Give the token a name (what it is for).")
    if lifetime_days is not None and not 1 <= lifetime_days <= MAX_LIFETIME_DAYS:
        raise ConcordError(f"A token lives 1 to {MAX_LIFETIME_DAYS} days, or never expires.")
    expires_at = timezone.now() + timedelta(days=lifetime_days) if lifetime_days else None
    for _ in range(5):  # a prefix collision (1 in 4 billion per pair) just draws again
        prefix = secrets.token_hex(PREFIX_CHARS // 2)
        plaintext = f"{TOKEN_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
        try:
            with transaction.atomic():
                token = ApiToken.objects.create(
                    user=user,
                    name=name[:100],
                    prefix=prefix,
                    digest=token_digest(plaintext),
                    project=project,
                    expires_at=expires_at,
                )
        except IntegrityError:
            continue
        logger.info("API token %s… created for %s", prefix, user)
        return CreatedToken(token=token, plaintext=plaintext)
    raise ConcordError("Could not create a token; try again.")


def api_token_revoke(*, user, token_id: int) -> ApiToken:
    """Revoke the user's own token ``token_id`` (at once; a revoked token stays listed).

    Raises ConcordError when the user has no such token (someone else's is not theirs to revoke).
    """
    token = ApiToken.objects.filter(user=user, pk=token_id).first()
    if token is None:
        raise ConcordError("No such token.")
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        logger.info("API token %s… revoked by %s", token.prefix, user)
    return token


def api_token_authenticate(plaintext: str) -> ApiToken | None:
    """The usable token ``plaintext`` names (its user active), its last use stamped; else None."""
    prefix = _split(plaintext)
    if prefix is None:
        return None
    token = ApiToken.objects.select_related("user", "project").filter(prefix=prefix).first()
    if token is None or not constant_time_compare(token.digest, token_digest(plaintext)):
        return None
    now = timezone.now()
    if not token.is_usable(now) or not token.user.is_active:
        return None
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    token.last_used_at = now
    return token


def api_tokens_of(*, user) -> list[ApiToken]:
    """The user's tokens, newest first, revoked and expired ones included."""
    return list(ApiToken.objects.filter(user=user).select_related("project"))
