"""Uploads in the native formats, through the lead's page and the API: format, skip-invalid, guard."""

import gzip
import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from annotation.models import Comparison, ImportJob
from annotation.services.importing import project_get_or_create
from config.celery import app as celery_app
from tests.helpers.clients import logged_in

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("import_path")]


@pytest.fixture(autouse=True)
def _eager_tasks(settings, tmp_path):
    """Run queued tasks in-process (the worker path is covered by test_worker)."""
    settings.UPLOAD_DIR = tmp_path / "uploads"
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = False


@pytest.fixture
def project():
    return project_get_or_create(slug="lead")[0]


PANDA = [
    {"idx": 0, "cmp_key": "a_b", "instruction": "Do it.", "input": "", "response1": "x",
     "response2": "", "annotator1": 1, "annotator2": 1, "annotator3": 0},
    {"idx": 1, "cmp_key": "a_b", "instruction": "Again.", "input": "", "response1": True,
     "response2": "y", "annotator1": 2, "annotator2": 2, "annotator3": 2},
]  # fmt: skip


def test_page_upload_of_a_gzip_json_array_with_skip_invalid(
    ml_engineer, project, settings, django_capture_on_commit_callbacks
):
    client = logged_in(ml_engineer)
    upload = SimpleUploadedFile("testset.json.gz", gzip.compress(json.dumps(PANDA).encode()))
    with django_capture_on_commit_callbacks(execute=True):
        client.post(
            reverse("annotation:import-upload", args=["lead"]),
            {"file": upload, "format": "pandalm", "skip_invalid": "1"},
        )
    job = ImportJob.objects.get()
    assert job.status == "succeeded", job.errors
    assert (job.result["format"], job.result["container"]) == ("pandalm", "gzip")
    assert (job.result["rows_rejected"], job.result["empty_responses"]) == (1, 1)
    assert Comparison.objects.get().external_id == "pandalm-0"
    rejects = Path(job.result["rejects_path"])
    assert rejects.parent == settings.UPLOAD_DIR  # beside the upload
    assert json.loads(rejects.read_text())["item"] == 2
    page = client.get(reverse("annotation:project-manage", args=["lead"])).content.decode()
    assert "1 row imported, 1 rejected" in page


def test_api_upload_with_format_and_scalars_as_text(
    ml_engineer, project, django_capture_on_commit_callbacks
):
    upload = SimpleUploadedFile("testset.json", json.dumps(PANDA).encode())
    with django_capture_on_commit_callbacks(execute=True):
        response = logged_in(ml_engineer).post(
            "/api/projects/lead/imports/",
            {"file": upload, "format": "pandalm", "scalars_as_text": "true"},
        )
    assert response.status_code == 202
    job = ImportJob.objects.get()
    detail = logged_in(ml_engineer).get(f"/api/projects/lead/imports/{job.pk}/").json()
    assert (detail["status"], detail["format"], detail["rows_rejected"]) == (
        "succeeded",
        "pandalm",
        0,
    )
    assert Comparison.objects.count() == 2


def test_api_refuses_an_unknown_format(ml_engineer, project):
    upload = SimpleUploadedFile("rows.jsonl", b"{}\n")
    response = logged_in(ml_engineer).post(
        "/api/projects/lead/imports/", {"file": upload, "format": "csv"}
    )
    assert response.status_code == 400 and "format" in response.json()
    assert not ImportJob.objects.exists()


def test_uploaded_gzip_bomb_fails_the_job_and_imports_nothing(
    ml_engineer, project, settings, django_capture_on_commit_callbacks
):
    settings.CONCORD_IMPORT_MAX_BYTES = 1024 * 1024
    bomb = gzip.compress(b"0" * (10 * 1024 * 1024))
    assert len(bomb) < 100_000
    with django_capture_on_commit_callbacks(execute=True):
        logged_in(ml_engineer).post(
            reverse("annotation:import-upload", args=["lead"]),
            {"file": SimpleUploadedFile("rows.jsonl.gz", bomb)},
        )
    job = ImportJob.objects.get()
    assert job.status == "failed"
    assert "decompresses to more than 1,048,576 bytes" in job.errors[0]["message"]
    assert not Comparison.objects.exists()


def test_api_row_error_names_the_api_field_for_scalars_as_text(
    ml_engineer, project, django_capture_on_commit_callbacks
):
    """An API upload of PandaLM rows with a JSON ``true`` response, without ``scalars_as_text``,
    fails on item 2 with an error naming the API's field (not the command's flag); nothing is
    imported."""
    upload = SimpleUploadedFile("testset.json", json.dumps(PANDA).encode())
    with django_capture_on_commit_callbacks(execute=True):
        logged_in(ml_engineer).post(
            "/api/projects/lead/imports/", {"file": upload, "format": "pandalm"}
        )
    job = ImportJob.objects.get()
    assert job.status == "failed"
    assert [(e["line"], e["field"]) for e in job.errors] == [(2, "response1")]
    assert job.errors[0]["message"] == (
        'must be a string, not bool True ("scalars_as_text": true imports it as its JSON text)'
    )
    assert Comparison.objects.count() == 0
