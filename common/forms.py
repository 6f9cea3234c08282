"""The login form: a username, or the email address of exactly one account, and a password."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.forms import AuthenticationForm


def login_username(identifier: str) -> str:
    """The username to authenticate ``identifier`` as: itself when an account has that username;
    else the username of the one account whose email is ``identifier`` (case-insensitive); else
    ``identifier`` unchanged (no account, or an email shared by several: the login then fails as
    any wrong username does, telling nobody which emails exist)."""
    users = get_user_model()._default_manager
    if "@" not in identifier or users.filter(username=identifier).exists():
        return identifier
    found = list(users.filter(email__iexact=identifier).values_list("username", flat=True)[:2])
    return found[0] if len(found) == 1 else identifier


class LoginForm(AuthenticationForm):
    """Django's login form that also takes the account's email address in the username field (an
    invited person knows the email the lead typed, not always the username made from it)."""

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username")
        if username:
            self.cleaned_data["username"] = login_username(username)
        return super().clean()
