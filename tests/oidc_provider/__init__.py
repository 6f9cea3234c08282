"""A tiny OpenID Connect provider (django-oidc-provider) that the single sign-on tests start as a
second Django process on this machine: see ``tests/helpers/oidc_provider.py``."""
