"""Content-Security-Policy: pages may run only JavaScript and CSS served from our own origin.

Every response gets the header (HTML pages, JSON, files alike: a policy on a JSON or download response
costs nothing and protects a response that a browser is tricked into rendering). The policy forbids
inline ``<script>`` blocks, ``on*=`` handler attributes, ``javascript:`` URLs, ``eval`` and inline
``style`` attributes, so a stored payload that slips past template escaping still cannot run.
``<script type="application/json">`` (Django's ``json_script``) is data and is not affected.

A view that already set its own policy keeps it.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from rest_framework.authentication import BasicAuthentication
from rest_framework.exceptions import AuthenticationFailed

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "object-src 'none'",
        "frame-ancestors 'none'",
        "base-uri 'self'",
        "form-action 'self'",
    ]
)


class ContentSecurityPolicyMiddleware:
    """Add ``Content-Security-Policy: CONTENT_SECURITY_POLICY`` to every response that has none."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        return response


class StrictBasicAuthentication(BasicAuthentication):
    """HTTP Basic auth that refuses credentials with NUL characters before they reach the database
    (PostgreSQL text cannot hold them: DRF's own class would turn them into a 500)."""

    def authenticate_credentials(self, userid, password, request=None):
        if "\x00" in userid or "\x00" in password:
            raise AuthenticationFailed("Invalid username/password.")
        return super().authenticate_credentials(userid, password, request)
