"""Schemathesis fuzz of the served OpenAPI schema (/api/schema/) through the WSGI app, per role;
and a Hypothesis fuzz of the single sign-on callback (not part of the API schema).

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
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


_QUERY_TEXT = st.text(max_size=80)
_CALLBACK_QUERY = st.dictionaries(
    st.sampled_from(["code", "state", "error", "error_description", "session_state", "iss"]),
    _QUERY_TEXT,
    max_size=4,
)


@pytest.fixture
def sso_client(db, settings) -> Client:
    """Single sign-on switched on against a provider that is not running, and a browser session
    that started a sign-in (so one state is known to it)."""
    from tests.helpers.oidc_provider import RunningProvider

    RunningProvider(url="http://127.0.0.1:9").configure(settings)
    client = Client(raise_request_exception=False)
    assert client.get("/accounts/sso/login/").status_code == 302
    return client


@settings(
    max_examples=FUZZ_EXAMPLES * 4,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=not FUZZ_RANDOM,
)
@given(query=_CALLBACK_QUERY, use_issued_state=st.booleans())
def test_sso_callback_never_answers_5xx_nor_signs_anyone_in(sso_client, query, use_issued_state):
    """Any query string on the callback (forged codes, states, provider errors; or the state this
    session issued with a made-up code while the provider is down): 302 or 400, never a 5xx, and
    nobody is signed in."""
    states = sso_client.session.get("oidc_states", {})
    if use_issued_state and states and "code" in query:
        query = {**query, "state": next(iter(states))}
    response = sso_client.get("/accounts/sso/callback/", query)
    assert response.status_code in (302, 400), response.content[:300]
    assert "_auth_user_id" not in sso_client.session
