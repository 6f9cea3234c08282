"""bench/fault_broker_restart.py uses the redis-server it starts, whatever ``CELERY_BROKER_URL``
says (the README exports it for the test suite just above the script's command)."""

import shutil
import sys
from pathlib import Path

import pytest
import redis
from django.conf import settings

BENCH = Path(__file__).resolve().parent.parent / "bench"

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def fault():
    sys.path.insert(0, str(BENCH))
    try:
        import fault_broker_restart

        yield fault_broker_restart
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture
def other_redis(monkeypatch):
    """The test suite's Redis exported as CELERY_BROKER_URL (and as the result store): the one
    the script must leave alone."""
    if not settings.CELERY_BROKER_URL.startswith("redis://"):
        pytest.skip("needs CELERY_BROKER_URL pointing at Redis (make test sets it)")
    if shutil.which("redis-server") is None:
        pytest.skip("needs redis-server on the PATH (the script starts its own)")
    url = settings.CELERY_BROKER_URL
    monkeypatch.setenv("CELERY_BROKER_URL", url)
    monkeypatch.setenv("CELERY_RESULT_BACKEND", url)
    client = redis.Redis.from_url(url)
    before = set(client.keys("fault-*"))
    yield client
    for key in set(client.keys("fault-*")) - before:
        client.delete(key)


def test_the_worker_environment_names_only_the_private_broker(fault, other_redis):
    """Every variable through which Celery or the settings pick a broker, a result store or a
    cache names the private broker, or is gone."""
    private = fault.private_broker_url(6390)
    assert private == "redis://127.0.0.1:6390/0"
    env = fault.private_broker_env(private, PYTHONPATH="x")
    assert env["CELERY_BROKER_URL"] == private
    assert env["CELERY_RESULT_BACKEND"] == private
    assert "CELERY_BROKER_READ_URL" not in env and "CACHE_URL" not in env
    assert env["PYTHONPATH"] == "x"


def test_a_trial_with_another_broker_exported_uses_its_own(fault, other_redis):
    """3 tasks on an append-only private broker killed and restarted: all 3 were queued there,
    all 3 ran once, and no message reached the exported Redis. Before the fix the tasks went to
    the exported Redis (0 queued on the private one, 3 lost)."""
    before = set(other_redis.keys("fault-*"))
    result = fault.broker_trial("aof", 3, fault.stack.free_port())
    assert set(other_redis.keys("fault-*")) - before == set()
    assert result["in_queue_before_restart"] == 3
    assert result["in_queue_after_restart"] == 3
    assert (result["ran"], result["lost"], result["ran_twice"]) == (3, 0, 0)
    assert result["verdict"] == "PASS"
