"""Exports on the worker (issue #30): the Manage page and the API queue an export job, the task
runs ``dataset_export`` (and, when asked, the Hugging Face zip) with throttled progress on the job,
and the job's page shows its progress, then its downloads or its error."""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from pathlib import Path

import pytest
from django.urls import reverse

from annotation.models import DatasetExport, ExportJob
from annotation.services.export_jobs import (
    PHASE_EXPORTING,
    PHASE_HF,
    ExportCancelled,
    ExportJobError,
    ExportProgress,
    export_job_cancel,
    export_job_create,
    export_job_run,
)
from annotation.services.exporting import JUDGEMENTS_FILE, PAIRS_FILE, dataset_export
from common.lifecycle import job_claim
from config.celery import app as celery_app
from tests.factories import ProjectFactory
from tests.helpers.annotation_data import project_with_votes
from tests.helpers.clients import logged_in
from tests.helpers.task_items import answered_rating

pytestmark = pytest.mark.django_db
JUDGED = 3  # project_with_votes: comparisons with a judgement (the export phase's rows)


@pytest.fixture(autouse=True)
def _eager_tasks(settings, tmp_path):
    """Run queued tasks in-process (the worker path is covered by test_worker)."""
    settings.EXPORT_DIR = tmp_path / "exports"
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = False


@pytest.fixture
def project():
    return project_with_votes()


def _files(export: DatasetExport) -> dict[str, bytes]:
    folder = Path(export.folder)
    return {name: (folder / name).read_bytes() for name in (PAIRS_FILE, JUDGEMENTS_FILE)}


def test_a_queued_job_makes_the_same_export_as_the_direct_call(
    project, ml_engineer, django_capture_on_commit_callbacks
):
    """The direct call's files are kept, its export removed; the job, sent after commit and run by
    the worker (eagerly here), writes the same bytes under the same hash and records its export,
    its creator and its progress: all 3 judged comparisons done."""
    direct = dataset_export(project=project, keep_ties=True, consensus="dawid_skene")
    expected, sha = _files(direct), direct.sha256
    shutil.rmtree(direct.folder)
    direct.delete()
    with django_capture_on_commit_callbacks(execute=True) as sent:
        job = export_job_create(
            project=project, created_by=ml_engineer, keep_ties=True, consensus="dawid_skene"
        )
    assert len(sent) == 1  # the task goes once the job's row is committed
    job.refresh_from_db()
    assert job.status == "succeeded", job.error
    assert job.options == {"consensus": "dawid_skene", "keep_ties": True, "min_judgements": 1}
    assert job.export.sha256 == sha and _files(job.export) == expected
    assert job.export.created_by == ml_engineer and job.export.n_pairs == 3
    assert (job.phase, job.rows_done, job.rows_total) == (PHASE_EXPORTING, JUDGED, JUDGED)
    assert job.worker and job.started_at and job.finished_at and job.eta_s is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"consensus": "unanimous"}, "unknown consensus rule 'unanimous'; expected one of"),
        ({"consensus": "adjudicated", "fallback": "coin"}, "unknown fallback rule 'coin'"),
        ({"min_judgements": 0}, "min_judgements must be a whole number from 1 to 1000, not 0"),
        ({"row_format": "kto"}, "format is only for a rating or ranking project's export"),
    ],
)
def test_bad_options_are_refused_before_anything_is_queued(
    project, ml_engineer, django_capture_on_commit_callbacks, options, message
):
    with django_capture_on_commit_callbacks() as sent, pytest.raises(ExportJobError, match=message):
        export_job_create(project=project, created_by=ml_engineer, **options)
    assert sent == [] and not ExportJob.objects.exists() and not DatasetExport.objects.exists()


def test_a_rating_project_needs_its_rows_and_has_no_hugging_face_zip(ml_engineer):
    rating = answered_rating(1)
    with pytest.raises(ExportJobError, match="training export is kto or aspects \\(choose one\\)"):
        export_job_create(project=rating, created_by=ml_engineer)
    with pytest.raises(ExportJobError, match="kto or aspects, not 'listwise'"):
        export_job_create(project=rating, created_by=ml_engineer, row_format="listwise")
    with pytest.raises(ExportJobError, match="the Hugging Face dataset is a pairwise project's"):
        export_job_create(project=rating, created_by=ml_engineer, row_format="kto", build_hf=True)
    assert not ExportJob.objects.exists()


class _Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_progress_is_written_once_a_second_at_most_and_at_each_phase_end(project):
    """Reports at 0, 0.5 and 2.0 s: the first and the third are written (4,000 rows in 2 s is
    2,000/s; 6,000 to go is 3 s); the end of the phase (done == total) is written at once, and so
    is the first report of the next phase."""
    job = ExportJob.objects.create(project=project)
    assert job_claim(model=ExportJob, pk=job.pk)
    clock = _Clock()
    progress = ExportProgress(job_id=job.pk, clock=clock)
    report = progress.of(PHASE_EXPORTING)
    report(0, 10_000)
    clock.now += 0.5
    report(2_000, 10_000)
    job.refresh_from_db()
    assert (progress.writes, job.rows_done) == (1, 0)
    clock.now += 1.5
    report(4_000, 10_000)
    job.refresh_from_db()
    assert (job.phase, job.rows_done, job.rows_total, job.rows_per_s, job.eta_s) == (
        PHASE_EXPORTING, 4_000, 10_000, 2_000, 3,
    )  # fmt: skip
    clock.now += 0.1
    report(10_000, 10_000)
    clock.now += 0.1
    progress.report(PHASE_HF, 0, 7_000)
    job.refresh_from_db()
    assert progress.writes == 4
    assert (job.phase, job.rows_done, job.rows_total) == (PHASE_HF, 0, 7_000)


def test_a_failed_export_records_its_error_and_its_page_shows_it(
    project, ml_engineer, settings, tmp_path, django_capture_on_commit_callbacks
):
    """EXPORT_DIR is a file: the export cannot make its folder. The job fails with the error
    (no export, nothing published); its page and its status say so."""
    settings.EXPORT_DIR = tmp_path / "not-a-folder"
    settings.EXPORT_DIR.write_text("a file")
    with django_capture_on_commit_callbacks(execute=True):
        job = export_job_create(project=project, created_by=ml_engineer)
    job.refresh_from_db()
    assert job.status == "failed" and job.export is None and job.finished_at is not None
    assert "not-a-folder" in job.error
    assert not DatasetExport.objects.exists()
    client = logged_in(ml_engineer)
    page = client.get(reverse("annotation:export-job", args=["exp", job.pk])).content.decode()
    assert 'data-state="failed">Failed</span>' in page and 'data-testid="export-job-error"' in page
    status = client.get(reverse("annotation:export-job-status", args=["exp", job.pk])).json()
    assert status["status"] == "failed" and "not-a-folder" in status["error"]


def test_a_redelivered_message_exports_nothing(project):
    """Another worker claimed the job: the second delivery leaves it as it is."""
    job = ExportJob.objects.create(project=project, options={"consensus": "majority"})
    assert job_claim(model=ExportJob, pk=job.pk, worker="other-host:1")
    again = export_job_run(job_id=job.pk)
    assert (again.status, again.worker) == ("running", "other-host:1")
    assert not DatasetExport.objects.exists()


def test_the_manage_page_queues_a_job_whose_page_shows_the_downloads(
    project, ml_engineer, annotator, django_capture_on_commit_callbacks
):
    """Create export with keep ties and the Hugging Face zip: the page goes to the job's page;
    the worker makes the export and the zip; the job's page then offers the pairs, the raw
    judgements and the zip (built, served as a file), and the Manage page lists the job."""
    client = logged_in(ml_engineer)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("annotation:export-create", args=["exp"]),
            {"consensus": "majority", "keep_ties": "on", "hf": "on"},
        )
    job = ExportJob.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("annotation:export-job", args=["exp", job.pk])
    assert job.status == "succeeded" and job.build_hf and job.created_by == ml_engineer
    assert (job.phase, job.rows_done, job.rows_total) == (PHASE_HF, 3, 3)  # the zip's pairs
    page = client.get(response["Location"]).content.decode()
    assert 'data-state="succeeded">Succeeded</span>' in page
    assert "3 rows in the export" in page
    for part in ("pairs", "judgements", "hf"):
        assert reverse("annotation:export-download", args=["exp", job.export.sha256, part]) in page
    assert 'data-testid="hf-download"' in page
    zipped = client.get(
        reverse("annotation:export-download", args=["exp", job.export.sha256, "hf"])
    )
    archive = zipfile.ZipFile(io.BytesIO(b"".join(zipped.streaming_content)))
    assert "README.md" in archive.namelist()
    manage = client.get(reverse("annotation:project-manage", args=["exp"])).content.decode()
    assert reverse("annotation:export-job", args=["exp", job.pk]) in manage
    assert logged_in(annotator).get(response["Location"]).status_code == 404


def test_a_bad_option_posted_goes_back_with_the_error_and_no_job(project, ml_engineer):
    response = logged_in(ml_engineer).post(
        reverse("annotation:export-create", args=["exp"]), {"consensus": "loudest"}, follow=True
    )
    assert "No export: unknown consensus rule &#x27;loudest&#x27;" in response.content.decode()
    assert not ExportJob.objects.exists()


def test_without_javascript_a_refresh_shows_where_the_job_is(project, ml_engineer):
    """The job's page renders its state itself: queued (and a hint to refresh; the same options
    asked again while it waits give the same job), then, once the worker ran it, succeeded with
    its downloads."""
    client = logged_in(ml_engineer)
    job = export_job_create(project=project, created_by=ml_engineer)  # not sent: no commit here
    url = reverse("annotation:export-job", args=["exp", job.pk])
    page = client.get(url).content.decode()
    assert 'data-state="queued">Queued</span>' in page and "Refresh the page" in page
    again = export_job_create(project=project, created_by=ml_engineer)  # a second click
    assert again.pk == job.pk and ExportJob.objects.count() == 1
    export_job_run(job_id=job.pk)
    page = client.get(url).content.decode()
    assert 'data-state="succeeded">Succeeded</span>' in page and "Refresh the page" not in page
    assert "2 rows in the export" in page


def test_the_zip_of_an_older_export_is_built_by_a_job_on_first_request(project, ml_engineer):
    """An export made without the zip: asking for the zip queues one job that builds it (a second
    ask while it is queued gets the same job) and shows its page; once built, the link serves it."""
    export = dataset_export(project=project)
    client = logged_in(ml_engineer)
    url = reverse("annotation:export-download", args=["exp", export.sha256, "hf"])
    first = client.get(url)
    job = ExportJob.objects.get()
    assert first["Location"] == reverse("annotation:export-job", args=["exp", job.pk])
    assert (job.export, job.build_hf, job.status) == (export, True, "queued")
    assert client.get(url)["Location"] == first["Location"] and ExportJob.objects.count() == 1
    export_job_run(job_id=job.pk)
    served = client.get(url)
    assert served.status_code == 200 and "attachment" in served["Content-Disposition"]
    assert ExportJob.objects.count() == 1 and DatasetExport.objects.count() == 1


def test_the_api_queues_an_export_with_async_and_reports_it(
    project, ml_engineer, django_capture_on_commit_callbacks
):
    """``?async=1``: 202 with the job and its url (also the Location); polling the url gives the
    job, succeeded, with its export and its built zip. Without it the export stays synchronous
    (201), and ``hf`` needs the job."""
    client = logged_in(ml_engineer)
    with django_capture_on_commit_callbacks(execute=True):
        queued = client.post(
            "/api/projects/exp/exports/?async=1", {"keep_ties": True, "hf": True},
            content_type="application/json",
        )  # fmt: skip
    assert queued.status_code == 202, queued.json()
    body = queued.json()
    job = ExportJob.objects.get()
    assert body["id"] == job.pk and body["status"] == "queued"
    assert body["url"].endswith(f"/api/projects/exp/exports/jobs/{job.pk}/")
    assert queued["Location"] == body["url"]
    detail = client.get(f"/api/projects/exp/exports/jobs/{job.pk}/").json()
    assert detail["status"] == "succeeded" and detail["rows_done"] == 3
    assert detail["export"]["sha256"] == job.export.sha256 and detail["export"]["hf_ready"]
    assert detail["export"]["n_pairs"] == 3
    sync = client.post(
        "/api/projects/exp/exports/", {"keep_ties": True}, content_type="application/json"
    )
    assert sync.status_code == 201 and sync.json()["sha256"] == job.export.sha256
    refused = client.post(
        "/api/projects/exp/exports/", {"hf": True}, content_type="application/json"
    )
    assert refused.status_code == 400 and "async=1" in json.dumps(refused.json())


def test_the_api_refuses_a_bad_async_export_and_queues_nothing(ml_engineer):
    rating = answered_rating(1)
    response = logged_in(ml_engineer).post(
        f"/api/projects/{rating.slug}/exports/?async=1", {"format": "listwise"},
        content_type="application/json",
    )  # fmt: skip
    assert response.status_code == 400 and "kto or aspects" in json.dumps(response.json())
    other = ProjectFactory(slug="api-other")
    assert (
        logged_in(ml_engineer).get(f"/api/projects/{other.slug}/exports/jobs/1/").status_code == 404
    )
    assert not ExportJob.objects.exists()


def test_a_queued_job_cancelled_from_its_page_never_exports(project, ml_engineer):
    """The page offers Cancel while the job waits; the POST cancels it at once (and the button
    goes), and the task that later finds it exports nothing."""
    client = logged_in(ml_engineer)
    job = export_job_create(project=project, created_by=ml_engineer)  # not sent: no commit here
    url = reverse("annotation:export-job", args=["exp", job.pk])
    assert 'data-testid="export-job-cancel"' in client.get(url).content.decode()
    answer = client.post(reverse("annotation:export-job-cancel", args=["exp", job.pk]))
    assert answer["Location"] == url
    page = client.get(url).content.decode()
    assert (
        'data-state="cancelled">Cancelled</span>' in page and f"Export #{job.pk} cancelled" in page
    )
    assert 'data-testid="export-job-cancel"' not in page
    assert export_job_run(job_id=job.pk).status == "cancelled"
    assert not DatasetExport.objects.exists()
    again = client.post(reverse("annotation:export-job-cancel", args=["exp", job.pk]), follow=True)
    assert "is cancelled; there is nothing to cancel" in again.content.decode()


def test_a_running_job_asked_to_stop_keeps_nothing_half_written(project, settings):
    """A running job is asked to stop ("requested"); its next progress write stops it: cancelled,
    no export, no scratch folder left in EXPORT_DIR."""
    job = ExportJob.objects.create(project=project, options={"consensus": "majority"})
    assert job_claim(model=ExportJob, pk=job.pk)
    assert export_job_cancel(job=job) == "requested"
    job.refresh_from_db()
    assert job.cancel_requested and job.status == "running"
    with pytest.raises(ExportCancelled):
        ExportProgress(job_id=job.pk).report(PHASE_EXPORTING, 0, None)
    # The same through the task: a cancel that landed between the claim and the first write.
    queued = ExportJob.objects.create(project=project, options={"consensus": "majority"})
    ExportJob.objects.filter(pk=queued.pk).update(cancel_requested=True)
    stopped = export_job_run(job_id=queued.pk)
    assert (stopped.status, stopped.export, stopped.error) == ("cancelled", None, "")
    assert stopped.finished_at is not None
    assert not DatasetExport.objects.exists()
    leftover = list(Path(settings.EXPORT_DIR).rglob("*")) if settings.EXPORT_DIR.exists() else []
    assert not [path for path in leftover if path.name.startswith(".export-")]


def test_the_api_cancels_a_job_and_answers_409_once_it_has_finished(project, ml_engineer):
    client = logged_in(ml_engineer)
    job = export_job_create(project=project, created_by=ml_engineer)
    cancelled = client.post(f"/api/projects/exp/exports/jobs/{job.pk}/cancel/")
    assert cancelled.status_code == 200
    assert (cancelled.json()["id"], cancelled.json()["status"]) == (job.pk, "cancelled")
    finished = client.post(f"/api/projects/exp/exports/jobs/{job.pk}/cancel/")
    assert finished.status_code == 409 and "nothing to cancel" in finished.json()["detail"]
    assert client.get(f"/api/projects/exp/exports/jobs/{job.pk}/").json()["status"] == "cancelled"
