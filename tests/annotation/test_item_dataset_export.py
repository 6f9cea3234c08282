"""A rating or ranking project's training export (issue #32): ``item_dataset_export`` freezes
one row format into a hashed export folder as ``dataset_export`` does for pairs (data file, items
file, manifest), says in its options which rows a run reads and from which file, and gives the
same export for the same content; the Manage page makes one and lists it with "Train on this
export"; ``export_items --snapshot`` makes one from the command line."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse

from annotation.models import DatasetExport, ExportJob, TaskAnswer
from annotation.services.export_jobs import export_job_run
from annotation.services.exporting import export_data_path, export_folder_sha256
from annotation.services.item_exports import item_dataset_export, item_snapshot_formats
from annotation.services.task_export import TaskExportError, task_export_rows
from tests.factories import ProjectFactory
from tests.helpers.clients import logged_in
from tests.helpers.task_items import answered_ranking, answered_rating

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _exports_dir(tmp_path, settings):
    settings.EXPORT_DIR = tmp_path / "exports"


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _check_export(export: DatasetExport, project, row_format: str, rows: str) -> list[dict]:
    """The export's folder, files, manifest and options as the module docstring states; returns
    its data rows."""
    folder = Path(export.folder)
    assert folder == Path(export.folder).parent / export.sha256
    assert folder.parent.name == project.slug
    data_file = f"{row_format}.jsonl"
    assert export.options == {"format": row_format, "rows": rows, "data_file": data_file}
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [data_file, "items.jsonl", "manifest.json"]
    )
    assert export_data_path(export) == folder / data_file
    assert export_folder_sha256(folder, export.options) == export.sha256
    data = _lines(folder / data_file)
    assert data == task_export_rows(project=project, row_format=row_format)
    assert _lines(folder / "items.jsonl") == task_export_rows(project=project, row_format="items")
    answers = TaskAnswer.objects.filter(item__project=project, repeat=False).count()
    assert (export.n_pairs, export.n_judgements) == (len(data), answers)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["sha256"] == export.sha256 and manifest["options"] == export.options
    assert (manifest["rows"], manifest["answers"]) == (len(data), answers)
    return data


def test_a_ranking_exports_listwise_rows_and_implied_pairs():
    """Two items ranked by three people: 2 listwise rows; as pairs, one per two responses of
    different consensus ranks; two formats, two exports."""
    project = answered_ranking(2)
    assert item_snapshot_formats(project) == ("listwise", "pairs")
    listwise = item_dataset_export(project=project, row_format="listwise")
    lists = _check_export(listwise, project, "listwise", "listwise")
    assert len(lists) == 2
    implied = sum(a < b for row in lists for a in row["ranks"] for b in row["ranks"])
    pairs = item_dataset_export(project=project, row_format="pairs")
    assert len(_check_export(pairs, project, "pairs", "pairs")) == implied > 0
    assert listwise.sha256 != pairs.sha256
    assert listwise.n_judgements == 6


def test_a_rating_exports_regression_and_kto_rows():
    """Two items, each helpfulness 5/3/4, correctness 4/4/1, thumbs up/up/down: aspect means
    4.0 and 3.0 (the ``regression`` row kind) and label true (``kto``)."""
    project = answered_rating(2)
    assert item_snapshot_formats(project) == ("kto", "aspects")
    aspects = item_dataset_export(project=project, row_format="aspects")
    rows = _check_export(aspects, project, "aspects", "regression")
    assert [row["aspects"] for row in rows] == [{"helpfulness": 4.0, "correctness": 3.0}] * 2
    kto = item_dataset_export(project=project, row_format="kto")
    rows = _check_export(kto, project, "kto", "kto")
    assert [row["label"] for row in rows] == [True, True]


def test_the_same_content_is_the_same_export_and_a_new_answer_a_new_one():
    project = answered_rating(1)
    first = item_dataset_export(project=project, row_format="kto")
    again = item_dataset_export(project=project, row_format="kto")
    assert again.pk == first.pk and DatasetExport.objects.count() == 1
    assert len(list(Path(first.folder).parent.iterdir())) == 1  # no scratch folder left
    TaskAnswer.objects.filter(item__project=project, thumbs=False).update(thumbs=True)
    changed = item_dataset_export(project=project, row_format="kto")
    assert changed.pk != first.pk and changed.sha256 != first.sha256


def test_empty_formats_of_one_project_are_still_two_exports():
    """No answers: both data files are empty and the items file is the same; the data file's
    name is in the hash, so listwise and pairs are not one export."""
    project = ProjectFactory(task_type="ranking")
    listwise = item_dataset_export(project=project, row_format="listwise")
    pairs = item_dataset_export(project=project, row_format="pairs")
    assert listwise.pk != pairs.pk and (listwise.n_pairs, pairs.n_pairs) == (0, 0)


def test_wrong_formats_and_pairwise_projects_are_refused_writing_nothing():
    with pytest.raises(TaskExportError, match="listwise or pairs, not 'items'"):
        item_dataset_export(project=answered_ranking(1), row_format="items")
    with pytest.raises(TaskExportError, match="kto or aspects, not 'listwise'"):
        item_dataset_export(project=answered_rating(1), row_format="listwise")
    with pytest.raises(TaskExportError, match=r"pairwise project.*export_dataset"):
        item_dataset_export(project=ProjectFactory(), row_format="pairs")
    assert not DatasetExport.objects.exists()


def test_export_items_snapshot_makes_the_export():
    project = answered_ranking(1)
    out = StringIO()
    call_command(
        "export_items", "--project", project.slug, "--format", "listwise", "--snapshot",
        stdout=out,
    )  # fmt: skip
    export = DatasetExport.objects.get()
    assert f"export {export.pk} {export.sha256}: 1 listwise rows" in out.getvalue()
    assert export.options["rows"] == "listwise"


def test_the_manage_page_makes_an_export_and_links_it_to_training(ml_engineer):
    """The ranking project's Manage page offers listwise and pairs; posting pairs queues the
    export job, whose page, once the worker made the export, offers its downloads and "Train on
    this export"; a format the project has not is refused with no job."""
    project = answered_ranking(1)
    client = logged_in(ml_engineer)
    manage = reverse("annotation:project-manage", args=[project.slug])
    page = client.get(manage).content.decode()
    assert 'data-testid="item-export-form"' in page
    assert '<option value="listwise">' in page and '<option value="pairs">' in page
    assert 'value="items"' not in page and "No exports yet." in page
    create = reverse("annotation:export-create", args=[project.slug])
    job = client.post(create, {"format": "pairs"})  # an export job, run here as the worker would
    job_id = int(job["Location"].rstrip("/").rsplit("/", 1)[-1])
    assert export_job_run(job_id=job_id).status == "succeeded"
    export = DatasetExport.objects.get()
    assert export.options["rows"] == "pairs" and export.created_by == ml_engineer
    page = client.get(job["Location"]).content.decode()
    assert f"{export.n_pairs} rows in the export" in page and "pairs.jsonl</a>" in page
    train = reverse("admin:training_trainingrun_add") + f"?export={export.pk}"
    assert f'href="{train}" data-testid="train-on-export"' in page
    data = reverse("annotation:export-download", args=[project.slug, export.sha256, "data"])
    download = client.get(data)
    assert b"".join(download.streaming_content) == Path(export_data_path(export)).read_bytes()
    refused = client.post(create, {"format": "items"}, follow=True)
    assert "No export: a ranking project&#x27;s training export is" in refused.content.decode()
    assert DatasetExport.objects.count() == 1 and ExportJob.objects.count() == 1


def test_the_api_freezes_an_item_projects_rows_in_the_format_posted(ml_engineer):
    """``format`` picks the rows of a rating project's export (201, the export's options); a
    format the task type has not, or none, is a 400 naming the formats; a pairwise project
    refuses ``format``."""
    project = answered_rating(1)
    client = logged_in(ml_engineer)
    url = f"/api/projects/{project.slug}/exports/"
    created = client.post(url, {"format": "aspects"}, content_type="application/json")
    assert created.status_code == 201, created.json()
    assert created.json()["options"] == {
        "format": "aspects", "rows": "regression", "data_file": "aspects.jsonl",
    }  # fmt: skip
    for body in ({"format": "listwise"}, {}):
        refused = client.post(url, body, content_type="application/json")
        assert refused.status_code == 400 and "kto or aspects" in str(refused.json())
    pairwise = ProjectFactory(slug="pairwise-api")
    refused = client.post(
        f"/api/projects/{pairwise.slug}/exports/", {"format": "pairs"},
        content_type="application/json",
    )  # fmt: skip
    assert refused.status_code == 400 and "format" in refused.json()
    assert DatasetExport.objects.count() == 1
