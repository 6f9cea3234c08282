"""The admin's user pages: a user who may only view accounts (ML engineers, who need the admin's user
lookups) sees no password row, since its link leads to a form only account managers may open."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.http import HttpRequest

from common.login_throttle import login_lockout_end
from common.models import LoginLockout, SsoIdentity

User = get_user_model()


class ConcordUserAdmin(UserAdmin):
    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None or self.has_change_permission(request, obj):
            return fieldsets
        return [
            (name, {**options, "fields": tuple(f for f in options["fields"] if f != "password")})
            for name, options in fieldsets
        ]


if admin.site.is_registered(User):
    admin.site.unregister(User)
admin.site.register(User, ConcordUserAdmin)


@admin.register(LoginLockout)
class LoginLockoutAdmin(admin.ModelAdmin):
    """Lockouts, for admins to see who was refused (read only: the throttle writes them). Deleting
    one ends it: the address or account may log in again at once."""

    list_display = ("locked_at", "kind", "subject", "failures", "locked_until")
    list_filter = ("kind",)
    search_fields = ("subject",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def delete_model(self, request: HttpRequest, obj: LoginLockout) -> None:
        login_lockout_end(lockout=obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for lockout in queryset:
            login_lockout_end(lockout=lockout)


@admin.register(SsoIdentity)
class SsoIdentityAdmin(admin.ModelAdmin):
    """Which account each single sign-on identity (issuer, sub) reaches. Deleting a row unlinks it:
    the next sign-in matches by verified email or makes a new account."""

    list_display = ["user", "issuer", "subject", "created_at", "last_login_at"]
    search_fields = ["user__username", "user__email", "subject"]
    readonly_fields = ["user", "issuer", "subject", "created_at", "last_login_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
