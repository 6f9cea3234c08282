"""The project lead's page and API: upload with progress, errors listed, exports downloadable."""

import gzip
import io
import json
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from annotation.models import Comparison, DatasetExport, ImportJob
from annotation.services.importing import project_get_or_create
from config.celery import app as celery_app
from tests.helpers.clients import logged_in

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _eager_tasks(settings, tmp_path):
    """Run queued tasks in-process (the worker path is covered by test_worker)."""
    settings.UPLOAD_DIR = tmp_path / "uploads"
    settings.EXPORT_DIR = tmp_path / "exports"
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = False


@pytest.fixture
def project():
    return project_get_or_create(slug="lead")[0]


def _jsonl(*rows) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


GOOD = {"prompt": "Q?", "response_a": "yes", "response_b": "no",
        "judgements": [{"annotator": "z", "choice": "a"}]}  # fmt: skip


def test_upload_imports_and_keeps_the_file(
    ml_engineer, project, settings, django_capture_on_commit_callbacks
):
    client = logged_in(ml_engineer)
    upload = SimpleUploadedFile("rows.jsonl", _jsonl(GOOD), content_type="application/jsonl")
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("annotation:import-upload", args=["lead"]), {"file": upload})
    assert response.status_code == 302
    job = ImportJob.objects.get()
    assert job.status == "succeeded" and job.result["comparisons_created"] == 1
    assert Comparison.objects.filter(project=project).count() == 1
    assert list(settings.UPLOAD_DIR.iterdir())  # what the user sent is kept
    status = client.get(reverse("annotation:import-status", args=["lead", job.pk])).json()
    assert status["status"] == "succeeded" and "1 comparison created" in status["summary"]
    page = client.get(reverse("annotation:project-manage", args=["lead"])).content.decode()
    assert "rows.jsonl" in page and "1 comparison created" in page


def test_bad_upload_lists_each_error_and_imports_nothing(
    ml_engineer, project, django_capture_on_commit_callbacks
):
    client = logged_in(ml_engineer)
    bad = _jsonl(GOOD, {"prompt": "Q2", "response_a": "x"}) + b"{oops\n"
    with django_capture_on_commit_callbacks(execute=True):
        client.post(
            reverse("annotation:import-upload", args=["lead"]),
            {"file": SimpleUploadedFile("bad.jsonl", bad)},
        )
    job = ImportJob.objects.get()
    assert job.status == "failed"
    assert [(e["line"], e["field"]) for e in job.errors] == [(2, "response_b"), (3, "")]
    assert not Comparison.objects.exists()
    page = logged_in(ml_engineer).get(reverse("annotation:project-manage", args=["lead"]))
    assert "line 2, response_b: is required" in page.content.decode()


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("rows.csv", b"a,b\n", "expected a JSONL file"),
        ("empty.jsonl", b"", "is empty"),
    ],
)
def test_refused_uploads_create_no_job(ml_engineer, project, name, content, message):
    response = logged_in(ml_engineer).post(
        reverse("annotation:import-upload", args=["lead"]),
        {"file": SimpleUploadedFile(name, content)},
        follow=True,
    )
    assert message in response.content.decode()
    assert not ImportJob.objects.exists()


def test_oversized_upload_is_refused(ml_engineer, project, settings):
    settings.CONCORD_IMPORT_MAX_BYTES = 10
    response = logged_in(ml_engineer).post(
        reverse("annotation:import-upload", args=["lead"]),
        {"file": SimpleUploadedFile("big.jsonl", _jsonl(GOOD))},
        follow=True,
    )
    assert "larger than the limit" in response.content.decode()
    assert not ImportJob.objects.exists()


def _zip_bomb(kind: str) -> bytes:
    """10 MB of zeros compressed to a few kilobytes: a small zip bomb."""
    zeros = b"0" * (10 * 1024 * 1024)
    if kind == "gzip":
        return gzip.compress(zeros)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("rows.jsonl", zeros)
    return buffer.getvalue()


# gzip and zstd JSONL are read now, under the decompressed-size guard (tests/annotation/
# test_formats.py); archives stay refused, by name or by their first bytes, never unpacked.
COMPRESSED_UPLOADS = [
    ("rows.zip", "zip", "rows.zip: archives are not accepted"),
    ("rows.jsonl", "zip", "rows.jsonl is a zip archive"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "kind", "message"), COMPRESSED_UPLOADS)
def test_compressed_upload_is_refused_on_the_page(
    ml_engineer, project, settings, name, kind, message
):
    bomb = _zip_bomb(kind)
    assert len(bomb) < 100_000
    response = logged_in(ml_engineer).post(
        reverse("annotation:import-upload", args=["lead"]),
        {"file": SimpleUploadedFile(name, bomb)},
        follow=True,
    )
    assert message in response.content.decode()
    assert not ImportJob.objects.exists() and not Comparison.objects.exists()
    assert not settings.UPLOAD_DIR.exists() or not list(settings.UPLOAD_DIR.iterdir())


@pytest.mark.parametrize(("name", "kind", "message"), COMPRESSED_UPLOADS)
def test_compressed_upload_is_refused_by_the_api(
    ml_engineer, project, settings, name, kind, message
):
    response = logged_in(ml_engineer).post(
        "/api/projects/lead/imports/", {"file": SimpleUploadedFile(name, _zip_bomb(kind))}
    )
    assert response.status_code == 400
    assert message in response.json()["file"][0]
    assert not ImportJob.objects.exists() and not Comparison.objects.exists()
    assert not settings.UPLOAD_DIR.exists() or not list(settings.UPLOAD_DIR.iterdir())


def test_export_button_and_download(ml_engineer, project, django_capture_on_commit_callbacks):
    client = logged_in(ml_engineer)
    with django_capture_on_commit_callbacks(execute=True):
        client.post(
            reverse("annotation:import-upload", args=["lead"]),
            {"file": SimpleUploadedFile("rows.jsonl", _jsonl(GOOD))},
        )
    with django_capture_on_commit_callbacks(execute=True):  # the export job, run eagerly
        client.post(reverse("annotation:export-create", args=["lead"]))
    export = DatasetExport.objects.get()
    response = client.get(
        reverse("annotation:export-download", args=["lead", export.sha256, "pairs"])
    )
    row = json.loads(b"".join(response.streaming_content))
    assert (row["chosen"], row["rejected"]) == ("yes", "no")
    assert "attachment" in response["Content-Disposition"]


def test_lead_pages_are_hidden_from_annotators(annotator, project):
    client = logged_in(annotator)
    assert client.get(reverse("annotation:project-manage", args=["lead"])).status_code == 404
    response = client.post(
        reverse("annotation:import-upload", args=["lead"]),
        {"file": SimpleUploadedFile("rows.jsonl", _jsonl(GOOD))},
    )
    assert response.status_code == 404 and not ImportJob.objects.exists()


def test_api_import_and_export(ml_engineer, project, django_capture_on_commit_callbacks):
    client = logged_in(ml_engineer)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            "/api/projects/lead/imports/", {"file": SimpleUploadedFile("r.jsonl", _jsonl(GOOD))}
        )
    assert response.status_code == 202
    detail = client.get(f"/api/projects/lead/imports/{response.json()['id']}/").json()
    assert detail["status"] == "succeeded"
    created = client.post(
        "/api/projects/lead/exports/", {"keep_ties": True}, content_type="application/json"
    )
    assert created.status_code == 201 and created.json()["n_pairs"] == 1


def test_api_rejects_bad_file_with_field_error(ml_engineer, project):
    response = logged_in(ml_engineer).post(
        "/api/projects/lead/imports/", {"file": SimpleUploadedFile("r.csv", b"x")}
    )
    assert response.status_code == 400
    assert "expected a JSONL file" in response.json()["file"][0]


def test_api_refuses_annotators_and_anonymous(annotator, project, client):
    assert logged_in(annotator).post("/api/projects/lead/exports/").status_code == 403
    assert client.post("/api/projects/lead/exports/").status_code in (401, 403)


def test_batch_progress_counts_complete_pairs_per_batch(project):
    from annotation.selectors.projects import batch_progress
    from tests.factories import ComparisonFactory, JudgementFactory

    comparisons = [ComparisonFactory(project=project) for _ in range(25)]
    for comparison in comparisons[:3]:  # overlap 3: three judgements complete a pair
        for _ in range(3):
            JudgementFactory(comparison=comparison)
    JudgementFactory(comparison=comparisons[24])
    first, second = batch_progress(project=project)
    assert (first.number, first.comparisons, first.complete, first.judgements) == (1, 20, 3, 9)
    assert (second.comparisons, second.complete, second.judgements) == (5, 0, 1)


def test_annotator_median_time_is_in_milliseconds_as_on_the_agreement_page(ml_engineer, project):
    """ann judged four pairs in 1000, 2000, 4000 and 8000 ms: the lead's Annotators table shows the
    median 3000 ms (the mean of the middle two, as the agreement dashboard's numpy median), in the
    unit the agreement dashboard and the item page use, not "4.0 s"."""
    from tests.factories import JudgementFactory, UserFactory
    from tests.helpers.annotation_data import make_pair

    ann = UserFactory(username="ann", role="Annotator")
    project.members.add(ann)
    for ms in (1000, 2000, 4000, 8000):
        pair = make_pair(project, prompt=f"Question {ms}")
        JudgementFactory(comparison=pair, annotator=ann, elapsed_ms=ms)
    page = logged_in(ml_engineer).get(reverse("annotation:project-manage", args=["lead"]))
    html = page.content.decode()
    assert "<tr><td>ann</td><td>4</td><td>0</td><td>3000 ms</td><td>active</td></tr>" in html


def test_annotators_table_leaves_out_reviewer_members(ml_engineer, project):
    """A project with annotator ``ann`` and reviewer ``rita`` as members: the lead page's
    Annotators table has one row, ann's; a reviewer labels nothing there."""
    from annotation.services.projects import member_add
    from tests.factories import UserFactory

    UserFactory(username="ann", role="Annotator")
    UserFactory(username="rita", role="Reviewer")
    member_add(project=project, actor=ml_engineer, identifier="ann", role="annotator")
    member_add(project=project, actor=ml_engineer, identifier="rita", role="reviewer")
    page = logged_in(ml_engineer).get(reverse("annotation:project-manage", args=["lead"]))
    table = page.content.decode().split('data-testid="annotators"')[1].split("</table>")[0]
    assert "<td>ann</td>" in table
    assert "rita" not in table
