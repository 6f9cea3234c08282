"""Single sign-on end to end in Chromium, against a real OpenID Connect provider the test starts on
this machine (tests/oidc_provider: a second Django process running django-oidc-provider, with its
own RSA key, users and a client registered for the live server's callback)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import parse_qsl, urlencode, urlparse, urlunparse

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, Route, expect

from common.models import SsoIdentity
from common.roles import ANNOTATOR, user_roles
from tests.helpers.oidc_provider import (
    CALLBACK_PATH,
    PASSWORD,
    RunningProvider,
    oidc_provider_running,
)


@pytest.fixture(scope="module")
def provider(tmp_path_factory, live_server) -> Iterator[RunningProvider]:
    """grace (no groups) and linus (group "labellers") at a provider that knows the live server."""
    users = [
        {"username": "grace", "email": "grace@idp.example", "first_name": "Grace"},
        {"username": "linus", "email": "linus@idp.example", "groups": ["labellers"]},
    ]
    with oidc_provider_running(
        tmp_path_factory.mktemp("provider"),
        redirect_uris=[live_server.url + CALLBACK_PATH],
        users=users,
    ) as running:
        yield running


@pytest.fixture
def sso(settings, provider) -> RunningProvider:
    provider.configure(settings)
    return provider


def _sign_in(page: Page, username: str) -> None:
    """From Concord's login page: the SSO button, the provider's login, its consent page."""
    page.goto("/accounts/login/")
    page.get_by_role("link", name="Sign in with Test IdP").click()
    expect(page.get_by_role("heading", name="Test identity provider: log in")).to_be_visible()
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.get_by_role("button", name="Log in at the provider").click()
    expect(page.get_by_role("heading", name="Request for Permission")).to_be_visible()
    page.get_by_role("button", name="Authorize").click()


def _replace_query(url: str, **values: str) -> str:
    parts = urlparse(url)
    query = dict(parse_qsl(parts.query))
    query.update(values)
    return urlunparse(parts._replace(query=urlencode(query)))


def test_a_new_user_signs_in_with_no_role_and_comes_back_to_the_same_account(
    sso, browser, live_server
) -> None:
    """grace signs in through the provider (login, consent) and lands on Concord's "no role yet"
    page as a new account; a second sign-in, in a fresh browser, reaches the same account."""
    for attempt in range(2):
        context = browser.new_context(base_url=live_server.url)
        context.set_default_timeout(15_000)
        page = context.new_page()
        try:
            _sign_in(page, "grace")
            expect(page.get_by_role("heading", name="Welcome, grace")).to_be_visible()
            expect(page.get_by_text("Your account has no role yet")).to_be_visible()
        finally:
            context.close()
        grace = get_user_model().objects.get(username="grace")
        assert user_roles(grace) == frozenset(), attempt
    assert get_user_model().objects.count() == 1
    identity = SsoIdentity.objects.get()
    assert (identity.user, identity.issuer) == (grace, sso.issuer)


def test_a_mapped_role_claim_gives_the_role(sso, settings, page: Page) -> None:
    """With CONCORD_OIDC_ROLE_CLAIM=groups and labellers=Annotator, linus (in "labellers" at the
    provider) is created as an Annotator and lands on the Label page."""
    settings.CONCORD_OIDC_ROLE_CLAIM = "groups"
    settings.CONCORD_OIDC_ROLE_MAP = {"labellers": ANNOTATOR}
    _sign_in(page, "linus")
    expect(page).to_have_url(re.compile(r"/annotation/$"))
    assert user_roles(get_user_model().objects.get(username="linus")) == {ANNOTATOR}


def _rewrite_redirect(route: Route, **values: str) -> None:
    """Send the routed request on, and change its redirect's query (``values``) on the way back.
    A route handler sees only the first request of a redirect chain, so the redirect is rewritten
    where it is answered."""
    response = route.fetch(max_redirects=0)
    headers = dict(response.headers)
    headers["location"] = _replace_query(headers["location"], **values)
    route.fulfill(response=response, headers=headers)


def test_a_bad_state_is_refused(sso, page: Page, caplog) -> None:
    """The provider's redirect back is altered on its way (another state): Concord answers 400 and
    nobody is signed in or created."""

    def other_state(route: Route) -> None:
        if route.request.method == "POST":  # the consent: answered by a redirect to the callback
            _rewrite_redirect(route, state="forged-state")
        else:
            route.continue_()

    page.route(re.compile(r"/openid/authorize"), other_state)
    with page.expect_response(re.compile(re.escape(CALLBACK_PATH))) as callback:
        _sign_in(page, "grace")
    assert callback.value.status == 400
    assert "state not found in session" in caplog.text
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    assert not get_user_model().objects.exists()


def test_a_bad_nonce_is_refused(sso, page: Page, caplog) -> None:
    """The authorization request is altered on its way to the provider (another nonce): the ID
    token then carries a nonce this session never issued, so Concord answers 400."""
    page.route(
        re.compile(r"/accounts/sso/login/"), lambda route: _rewrite_redirect(route, nonce="forged")
    )
    with page.expect_response(re.compile(re.escape(CALLBACK_PATH))) as callback:
        _sign_in(page, "grace")
    assert callback.value.status == 400
    assert "JWT Nonce verification failed" in caplog.text
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    assert not get_user_model().objects.exists()
