"""The API's side of personal tokens: ``Authorization: Bearer <token>``, the project scope, a rate
limit per token.

- ``ApiTokenAuthentication``: a valid token authenticates as its user; ``request.auth`` is the
  ``ApiToken``. A wrong, revoked or expired token answers 401 (never a silent anonymous request).
- ``TokenProjectScope``: the one check of a token's project scope. A token scoped to a project may
  call only URLs whose ``slug`` is that project's; anything else answers 403.
- ``ApiRateThrottle``: ``CONCORD_API_RATE`` requests per token (per user for a session or Basic
  auth, per address for anonymous requests); over it: 429 with ``Retry-After``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from common.api_tokens import api_token_authenticate
from common.client_address import client_address
from common.models import ApiToken

if TYPE_CHECKING:  # rest_framework.views reads the settings that name this module: no import cycle
    from rest_framework.views import APIView

KEYWORD = b"bearer"


class ApiTokenAuthentication(BaseAuthentication):
    """``Authorization: Bearer concord_<prefix>_<secret>``."""

    def authenticate(self, request: Request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != KEYWORD:
            return None
        if len(parts) != 2:
            raise AuthenticationFailed("Send the token as 'Authorization: Bearer <token>'.")
        try:
            plaintext = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid token.") from None
        token = api_token_authenticate(plaintext)
        if token is None:
            raise AuthenticationFailed("Invalid, revoked or expired token.")
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """The schema's ``bearerAuth`` security scheme."""

    target_class = ApiTokenAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A personal API token, created on your account page (API tokens).",
        }


class TokenProjectScope(BasePermission):
    """A project-scoped token reaches that project's endpoints only (403 elsewhere)."""

    message = "This API token is limited to another project."

    def has_permission(self, request: Request, view: APIView) -> bool:
        token = request.auth
        if not isinstance(token, ApiToken) or token.project_id is None:
            return True
        return view.kwargs.get("slug") == token.project.slug


class ApiRateThrottle(SimpleRateThrottle):
    """``CONCORD_API_RATE`` ("<n>/<second|minute|hour|day>") per token, user or address."""

    scope = "api"
    cache_format = "concord:throttle:api:%(scope)s:%(ident)s"

    def get_rate(self) -> str:
        return settings.CONCORD_API_RATE

    def get_cache_key(self, request: Request, view: APIView) -> str:
        if isinstance(request.auth, ApiToken):
            ident = f"token-{request.auth.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user-{request.user.pk}"
        else:
            ident = f"address-{client_address(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}
