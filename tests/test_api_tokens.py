"""Personal API tokens: created on the user's own page (shown once), stored as a keyed digest only,
sent as ``Authorization: Bearer``, revoked, expired, scoped to one project, rate-limited per token,
never logged."""

from __future__ import annotations

import logging
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from common.api_tokens import api_token_create, api_token_revoke, token_digest
from common.errors import ConcordError
from common.models import ApiToken
from common.roles import ANNOTATOR, ML_ENGINEER
from tests.factories import ProjectFactory, UserFactory
from tests.helpers.clients import logged_in

pytestmark = pytest.mark.django_db

TOKEN_SHAPE = re.compile(r"^concord_[0-9a-f]{8}_[A-Za-z0-9_-]{43}$")


def _bearer(plaintext: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {plaintext}"}


def _import_post(project_slug: str, plaintext: str | None):
    """An empty import request: a project lead gets past authentication and permissions to the
    input check (400 "file required"); a refusal answers 401 or 403 first."""
    headers = _bearer(plaintext) if plaintext else {}
    return Client().post(f"/api/projects/{project_slug}/imports/", {}, **headers)


@pytest.fixture
def lead(db):
    return UserFactory(username="emily", role=ML_ENGINEER)


@pytest.fixture
def project(db):
    return ProjectFactory(slug="alpha", name="Alpha")


def _secret_of(plaintext: str) -> str:
    """The 43-character secret after ``concord_<prefix>_``. The secret is url-safe base64 and may
    itself hold underscores, so the split is from the left (a split from the right once returned a
    one-character tail that any log line contained)."""
    return plaintext.split("_", 2)[2]


def test_token_is_stored_only_as_a_keyed_digest(lead):
    """The token reads concord_<8 hex>_<43 url-safe chars> (32 random bytes); the row keeps the
    8-character prefix and HMAC-SHA256(token) (64 hex), and no column holds the secret part."""
    created = api_token_create(user=lead, name="nightly import")
    assert TOKEN_SHAPE.match(created.plaintext)
    row = ApiToken.objects.values().get(pk=created.token.pk)
    secret = _secret_of(created.plaintext)
    assert row["prefix"] == created.plaintext[len("concord_") : len("concord_") + 8]
    assert row["digest"] == token_digest(created.plaintext)
    assert re.fullmatch(r"[0-9a-f]{64}", row["digest"])
    assert not any(secret in str(value) for value in row.values())


def test_bearer_token_authenticates_as_its_user_and_stamps_last_use(lead, project):
    """With the lead's token the empty import reaches the input check (400); without one: 401 with a
    Bearer challenge; a malformed or unknown token: 401."""
    created = api_token_create(user=lead, name="script")
    response = _import_post("alpha", created.plaintext)
    assert response.status_code == 400
    assert "file" in response.json()
    created.token.refresh_from_db()
    assert created.token.last_used_at is not None

    anonymous = _import_post("alpha", None)
    assert anonymous.status_code == 401
    assert anonymous["WWW-Authenticate"] == 'Bearer realm="api"'
    assert _import_post("alpha", created.plaintext[:-1] + "x").status_code == 401
    assert _import_post("alpha", "concord_nothing").status_code == 401


def test_token_carries_its_users_role_not_more(project):
    """An annotator's token authenticates (no 401) but the lead-only API refuses it (403)."""
    annie = UserFactory(username="annie", role=ANNOTATOR)
    created = api_token_create(user=annie, name="mine")
    assert _import_post("alpha", created.plaintext).status_code == 403


def test_revoked_token_stops_working_and_only_its_owner_may_revoke(lead, project):
    """Revoking answers 401 from the next call on; another user cannot revoke it (error, unchanged)."""
    created = api_token_create(user=lead, name="script")
    other = UserFactory(username="mallory", role=ML_ENGINEER)
    with pytest.raises(ConcordError, match="No such token"):
        api_token_revoke(user=other, token_id=created.token.pk)
    assert _import_post("alpha", created.plaintext).status_code == 400

    api_token_revoke(user=lead, token_id=created.token.pk)
    response = _import_post("alpha", created.plaintext)
    assert response.status_code == 401
    assert response.json() == {"detail": "Invalid, revoked or expired token."}


def test_expired_token_is_refused(lead, project):
    """A 30-day token expires 30 days after creation; once that instant has passed: 401."""
    created = api_token_create(user=lead, name="month", lifetime_days=30)
    lifetime = created.token.expires_at - created.token.created_at
    assert abs(lifetime - timedelta(days=30)) < timedelta(seconds=1)
    assert _import_post("alpha", created.plaintext).status_code == 400
    ApiToken.objects.filter(pk=created.token.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert _import_post("alpha", created.plaintext).status_code == 401


def test_token_of_a_deactivated_user_is_refused(lead, project):
    """Deactivating the account turns its tokens off too (401)."""
    created = api_token_create(user=lead, name="script")
    lead.is_active = False
    lead.save()
    assert _import_post("alpha", created.plaintext).status_code == 401


def test_project_scoped_token_reaches_only_its_project(lead, project):
    """Scoped to alpha: alpha's import reaches the input check (400); beta's and every endpoint of
    another project answer 403 with the scope's message; an unscoped token reaches both (400, 400)."""
    ProjectFactory(slug="beta", name="Beta")
    scoped = api_token_create(user=lead, name="alpha only", project_id=project.pk)
    assert _import_post("alpha", scoped.plaintext).status_code == 400
    beta = _import_post("beta", scoped.plaintext)
    assert beta.status_code == 403
    assert beta.json() == {"detail": "This API token is limited to another project."}
    export = Client().post("/api/projects/beta/exports/", {}, **_bearer(scoped.plaintext))
    assert export.status_code == 403
    anywhere = api_token_create(user=lead, name="all")
    assert [_import_post(s, anywhere.plaintext).status_code for s in ("alpha", "beta")] == [
        400,
        400,
    ]


def test_bad_token_input_changes_nothing(lead):
    """An empty name, a lifetime of 0 or 400 days, or a project that does not exist: a clear error
    and no token."""
    for kwargs, message in (
        ({"name": "  "}, "Give the token a name"),
        ({"name": "x", "lifetime_days": 0}, "1 to 366 days"),
        ({"name": "x", "lifetime_days": 400}, "1 to 366 days"),
        ({"name": "x", "project_id": 999999}, "No such project"),
    ):
        with pytest.raises(ConcordError, match=message):
            api_token_create(user=lead, **kwargs)
    assert not ApiToken.objects.exists()


def test_account_page_shows_a_new_token_once(lead, project):
    """Creating on the page shows the token in that response only (no-store); the list then shows
    its prefix, never the token; an invalid form answers 400 and creates nothing."""
    client = logged_in(lead)
    response = client.post(
        "/accounts/me/", {"name": "notebook", "lifetime": "90", "project": str(project.pk)}
    )
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    token = ApiToken.objects.get()
    body = response.content.decode()
    plaintext = re.search(r'value="(concord_[^"]+)"', body).group(1)
    assert token.digest == token_digest(plaintext)
    assert token.project == project
    assert body.count(plaintext) == 1
    again = client.get("/accounts/me/").content.decode()
    assert plaintext not in again
    assert f"concord_{token.prefix}_…" in again

    bad = client.post("/accounts/me/", {"name": "", "lifetime": "7"})
    assert bad.status_code == 400
    assert ApiToken.objects.count() == 1


def test_revoke_from_the_page_only_for_ones_own_token(lead):
    """The owner's revoke redirects back with the token marked revoked; another user gets 404 and
    the token stays usable."""
    created = api_token_create(user=lead, name="script")
    url = f"/accounts/me/tokens/{created.token.pk}/revoke/"
    other = logged_in(UserFactory(username="mallory", role=ML_ENGINEER))
    assert other.post(url).status_code == 404
    created.token.refresh_from_db()
    assert created.token.revoked_at is None
    response = logged_in(lead).post(url, follow=True)
    assert response.redirect_chain == [("/accounts/me/", 302)]
    created.token.refresh_from_db()
    assert created.token.revoked_at is not None
    assert "revoked" in response.content.decode()


def test_token_is_never_logged(lead, project, caplog):
    """Create on the page, use (good and bad), revoke: every log record at DEBUG and up, of every
    logger, is free of the token's secret (the prefix may appear)."""
    caplog.set_level(logging.DEBUG)
    client = logged_in(lead)
    response = client.post("/accounts/me/", {"name": "n", "lifetime": "30", "project": ""})
    plaintext = re.search(r'value="(concord_[^"]+)"', response.content.decode()).group(1)
    secret = _secret_of(plaintext)
    assert len(secret) == 43
    _import_post("alpha", plaintext)
    _import_post("alpha", plaintext + "x")
    client.post(f"/accounts/me/tokens/{ApiToken.objects.get().pk}/revoke/")
    _import_post("alpha", plaintext)
    assert caplog.records  # the test saw the log
    assert all(secret not in record.getMessage() for record in caplog.records)
    assert secret not in caplog.text


def test_api_is_rate_limited_per_token(lead, project, settings):
    """CONCORD_API_RATE 3/minute: a token's 4th call in the minute answers 429 (Retry-After set);
    another token of the same user still has its own 3."""
    settings.CONCORD_API_RATE = "3/minute"
    first = api_token_create(user=lead, name="one").plaintext
    second = api_token_create(user=lead, name="two").plaintext
    statuses = [_import_post("alpha", first).status_code for _ in range(4)]
    assert statuses == [400, 400, 400, 429]
    assert int(_import_post("alpha", first)["Retry-After"]) > 0
    assert _import_post("alpha", second).status_code == 400


def test_openapi_schema_declares_bearer_tokens(client):
    """The served schema names the bearerAuth scheme (HTTP bearer) and lists it on the API's
    operations."""
    schema = client.get("/api/schema/", {"format": "json"}).json()
    assert schema["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    operation = schema["paths"]["/api/projects/{slug}/imports/"]["post"]
    assert {"bearerAuth": []} in operation["security"]
