"""Cancelling an import (the Manage page's Cancel, the API): a queued import never starts; a
running one stops at its next progress report and its transaction rolls back, so nothing of the
file is imported; a finished one is refused and left as it is."""

import json

import pytest
from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from annotation.models import Comparison, ImportJob
from annotation.services.import_jobs import import_job_cancel, import_job_create, import_job_run
from annotation.services.importing import project_get_or_create
from common.lifecycle import job_claim
from tests.helpers.clients import logged_in

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("import_path")]

ROWS = [
    {"prompt": f"Question {i}?", "chosen": f"Good answer {i}.", "rejected": f"Bad answer {i}."}
    for i in range(5)
]


@pytest.fixture
def queued(settings, tmp_path, ml_engineer):
    """A queued import of five rows into project "lead" (its task not sent: no commit here)."""
    settings.UPLOAD_DIR = tmp_path / "uploads"
    project = project_get_or_create(slug="lead")[0]
    body = "".join(json.dumps(row) + "\n" for row in ROWS).encode()
    upload = SimpleUploadedFile("rows.jsonl", body)
    return import_job_create(project=project, upload=upload, created_by=ml_engineer)


def test_a_queued_import_cancelled_from_the_manage_page_never_starts(queued, ml_engineer):
    client = logged_in(ml_engineer)
    manage = reverse("annotation:project-manage", args=["lead"])
    assert 'data-testid="import-cancel"' in client.get(manage).content.decode()
    answer = client.post(reverse("annotation:import-cancel", args=["lead", queued.pk]))
    assert answer["Location"] == manage
    page = client.get(manage).content.decode()
    assert "Import of rows.jsonl cancelled." in page
    assert 'data-state="cancelled">Cancelled</span>' in page
    assert 'data-testid="import-cancel"' not in page
    assert import_job_run(job_id=queued.pk).status == "cancelled"
    assert not Comparison.objects.exists()


def test_a_running_import_asked_to_stop_imports_nothing(queued):
    """Asked to stop while running ("requested"): its flag is set; the import that reads the
    mark at its next progress report rolls back and ends cancelled, the marks cleared."""
    assert job_claim(model=ImportJob, pk=queued.pk)
    assert import_job_cancel(job=queued) == "requested"
    queued.refresh_from_db()
    assert queued.cancel_requested and queued.status == "running"
    # The same through the task: a request that landed between the claim and the first report.
    other = ImportJob.objects.create(
        project=queued.project, path=queued.path, original_name="again.jsonl", size_bytes=10
    )
    cache.set(f"concord:import-job:{other.pk}:stop", "1", 60)
    stopped = import_job_run(job_id=other.pk)
    assert (stopped.status, stopped.errors) == ("cancelled", [])
    assert not Comparison.objects.exists()
    assert cache.get(f"concord:import-job:{other.pk}:stop") is None
    assert cache.get(f"concord:import-job:{other.pk}") is None


def test_the_api_cancels_an_import_and_answers_409_once_it_has_finished(queued, ml_engineer):
    client = logged_in(ml_engineer)
    url = f"/api/projects/lead/imports/{queued.pk}/cancel/"
    cancelled = client.post(url)
    assert cancelled.status_code == 200
    assert (cancelled.json()["id"], cancelled.json()["status"]) == (queued.pk, "cancelled")
    finished = client.post(url)
    assert finished.status_code == 409 and "nothing to cancel" in finished.json()["detail"]


def test_a_stop_read_by_the_reading_thread_rolls_back_too(queued, tmp_path):
    """1,001 rows: the first progress report comes while the rows are read (on PostgreSQL's path,
    from the thread that reads ahead); the stop raised there reaches the import, which rolls back
    and ends cancelled."""
    rows = tmp_path / "many.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"prompt": f"Q{i}?", "chosen": f"Yes {i}.", "rejected": f"No {i}."}) + "\n"
            for i in range(1001)
        )
    )
    job = ImportJob.objects.create(
        project=queued.project, path=str(rows), original_name="many.jsonl", size_bytes=10
    )
    cache.set(f"concord:import-job:{job.pk}:stop", "1", 60)
    stopped = import_job_run(job_id=job.pk)
    assert stopped.status == "cancelled"
    assert not Comparison.objects.exists()
