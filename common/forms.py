"""The login form: a username, or the email address of exactly one account, and a password."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import AuthenticationForm

from common.api_tokens import MAX_LIFETIME_DAYS
from common.login_throttle import login_refusal


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

    refusal: str | None = None  # set when the login throttle refused the attempt (shown as it is)

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username")
        if username:
            self.cleaned_data["username"] = login_username(username)
            if self.request is not None:
                refusal = login_refusal(
                    request=self.request, username=self.cleaned_data["username"]
                )
                if refusal:
                    self.refusal = refusal
                    raise forms.ValidationError(refusal, code="throttled")
        return super().clean()


# Lifetimes offered for a new token: (days or "" for never, label).
TOKEN_LIFETIMES = [("30", "30 days"), ("90", "90 days"), ("365", "1 year"), ("", "Never expires")]


class ApiTokenForm(forms.Form):
    """A new personal API token: a name, a lifetime, optionally one project it is limited to."""

    name = forms.CharField(
        max_length=100, help_text="What it is for, e.g. 'nightly import script'."
    )
    lifetime = forms.ChoiceField(choices=TOKEN_LIFETIMES, initial="90", required=False)
    project = forms.ChoiceField(required=False, label="Limited to project")

    def __init__(self, *args: Any, projects: list[tuple[int, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["project"].choices = [("", "All projects I may reach")] + [
            (str(pk), name) for pk, name in projects
        ]

    def clean_lifetime(self) -> int | None:
        value = self.cleaned_data.get("lifetime") or ""
        days = int(value) if value else None
        if days is not None and not 1 <= days <= MAX_LIFETIME_DAYS:
            raise forms.ValidationError("Choose one of the lifetimes offered.")
        return days

    def clean_project(self) -> int | None:
        value = self.cleaned_data.get("project") or ""
        return int(value) if value else None
