"""The Redis cache backend of settings (``common.cache``): Django's behaviour, one client object."""

import os
import uuid

import pytest
from django.core.cache.backends.redis import RedisCache

from common.cache import ReusingRedisCache


@pytest.fixture
def redis_cache():
    url = os.environ.get("CELERY_BROKER_URL", "")
    if not url.startswith("redis://"):
        pytest.skip("needs Redis (make test uses it)")
    cache = ReusingRedisCache(url, {"KEY_PREFIX": f"test-{uuid.uuid4().hex}"})
    yield cache
    cache.clear()


def test_settings_choose_the_cache_by_the_broker(settings):
    """With a Redis broker the cache lives in Redis too, through the one-client backend; with any
    other broker, in files under var/ (config/settings.py; CACHE_URL, when set, wins)."""
    if os.environ.get("CACHE_URL"):
        expected = settings.CACHES["default"]["BACKEND"]  # the operator's choice, kept as given
        assert "ReusingRedisCache" in expected or "redis" not in expected.lower()
    elif os.environ.get("CELERY_BROKER_URL", "").startswith("redis://"):
        assert settings.CACHES["default"]["BACKEND"] == "common.cache.ReusingRedisCache"
    else:
        backend = "django.core.cache.backends.filebased.FileBasedCache"
        assert settings.CACHES["default"]["BACKEND"] == backend


def test_one_client_object_serves_every_call(redis_cache):
    client = redis_cache._cache.get_client()
    assert redis_cache._cache.get_client("other-key", write=True) is client
    assert isinstance(redis_cache, RedisCache)


def test_reads_and_writes_behave_as_djangos(redis_cache):
    assert redis_cache.add("k", {"a": 1}, 30)
    assert not redis_cache.add("k", "second", 30)  # add keeps the first value
    assert redis_cache.get("k") == {"a": 1}
    redis_cache.set_many({"x": 1, "y": [2]}, 30)
    assert redis_cache.get_many(["x", "y", "z"]) == {"x": 1, "y": [2]}
    assert redis_cache.incr("x") == 2
    redis_cache.delete("k")
    assert redis_cache.get("k", "gone") == "gone"
