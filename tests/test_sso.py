"""Single sign-on without a browser: the callback against the real test provider (a second Django
process running django-oidc-provider) signs in only when the ID token's signature, issuer and nonce
hold; how accounts are matched, created and given roles (``sso_user_resolve``); off by default."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from html import unescape
from urllib.parse import parse_qs, urljoin, urlparse

import jwt
import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from django.test import Client

from common.models import SsoIdentity
from common.roles import ANNOTATOR, REVIEWER, user_roles
from common.sso import SsoBackend, SsoError, sso_user_resolve
from tests.factories import UserFactory
from tests.helpers.oidc_provider import (
    CALLBACK_PATH,
    CLIENT_ID,
    CLIENT_SECRET,
    PASSWORD,
    RunningProvider,
    oidc_provider_running,
)

ISSUER = "https://idp.example"
TEST_SERVER_CALLBACK = "http://testserver" + CALLBACK_PATH


@pytest.fixture(scope="module")
def provider(tmp_path_factory) -> Iterator[RunningProvider]:
    """The test provider, with grace (no groups) and a client for the test client's callback."""
    users = [{"username": "grace", "email": "grace@idp.example", "first_name": "Grace"}]
    with oidc_provider_running(
        tmp_path_factory.mktemp("provider"), redirect_uris=[TEST_SERVER_CALLBACK], users=users
    ) as running:
        yield running


def _form_inputs(html: str) -> dict[str, str]:
    """name -> value of the page's <input>s that have both (the provider's forms)."""
    inputs = {}
    for tag in re.findall(r"<input[^>]*>", html):
        name, value = re.search(r'name="([^"]*)"', tag), re.search(r'value="([^"]*)"', tag)
        if name and value:
            inputs[name.group(1)] = unescape(value.group(1))
    return inputs


def _code_from_provider(authorize_url: str) -> dict[str, str]:
    """Log in as grace at the provider and consent, as a browser would; returns the query the
    provider sends back to the callback (code and state)."""
    session = requests.Session()
    login_page = session.get(authorize_url, timeout=10)  # -> the provider's login page
    form = _form_inputs(login_page.text)
    form.update(username="grace", password=PASSWORD)
    consent = session.post(login_page.url, data=form, timeout=10)  # -> back to authorize: consent
    answer = _form_inputs(consent.text)
    answer["allow"] = "Authorize"
    redirect = session.post(
        urljoin(consent.url, "/openid/authorize"), data=answer, allow_redirects=False, timeout=10
    )
    assert redirect.status_code == 302, redirect.text[:300]
    location = redirect.headers["Location"]
    assert location.startswith(TEST_SERVER_CALLBACK), location
    return {key: values[0] for key, values in parse_qs(urlparse(location).query).items()}


def _start(client: Client) -> dict[str, str]:
    """Press "Sign in" on Concord, and do the provider's part: the callback's query."""
    response = client.get("/accounts/sso/login/")
    assert response.status_code == 302
    return _code_from_provider(response["Location"])


@pytest.fixture
def sso(settings, provider) -> RunningProvider:
    provider.configure(settings)
    return provider


@pytest.mark.django_db
def test_single_sign_on_is_off_by_default(client):
    """Without CONCORD_OIDC_CLIENT_ID: no button on the login page, both SSO URLs answer 404."""
    assert b"Sign in with" not in client.get("/accounts/login/").content
    assert client.get("/accounts/sso/login/").status_code == 404
    assert client.get("/accounts/sso/callback/?code=x&state=y").status_code == 404


@pytest.mark.django_db
def test_the_login_page_names_the_provider(client, settings):
    """Configured: "Sign in with <CONCORD_OIDC_PROVIDER_NAME>" links to the SSO login URL."""
    RunningProvider(url="http://127.0.0.1:9").configure(settings)
    page = client.get("/accounts/login/").content.decode()
    assert 'href="/accounts/sso/login/"' in page and "Sign in with Test IdP" in page


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_callback_signs_in_a_new_user_with_no_role(sso):
    """The full code flow against the provider: grace is created (no role, no usable password),
    linked by (issuer, sub), and signed in; the callback sends her home."""
    client = Client()
    response = client.get(CALLBACK_PATH, _start(client))
    assert response.status_code == 302 and response["Location"] == "/"
    grace = get_user_model().objects.get(username="grace")
    assert (grace.email, grace.first_name, grace.has_usable_password()) == (
        "grace@idp.example",
        "Grace",
        False,
    )
    assert user_roles(grace) == frozenset()
    assert SsoIdentity.objects.get(user=grace).issuer == sso.issuer
    assert client.get("/").context["user"] == grace


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_wrong_issuer_is_refused(sso, settings, caplog):
    """The ID token's iss is the provider's, not CONCORD_OIDC_ISSUER: 400, nobody signed in,
    no account made."""
    settings.CONCORD_OIDC_ISSUER = "http://127.0.0.1:1/another-issuer"
    client = Client()
    response = client.get(CALLBACK_PATH, _start(client))
    assert response.status_code == 400
    assert "is not CONCORD_OIDC_ISSUER" in caplog.text
    assert not get_user_model().objects.filter(username="grace").exists()
    assert client.get("/").status_code == 302  # to the login page


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_token_signed_by_another_key_is_refused(sso, settings, caplog):
    """The provider's ID token checked against a key that is not the provider's (an attacker's
    key pinned by mistake, or a forged token): the signature fails, 400, no account."""
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    settings.OIDC_RP_IDP_SIGN_KEY = other.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()
    client = Client()
    response = client.get(CALLBACK_PATH, _start(client))
    assert response.status_code == 400
    assert "JWS token verification failed" in caplog.text
    assert not get_user_model().objects.exists()


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_tampered_or_forged_id_token_is_refused(sso):
    """A real ID token from the provider verifies; the same token with its payload changed (sub),
    or one signed by another key with the provider's key id, is refused."""
    client = Client()
    query = _start(client)
    state = client.session["oidc_states"][query["state"]]
    tokens = requests.post(
        sso.issuer + "/token",
        data={
            "grant_type": "authorization_code",
            "code": query["code"],
            "redirect_uri": TEST_SERVER_CALLBACK,
            "client_id": CLIENT_ID,
            "client_secret": CLIENT_SECRET,
            "code_verifier": state["code_verifier"],
        },
        timeout=10,
    ).json()
    backend = SsoBackend()
    token = tokens["id_token"]
    assert backend.verify_token(token, nonce=state["nonce"])["iss"] == sso.issuer

    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["sub"] = "someone-else"
    forged_payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    with pytest.raises(SuspiciousOperation, match="verification failed"):
        backend.verify_token(f"{header}.{forged_payload}.{signature}", nonce=state["nonce"])

    kid = jwt.get_unverified_header(token)["kid"]
    attacker = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(claims, attacker, algorithm="RS256", headers={"kid": kid})
    with pytest.raises(SuspiciousOperation, match="verification failed"):
        backend.verify_token(forged, nonce=state["nonce"])


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_an_unknown_state_is_refused(sso, caplog):
    """A callback whose state this session never issued (a forged or replayed redirect): 400."""
    client = Client()
    query = _start(client)
    response = client.get(CALLBACK_PATH, {**query, "state": "not-the-state"})
    assert response.status_code == 400
    assert "state not found in session" in caplog.text
    assert not get_user_model().objects.exists()


@pytest.mark.django_db
def test_a_password_login_with_code_and_state_in_the_url_never_reaches_the_provider(sso):
    """The SSO backend answers only the callback: a password login whose URL carries ?code=&state=
    is a password login (no token request, which would fail against a made-up code)."""
    UserFactory(username="alice")
    response = Client().post(
        "/accounts/login/?code=made-up&state=made-up",
        {"username": "alice", "password": "correct horse battery"},
    )
    assert response.status_code == 302


# --- Matching and creating accounts (the service, no provider needed) ------------------------------


@pytest.mark.django_db
def test_a_second_sign_in_finds_the_account_by_subject_even_with_a_new_email(settings):
    """The (issuer, sub) link wins over the email: the provider changed the user's email."""
    first = sso_user_resolve(issuer=ISSUER, claims={"sub": "42", "email": "a@x.org"})
    again = sso_user_resolve(
        issuer=ISSUER, claims={"sub": "42", "email": "new@x.org", "email_verified": True}
    )
    assert again == first and get_user_model().objects.count() == 1


@pytest.mark.django_db
def test_a_verified_email_links_the_existing_account():
    """An account made by a lead (email bob@x.org) is found by the provider's verified email."""
    bob = UserFactory(username="bob", email="Bob@X.org")
    user = sso_user_resolve(
        issuer=ISSUER, claims={"sub": "7", "email": "bob@x.org", "email_verified": True}
    )
    assert user == bob and SsoIdentity.objects.get().user == bob


@pytest.mark.django_db
def test_an_unverified_email_makes_a_new_account_not_a_takeover():
    """email_verified missing or false: never matched to bob's account; a new one, its username
    made unique."""
    bob = UserFactory(username="bob", email="bob@x.org")
    user = sso_user_resolve(
        issuer=ISSUER,
        claims={"sub": "8", "email": "bob@x.org", "preferred_username": "bob"},
    )
    assert user != bob and user.username == "bob-2"


@pytest.mark.django_db
def test_two_accounts_with_the_verified_email_are_refused():
    """Two accounts share the email: picking one could sign in as the other, so refused."""
    UserFactory(username="c1", email="c@x.org")
    UserFactory(username="c2", email="c@x.org")
    with pytest.raises(SsoError, match="Several accounts"):
        sso_user_resolve(
            issuer=ISSUER, claims={"sub": "9", "email": "c@x.org", "email_verified": True}
        )
    assert not SsoIdentity.objects.exists()


@pytest.mark.django_db
def test_a_mapped_claim_gives_its_roles_and_others_none(settings):
    """groups ["labellers", "unknown"] with labellers=Annotator: the Annotator role only; a user
    without the claim gets none."""
    settings.CONCORD_OIDC_ROLE_CLAIM = "groups"
    settings.CONCORD_OIDC_ROLE_MAP = {"labellers": ANNOTATOR, "reviewers": REVIEWER}
    mapped = sso_user_resolve(
        issuer=ISSUER, claims={"sub": "10", "groups": ["labellers", "unknown"]}
    )
    plain = sso_user_resolve(issuer=ISSUER, claims={"sub": "11"})
    assert user_roles(mapped) == {ANNOTATOR}
    assert user_roles(plain) == frozenset()


@pytest.mark.django_db
def test_claims_without_a_subject_are_refused():
    """No sub: no account can be linked, so nothing is created."""
    with pytest.raises(SsoError, match="no subject"):
        sso_user_resolve(issuer=ISSUER, claims={"email": "x@x.org", "email_verified": True})
    assert not get_user_model().objects.exists()


@pytest.mark.django_db
def test_a_provider_that_is_down_is_a_failed_sign_in_not_an_error(settings, caplog):
    """The callback's token request cannot reach the provider: the browser goes back to the login
    page with "did not sign you in" (not a 500), and the failure is logged."""
    RunningProvider(url="http://127.0.0.1:9").configure(settings)
    client = Client()
    client.get("/accounts/sso/login/")
    state = next(iter(client.session["oidc_states"]))
    response = client.get(CALLBACK_PATH, {"code": "any", "state": state})
    assert response.status_code == 302 and response["Location"] == "/accounts/login/?sso=failed"
    assert "the provider did not answer as expected" in caplog.text
    page = client.get(response["Location"]).content.decode()
    assert "Single sign-on did not sign you in" in page


@pytest.mark.django_db
def test_a_deactivated_account_loses_its_single_sign_on_session():
    """Signed in through the provider, then deactivated by an administrator: the next request is
    anonymous (the backend applies Django's is_active rule to sessions)."""
    user = UserFactory(username="leaver")
    client = Client()
    client.force_login(user, backend="common.sso.SsoBackend")
    assert client.get("/").status_code == 200
    get_user_model().objects.filter(pk=user.pk).update(is_active=False)
    assert client.get("/")["Location"].startswith("/accounts/login/")
