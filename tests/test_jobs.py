"""``common.jobs.task_send``: services send tasks by their registered name, after commit by default."""

import pytest

from common.jobs import task_send
from common.tasks import worker_ping


def _record(monkeypatch) -> list[dict]:
    calls: list[dict] = []
    monkeypatch.setattr(worker_ping, "apply_async", lambda **kwargs: calls.append(kwargs))
    return calls


@pytest.mark.django_db
def test_sends_after_commit_with_the_options_given(monkeypatch, django_capture_on_commit_callbacks):
    """Nothing leaves before the transaction commits; then the task gets its args and options."""
    calls = _record(monkeypatch)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        task_send("common.tasks.worker_ping", args=["t"], queue="gpu", countdown=5)
        assert calls == []
    assert len(callbacks) == 1
    assert calls == [{"args": ["t"], "queue": "gpu", "countdown": 5}]


def test_sends_now_when_asked(monkeypatch):
    calls = _record(monkeypatch)
    task_send("common.tasks.worker_ping", args=["t"], on_commit=False)
    assert calls == [{"args": ["t"]}]


@pytest.mark.parametrize(
    "name", ["common.tasks.no_such_task", "common.jobs.task_send", "common.tasks.os"]
)
def test_a_name_that_is_no_registered_task_is_refused_at_once(name):
    """A typo fails in the service's transaction (nothing queued), naming the task."""
    with pytest.raises(LookupError, match="no Celery task registered"):
        task_send(name, on_commit=False)
