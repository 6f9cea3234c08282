"""Every response carries the Content-Security-Policy that forbids inline script and style."""

import pytest
from django.http import HttpResponse
from django.test import RequestFactory

from common.security import CONTENT_SECURITY_POLICY, ContentSecurityPolicyMiddleware
from tests.helpers.clients import logged_in


def test_policy_forbids_inline_script_and_foreign_origins():
    """script-src and style-src allow only our origin: no 'unsafe-inline', no 'unsafe-eval', no hosts."""
    directives = dict(d.split(" ", 1) for d in CONTENT_SECURITY_POLICY.split("; "))
    assert directives["script-src"] == "'self'"
    assert directives["style-src"] == "'self'"
    assert directives["default-src"] == "'self'"
    assert directives["object-src"] == "'none'"
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in CONTENT_SECURITY_POLICY


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/", "/api/schema/"])
def test_public_pages_send_the_policy(client, db, path):
    """Login pages and the API schema carry the header."""
    assert client.get(path)["Content-Security-Policy"] == CONTENT_SECURITY_POLICY


@pytest.mark.parametrize(
    ("role", "path"),
    [
        ("annotator", "/annotation/"),
        ("ml_engineer", "/annotation/projects/"),
        ("ml_engineer", "/monitoring/runs/"),
        ("ml_engineer", "/admin/"),
        ("ml_engineer", "/admin/training/trainingrun/add/"),
        ("annotator", "/no-such-page/"),
    ],
)
def test_pages_of_each_role_send_the_policy(request, role, path):
    """Logged-in pages, the admin and error pages (404) carry the header."""
    client = logged_in(request.getfixturevalue(role))
    assert client.get(path)["Content-Security-Policy"] == CONTENT_SECURITY_POLICY


def test_a_view_with_its_own_policy_keeps_it():
    """The middleware fills in the header only when the view set none."""
    own = "default-src 'none'"

    def view(request):
        response = HttpResponse("x")
        response["Content-Security-Policy"] = own
        return response

    response = ContentSecurityPolicyMiddleware(view)(RequestFactory().get("/"))
    assert response["Content-Security-Policy"] == own


def test_basic_auth_with_nul_bytes_is_refused_not_a_server_error(client, db):
    """Found by the schema fuzz: a NUL in HTTP Basic credentials reached PostgreSQL (500)."""
    import base64

    token = base64.b64encode(b"ann\x00ie:pass\x00word").decode()
    response = client.get("/api/projects/x/imports/1/", HTTP_AUTHORIZATION=f"Basic {token}")
    assert response.status_code in (401, 403)
