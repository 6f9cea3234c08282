"""Archives of rating and ranking projects: the items with their responses in stored order, every
answer (scores, thumbs, ranks, the display order shown, rationale, repeats) and the finished
leases travel; the restored project holds no claims (a lease active when the archive was written
is released on restore, its overlap slot given back)."""

from __future__ import annotations

import io
import zipfile
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse

from annotation.demo import demo_load
from annotation.models import DatasetExport, Project, TaskAnswer, TaskItem, TaskLease
from annotation.services.archives import project_archive_restore, project_archive_write
from annotation.services.exporting import export_data_path
from annotation.services.item_exports import item_dataset_export
from annotation.work_queue import items as queue
from tests.helpers.archives import member_digests, purge, rows_of
from tests.helpers.clients import logged_in
from tests.helpers.task_items import annotators, ranking_project, rating_project

pytestmark = pytest.mark.django_db

ANSWERS = {
    "rating": {"scores": {"helpfulness": 4, "correctness": 2}, "thumbs": "up"},
    "ranking": {"ranks": [2, 1, 4, 3]},
}


@pytest.fixture
def exports(tmp_path, settings):
    settings.EXPORT_DIR = tmp_path / "exports"


def _labelled(task_type: str) -> Project:
    """3 items, overlap 2: ``ann`` answers two items (one with a reason) and skips the third,
    ``bob`` answers one and holds the next as an active lease."""
    make = rating_project if task_type == "rating" else ranking_project
    project, _ = make(3, slug=f"my-{task_type}")
    ann, bob = annotators(project, 2)
    for n in range(2):
        lease = queue.item_claim(annotator=ann, project=project)
        queue.item_submit(annotator=ann, lease_id=lease.pk, answer=ANSWERS[task_type],
                          rationale=f"reason {n}", elapsed_ms=1200 + n)  # fmt: skip
    queue.item_skip(annotator=ann, lease_id=queue.item_claim(annotator=ann, project=project).pk)
    lease = queue.item_claim(annotator=bob, project=project)
    queue.item_submit(annotator=bob, lease_id=lease.pk, answer=ANSWERS[task_type])
    assert queue.item_claim(annotator=bob, project=project) is not None  # held, not answered
    return project


def _content(project: Project) -> dict[str, Any]:
    """What the project holds, in terms that do not depend on keys: its task settings, each item
    (by prompt) with its responses in stored order, answers, finished leases and counters."""
    items = {}
    for item in TaskItem.objects.filter(project=project).select_related("prompt"):
        answers = TaskAnswer.objects.filter(item=item).order_by("annotator__username", "repeat")
        leases = TaskLease.objects.filter(item=item).order_by("annotator__username", "kind")
        items[item.prompt.text] = {
            "responses": [p.response.text for p in item.positions.order_by("position")],
            "fields": (
                item.gold,
                item.external_id,
                item.metadata,
                item.queue_position,
                item.content_hash,
                item.served,
            ),
            "answers": [
                (
                    a.annotator.username,
                    a.scores,
                    a.thumbs,
                    a.ranks,
                    a.order,
                    a.rationale,
                    a.repeat,
                    a.gold,
                    a.elapsed_ms,
                )
                for a in answers
            ],
            "leases": [(x.annotator.username, x.kind, x.status, x.order) for x in leases],
        }
    settings = (project.task_type, project.rating_aspects, project.rating_thumbs,
                project.allow_ties, project.overlap)  # fmt: skip
    return {"settings": settings, "items": items}


@pytest.mark.parametrize("task_type", ["rating", "ranking"])
def test_an_item_project_round_trips_without_its_active_leases(tmp_path, exports, task_type):
    """Archive, delete, restore under a new slug: the same items, responses, answers and finished
    leases; bob's active lease is released and its slot is free (taken = answers per item)."""
    project = _labelled(task_type)
    before = _content(project)
    active = TaskLease.objects.get(item__project=project, status=TaskLease.Status.ACTIVE)
    path = tmp_path / "items.zip"
    with path.open("wb") as out:
        project_archive_write(project=project, out=out)
    purge(project)
    assert not TaskItem.objects.exists() and not TaskAnswer.objects.exists()

    restored, counts = project_archive_restore(path=path, slug="copy")
    assert (counts["annotation.TaskItem"], counts["annotation.TaskAnswer"]) == (3, 3)
    assert counts["annotation.TaskLease"] == 5  # 3 answered, 1 skipped, 1 active (then released)
    assert not TaskLease.objects.filter(item__project=restored, status="active").exists()
    after = _content(restored)
    before_held = before["items"][active.item.prompt.text]["leases"]
    before["items"][active.item.prompt.text]["leases"] = [
        lease for lease in before_held if lease[2] != TaskLease.Status.ACTIVE
    ]
    assert after == before
    taken = dict(TaskItem.objects.filter(project=restored).values_list("prompt__text", "taken"))
    answered = {text: len(item["answers"]) for text, item in after["items"].items()}
    assert taken == answered


def test_an_item_projects_training_export_travels_and_is_checked_against_its_hash(
    tmp_path, settings, exports
):
    """A ranking's listwise export is restored under the new slug's folder with the same hash,
    options and files (its hash covers the data file's name, rows and items, not pairs.jsonl)."""
    project = _labelled("ranking")
    export = item_dataset_export(project=project, row_format="listwise")
    rows = export_data_path(export).read_bytes()
    path = tmp_path / "items.zip"
    with path.open("wb") as out:
        project_archive_write(project=project, out=out)
    purge(project)
    restored, counts = project_archive_restore(path=path, slug="copy")
    assert counts["annotation.DatasetExport"] == 1
    copy = DatasetExport.objects.get(project=restored)
    assert (copy.sha256, copy.options) == (export.sha256, export.options)
    assert export_data_path(copy) == settings.EXPORT_DIR / "copy" / export.sha256 / "listwise.jsonl"
    assert export_data_path(copy).read_bytes() == rows


def test_the_restored_queue_hands_out_the_freed_item(tmp_path, exports):
    """After the restore bob (whose lease was left out) is given work again, and ann, who
    answered two items and skipped the third, is given nothing: the skip travelled."""
    project = _labelled("rating")
    path = tmp_path / "items.zip"
    with path.open("wb") as out:
        project_archive_write(project=project, out=out)
    purge(project)
    restored, _ = project_archive_restore(path=path)
    ann, bob = (restored.members.get(username=u.username) for u in _people(restored))
    assert queue.item_claim(annotator=ann, project=restored) is None
    lease = queue.item_claim(annotator=bob, project=restored)
    assert lease is not None
    queue.item_submit(annotator=bob, lease_id=lease.pk, answer=ANSWERS["rating"])
    assert TaskAnswer.objects.filter(item__project=restored).count() == 4


def _people(project: Project) -> list:
    """The two annotators by the order they answered in (ann answered first)."""
    first = TaskAnswer.objects.filter(item__project=project).order_by("created_at", "pk")
    names = list(dict.fromkeys(first.values_list("annotator__username", flat=True)))
    return [project.members.get(username=name) for name in names]


def test_the_settings_page_link_downloads_a_rating_projects_archive(ml_engineer, exports):
    """The "Download archive" link gives a rating project's archive (a zip), no refusal."""
    project = _labelled("rating")
    response = logged_in(ml_engineer).get(
        reverse("annotation:project-archive-file", args=[project.slug])
    )
    assert response.status_code == 200
    assert response["Content-Type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content))) as zf:
        names = [n.lower() for n in zf.namelist()]
    assert any("taskanswer" in n for n in names) and any("taskitem" in n for n in names)


@pytest.mark.parametrize("slug", ["demo-rating", "demo-ranking"])
def test_the_demos_item_projects_round_trip_byte_for_byte(tmp_path, exports, slug):
    """The demo's rating and ranking projects (no active lease) archived, deleted, restored and
    archived again give byte-identical members: every item, answer and lease field kept."""
    demo_load()
    project = Project.objects.get(slug=slug)
    assert not TaskLease.objects.filter(item__project=project, status="active").exists()
    counts = rows_of(project)
    assert counts["annotation.TaskAnswer"] > 0 and counts["annotation.TaskItemResponse"] > 0
    first, second = tmp_path / "first.zip", tmp_path / "second.zip"
    call_command("archive_project", "--project", slug, "--out", str(first))
    purge(project)
    call_command("restore_project", str(first))
    assert rows_of(Project.objects.get(slug=slug)) == counts
    call_command("archive_project", "--project", slug, "--out", str(second))
    assert member_digests(second) == member_digests(first), "a row changed on the way"
