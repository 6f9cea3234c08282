"""Who gets in: personal API tokens, the record of login lockouts, single sign-on identities.

A token's secret is never stored: only a keyed SHA-256 digest of the whole token and a short random
prefix (shown on the page, used to find the row). A token scoped to a project reaches that project's
API endpoints only.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.utils import timezone


class ApiToken(models.Model):
    """A personal access token: ``Authorization: Bearer concord_<prefix>_<secret>``."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(
        max_length=100, help_text="What the token is for (a script, a notebook)."
    )
    prefix = models.CharField(
        max_length=8, unique=True, help_text="Shown on the page; finds the row."
    )
    digest = models.CharField(max_length=64, help_text="HMAC-SHA256 of the whole token, hex.")
    # A string reference: common imports nothing from annotation (only the schema points there).
    project = models.ForeignKey(
        "annotation.Project",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
        help_text="When set, the token reaches this project's API endpoints only.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…) of {self.user}"

    def is_usable(self, now: datetime | None = None) -> bool:
        """Not revoked and not expired at ``now`` (default: this instant)."""
        now = now or timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)


class LoginLockout(models.Model):
    """One lockout: an address or an account refused logins after too many failures."""

    class Kind(models.TextChoices):
        ADDRESS = "address", "Address"
        ACCOUNT = "account", "Account"

    kind = models.CharField(max_length=10, choices=Kind.choices)
    subject = models.CharField(max_length=254, help_text="The IP address or the username tried.")
    failures = models.PositiveIntegerField(help_text="Failed logins counted when it was locked.")
    locked_at = models.DateTimeField(default=timezone.now)
    locked_until = models.DateTimeField()

    class Meta:
        ordering = ["-locked_at", "-pk"]
        indexes = [models.Index(fields=["kind", "subject"])]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.subject} locked until {self.locked_until:%Y-%m-%d %H:%M}"


class SsoIdentity(models.Model):
    """A user's account at an OpenID Connect provider: the provider (issuer) and its ``sub`` for the
    user. Single sign-on finds the user by this pair first, so a changed email at the provider
    still reaches the same account (common/sso.py)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identities"
    )
    issuer = models.CharField(max_length=255, help_text="The provider's issuer URL (iss).")
    subject = models.CharField(max_length=255, help_text="The provider's id for the user (sub).")
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "single sign-on identity"
        verbose_name_plural = "single sign-on identities"
        constraints = [
            models.UniqueConstraint(
                fields=["issuer", "subject"], name="sso_identity_unique_subject"
            )
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer} for {self.user}"
