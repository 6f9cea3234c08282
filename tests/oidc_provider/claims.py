"""The test provider's user info: email verified, names from the account, and the groups scope."""

from typing import Any

from django.utils.translation import gettext_lazy as _
from oidc_provider.lib.claims import ScopeClaims


def userinfo(claims: dict[str, Any], user: Any) -> dict[str, Any]:
    """Standard claims from the provider's account; every email here counts as verified."""
    claims["email"] = user.email
    claims["email_verified"] = True
    claims["given_name"] = user.first_name
    claims["family_name"] = user.last_name
    claims["preferred_username"] = user.username
    return claims


class GroupsScopeClaims(ScopeClaims):
    """``groups``: the names of the user's groups at the provider (the role claim of the tests)."""

    info_groups = (_("Groups"), _("The groups you belong to."))

    def scope_groups(self) -> dict[str, Any]:
        return {"groups": sorted(self.user.groups.values_list("name", flat=True))}
