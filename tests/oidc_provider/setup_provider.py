"""Prepare the test provider's database: a fresh RSA signing key, the users, and one registered
client. Run as ``python -m tests.oidc_provider.setup_provider`` after ``migrate``, with a JSON
object on standard input::

    {"client_id": "...", "client_secret": "...", "redirect_uris": ["http://.../callback/"],
     "users": [{"username": "...", "password": "...", "email": "...", "first_name": "...",
                "groups": ["..."]}]}
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def setup(spec: dict[str, Any]) -> None:
    """Create the key, users and client of ``spec`` (see the module docstring)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from django.contrib.auth.models import Group, User
    from oidc_provider.models import Client, ResponseType, RSAKey

    private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private_key.private_bytes(
        encoding=serialization.Encoding.PEM,
        format=serialization.PrivateFormat.PKCS8,
        encryption_algorithm=serialization.NoEncryption(),
    ).decode()
    RSAKey.objects.create(key=pem)
    for entry in spec["users"]:
        user = User.objects.create_user(
            entry["username"],
            email=entry.get("email", ""),
            password=entry["password"],
            first_name=entry.get("first_name", ""),
        )
        for name in entry.get("groups", []):
            user.groups.add(Group.objects.get_or_create(name=name)[0])
    client = Client.objects.create(
        name="Concord under test",
        client_type="confidential",
        client_id=spec["client_id"],
        client_secret=spec["client_secret"],
        jwt_alg="RS256",
        require_consent=True,
        reuse_consent=False,
    )
    client.redirect_uris = spec["redirect_uris"]
    client.save()
    client.response_types.add(ResponseType.objects.get(value="code"))


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.oidc_provider.settings")
    import django

    django.setup()
    setup(json.load(sys.stdin))
