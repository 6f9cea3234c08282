"""The admin's user pages: a user who may only view accounts (ML engineers, who need the admin's user
lookups) sees no password row, since its link leads to a form only account managers may open."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.http import HttpRequest

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
