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
