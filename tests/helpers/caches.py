"""A cache of the test's own: the suite's Redis is shared with other tests and runs."""

from __future__ import annotations

from typing import Any


def private_cache(settings: Any, location: str) -> None:
    """Point the default cache of ``settings`` (pytest-django's fixture) at an in-process
    locmem cache named ``location``."""
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": location,
        }
    }
