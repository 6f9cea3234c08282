"""A Django test client logged in as a user (the role fixtures of tests/conftest.py make them)."""

from django.test import Client


def logged_in(user) -> Client:
    """A client with ``user``'s session (no password, no login form)."""
    client = Client()
    client.force_login(user)
    return client
