"""The admin's user pages for an ML engineer (view-only on accounts): the page opens, and no link
leads to the password form they may not open; a superuser still gets that link."""

import pytest

from tests.factories import UserFactory
from tests.helpers.clients import logged_in

pytestmark = pytest.mark.django_db


def test_an_ml_engineer_views_a_user_without_a_link_to_a_forbidden_page():
    target = UserFactory(username="someone", role="Annotator")
    mel = UserFactory(username="mel", role="ML engineer")
    page = logged_in(mel).get(f"/admin/auth/user/{target.pk}/change/")
    assert page.status_code == 200
    assert b"someone" in page.content
    assert f"/admin/auth/user/{target.pk}/password/".encode() not in page.content
    assert b"../password/" not in page.content
    assert logged_in(mel).get(f"/admin/auth/user/{target.pk}/password/").status_code == 403


def test_a_superuser_still_changes_passwords_from_the_user_page():
    target = UserFactory(username="someone", role="Annotator")
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    page = logged_in(root).get(f"/admin/auth/user/{target.pk}/change/")
    assert page.status_code == 200
    assert b"password/" in page.content
