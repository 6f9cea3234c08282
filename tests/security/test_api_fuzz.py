"""Schemathesis fuzz of the served OpenAPI schema (/api/schema/) through the WSGI app, per role.

For anonymous users, an annotator and an ML engineer (HTTP Basic auth, which the API accepts in
development), an ML engineer's personal API token and one scoped to project ``fuzz``
(``Authorization: Bearer``): no response is a 5xx, and every response matches the schema (status
documented or an auth/404/405/400 error, content type, body shape). Kept small (a few examples per
operation) to stay fast.
"""

from __future__ import annotations

import base64
import os

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings

from common.api_tokens import api_token_create
from common.roles import ANNOTATOR, ML_ENGINEER
from config.wsgi import application
from tests.factories import ProjectFactory, UserFactory

schema = schemathesis.openapi.from_wsgi("/api/schema/", application)

PASSWORD = "correct horse battery"
ROLE_USERS = {
    "anonymous": None,
    "annotator": ("fuzz-annie", ANNOTATOR),
    "ml_engineer": ("fuzz-emily", ML_ENGINEER),
    "ml_engineer_token": ("fuzz-tom", ML_ENGINEER),
    "scoped_token": ("fuzz-sara", ML_ENGINEER),
}


@pytest.fixture(autouse=True)
def _keep_test_connection():
    """Raw WSGI calls close the database connection after each request (the test client does not);
    the test's transaction lives on that connection, so keep it open, as Django's test client does."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture(params=list(ROLE_USERS))
def auth_headers(request, db) -> dict[str, str]:
    """Basic-auth or Bearer headers for the role's user (none for anonymous); a project ``fuzz``
    exists."""
    project = ProjectFactory(slug="fuzz")
    if ROLE_USERS[request.param] is None:
        return {}
    username, role = ROLE_USERS[request.param]
    user = UserFactory(username=username, role=role)
    if request.param.endswith("_token"):
        scope = project.pk if request.param == "scoped_token" else None
        created = api_token_create(user=user, name="fuzz", project_id=scope)
        return {"Authorization": f"Bearer {created.plaintext}"}
    token = base64.b64encode(f"{username}:{PASSWORD}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


# CI runs a fixed sequence of examples (a red build is always reproducible); set
# CONCORD_FUZZ_RANDOM=1 (and raise CONCORD_FUZZ_EXAMPLES) to explore new inputs on demand.
FUZZ_RANDOM = os.environ.get("CONCORD_FUZZ_RANDOM") == "1"
FUZZ_EXAMPLES = int(os.environ.get("CONCORD_FUZZ_EXAMPLES", "15"))


@schema.parametrize()
@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=not FUZZ_RANDOM,
)
def test_api_never_answers_5xx_and_matches_its_schema(case, auth_headers):
    """Random (schema-shaped and broken) input: a 4xx at worst, and what comes back is documented."""
    response = case.call(headers=auth_headers)
    assert response.status_code < 500, response.text[:500]
    case.validate_response(
        response,
        checks=[
            schemathesis.checks.not_a_server_error,
            schemathesis.checks.response_schema_conformance,
            schemathesis.checks.content_type_conformance,
        ],
    )
