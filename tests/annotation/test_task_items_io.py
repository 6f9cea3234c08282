"""Rating and ranking items in and out: the public formats' readers, the import (all or
nothing, idempotent), the export row formats and their round trip, and agreement through the
dashboard and ``manage.py agreement --json``."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from annotation.formats import ITEM_READERS
from annotation.formats.base import RowError
from annotation.models import TaskAnswer, TaskItem, TaskType
from annotation.services.task_export import TaskExportError, task_export_rows, task_export_write
from annotation.services.task_items import TaskImportError, task_items_create, task_items_import
from annotation.work_queue import items as queue
from tests.factories import ProjectFactory
from tests.helpers.task_items import annotators, ranking_project, rating_project

pytestmark = pytest.mark.django_db

ULTRAFEEDBACK = {
    "source": "evol_instruct",
    "instruction": "Name a prime.",
    "completions": [
        {
            "model": f"model-{i}",
            "response": f"Prime {i}",
            "annotations": {
                "helpfulness": {"Rating": str(h), "Rationale": "..."},
                "honesty": {"Rating": str(o)},
                "instruction_following": {"Rating": "N/A"},
                "truthfulness": {"Rating": str(t)},
            },
        }
        for i, (h, o, t) in enumerate([(5, 5, 5), (3, 3, 3), (4, 5, 3), (1, 2, 3)])
    ],
}
HELPSTEER2 = {
    "prompt": "Explain tides.",
    "response": "The moon pulls the sea.",
    "helpfulness": 3,
    "correctness": 4,
    "coherence": 4,
    "complexity": 1,
    "verbosity": 0,
}
OASST = {
    "prompt": "Say hello.",
    "replies": [
        {"text": "Hi", "rank": 2},
        {"text": "Hello!", "rank": 0},
        {"text": "Yo", "rank": 1},
    ],
}


def _jsonl(tmp_path, name, rows):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_ultrafeedback_ranks_completions_by_their_mean_aspect_rating():
    (item,) = ITEM_READERS["ultrafeedback"](ULTRAFEEDBACK, "ranking")
    assert item["responses"] == ["Prime 0", "Prime 1", "Prime 2", "Prime 3"]
    assert item["models"] == ["model-0", "model-1", "model-2", "model-3"]
    # means 5, 3, 4, 2 (N/A left out)
    assert item["answers"] == [
        {"annotator": "ultrafeedback-gpt4", "scores": {}, "thumbs": None, "ranks": [1, 3, 2, 4],
         "order": []}
    ]  # fmt: skip


def test_ultrafeedback_as_ratings_gives_one_item_per_completion():
    rows = ITEM_READERS["ultrafeedback"](ULTRAFEEDBACK, "rating")
    assert len(rows) == 4
    assert rows[2]["answers"][0]["scores"] == {"helpfulness": 4, "honesty": 5, "truthfulness": 3}


def test_helpsteer2_aspects_shift_to_one_to_five():
    (item,) = ITEM_READERS["helpsteer2"](HELPSTEER2, "rating")
    assert item["answers"][0]["scores"] == {
        "helpfulness": 4, "correctness": 5, "coherence": 5, "complexity": 2, "verbosity": 1,
    }  # fmt: skip
    with pytest.raises(RowError, match="0 to 4"):
        ITEM_READERS["helpsteer2"]({**HELPSTEER2, "verbosity": 7}, "rating")
    with pytest.raises(RowError, match="rating items"):
        ITEM_READERS["helpsteer2"](HELPSTEER2, "ranking")


def test_oasst_ranks_are_zero_based_best_first():
    (item,) = ITEM_READERS["oasst"](OASST, "ranking")
    assert item["answers"][0]["ranks"] == [3, 1, 2]
    with pytest.raises(RowError, match="3-8 responses"):
        ITEM_READERS["oasst"]({**OASST, "replies": OASST["replies"][:2]}, "ranking")


def test_import_is_idempotent_and_learns_the_aspects(tmp_path):
    project = ProjectFactory(task_type=TaskType.RATING)
    path = _jsonl(tmp_path, "hs2.jsonl", [HELPSTEER2, {**HELPSTEER2, "prompt": "Why rain?"}])
    result = task_items_import(project=project, path=path, format="helpsteer2")
    assert (result.items_created, result.answers_created, result.annotators_created) == (2, 2, 1)
    again = task_items_import(project=project, path=path, format="helpsteer2")
    assert (again.items_created, again.items_existing, again.answers_existing) == (0, 2, 2)
    project.refresh_from_db()
    assert project.rating_aspects == list(HELPSTEER2)[2:]
    assert all(item.taken == 1 for item in TaskItem.objects.all())


def test_one_bad_record_refuses_the_whole_file(tmp_path):
    project = ProjectFactory(task_type=TaskType.RANKING)
    bad = {**OASST, "replies": [{"text": "x", "rank": "first"}] * 3}
    path = _jsonl(tmp_path, "o.jsonl", [OASST, bad])
    with pytest.raises(TaskImportError, match="1 record"):
        task_items_import(project=project, path=path, format="oasst")
    assert not TaskItem.objects.exists()
    with pytest.raises(TaskImportError, match="pairwise"):
        task_items_import(project=ProjectFactory(), path=path, format="oasst")


def _answered_ranking():
    project, items = ranking_project(2, k=4, overlap=3)
    for user, screen in zip(annotators(project, 3), (["1", "2", "3", "4"], ["2", "1", "3", "4"],
                                                      ["1", "2", "4", "3"]), strict=True):  # fmt: skip
        while (lease := queue.item_claim(annotator=user, project=project)) is not None:
            queue.item_submit(annotator=user, lease_id=lease.pk, answer={"ranks": screen})
    return project, items


def test_ranking_exports_listwise_consensus_and_implied_pairs():
    project, _ = _answered_ranking()
    listwise = task_export_rows(project=project, row_format="listwise")
    assert len(listwise) == 2
    for row in listwise:
        assert set(row) == {"prompt", "responses", "ranks"}
        assert sorted(row["ranks"]) == [1, 2, 3, 4] or len(set(row["ranks"])) < 4
    pairs = task_export_rows(project=project, row_format="pairs")
    first = listwise[0]
    implied = [(i, j) for i in range(4) for j in range(4) if first["ranks"][i] < first["ranks"][j]]
    mine = [p for p in pairs if p["prompt"] == first["prompt"]]
    assert len(mine) == len(implied)
    for pair in mine:
        better = first["responses"].index(pair["chosen"])
        worse = first["responses"].index(pair["rejected"])
        assert pair["margin"] == first["ranks"][worse] - first["ranks"][better] > 0


def test_rating_exports_kto_and_aspect_rows():
    project, _ = rating_project(1, overlap=3)
    answers = [("5", "4", "up"), ("3", "4", "up"), ("4", "1", "down")]
    for user, (h, c, t) in zip(annotators(project, 3), answers, strict=True):
        lease = queue.item_claim(annotator=user, project=project)
        queue.item_submit(
            annotator=user,
            lease_id=lease.pk,
            answer={"scores": {"helpfulness": h, "correctness": c}, "thumbs": t},
        )
    assert task_export_rows(project=project, row_format="kto") == [
        {"prompt": "Question 0?", "completion": "Answer 0.", "label": True}
    ]
    assert task_export_rows(project=project, row_format="aspects") == [
        {
            "prompt": "Question 0?",
            "response": "Answer 0.",
            "aspects": {"helpfulness": 4.0, "correctness": 3.0},
            "scale": [1, 5],
        }
    ]
    with pytest.raises(TaskExportError, match="not 'listwise'"):
        task_export_rows(project=project, row_format="listwise")


@pytest.mark.parametrize("kind", ["rating", "ranking"])
def test_items_export_then_import_gives_the_same_items_and_answers(tmp_path, kind):
    if kind == "ranking":
        project, _ = _answered_ranking()
    else:
        project, _ = rating_project(2, overlap=2)
        for user in annotators(project, 2):
            while (lease := queue.item_claim(annotator=user, project=project)) is not None:
                answer = {"scores": {"helpfulness": 5, "correctness": 3}, "thumbs": "down"}
                queue.item_submit(annotator=user, lease_id=lease.pk, answer=answer)
    out = tmp_path / "items.jsonl"
    n = task_export_write(project=project, row_format="items", out=out)
    assert n == TaskItem.objects.filter(project=project).count()
    copy = ProjectFactory(task_type=project.task_type, rating_aspects=project.rating_aspects)
    result = task_items_import(project=copy, path=out, format="concord-items")
    assert result.items_created == n
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    again = task_export_rows(project=copy, row_format="items")
    assert again == exported
    assert (
        TaskAnswer.objects.filter(item__project=copy).count()
        == TaskAnswer.objects.filter(item__project=project).count()
    )


def test_rows_of_the_wrong_type_are_refused():
    project = ProjectFactory(task_type=TaskType.RANKING)
    with pytest.raises(TaskImportError, match="row 1"):
        task_items_create(project=project, rows=[{"prompt": "p", "responses": ["only one"]}])
    assert not TaskItem.objects.exists()


def test_ranking_agreement_in_the_command_json():
    project, _ = _answered_ranking()
    out = StringIO()
    call_command("agreement", "--project", project.slug, "--json", stdout=out)
    report = json.loads(out.getvalue())
    assert report["task_type"] == "ranking"
    assert report["n_answers"] == 6 and report["n_items_shared"] == 2
    assert 0 < report["kendall_w"] <= 1
    assert report["pairwise"]["n_pairs"] == 12
    assert report["position_bias"]["n_rankings"] == 6


def test_rating_agreement_in_the_command_json_and_the_dashboard(client):
    from common.roles import ML_ENGINEER
    from tests.factories import UserFactory

    project, _ = rating_project(3, overlap=2)
    for user, base in zip(annotators(project, 2), (4, 3), strict=True):
        while (lease := queue.item_claim(annotator=user, project=project)) is not None:
            score = base + lease.item_id % 2
            answer = {"scores": {"helpfulness": score, "correctness": score}, "thumbs": "up"}
            queue.item_submit(annotator=user, lease_id=lease.pk, answer=answer)
    out = StringIO()
    call_command("agreement", "--project", project.slug, "--json", stdout=out)
    report = json.loads(out.getvalue())
    helpfulness = report["aspects"]["helpfulness"]
    assert helpfulness["n_items_pairable"] == 3
    assert len(helpfulness["kappa_pairs"]) == 1
    offsets = sorted(row["leniency"] for row in helpfulness["annotators"].values())
    assert offsets == [-0.5, 0.5]  # one annotator is a point more lenient on every item
    assert report["thumbs"]["up_share"]
    engineer = UserFactory(role=ML_ENGINEER)
    client.force_login(engineer)
    page = client.get(reverse("annotation:agreement", args=[project.slug]))
    assert page.status_code == 200
    assert b"Krippendorff" in page.content and b"helpfulness" in page.content


def test_project_task_setup_validates_and_audits():
    from annotation.models import ProjectEvent
    from annotation.services.task_items import project_task_setup

    project = ProjectFactory()
    with pytest.raises(TaskImportError, match="more than once"):
        project_task_setup(
            project=project, actor=None, task_type="rating", rating_aspects=["a", "a"]
        )
    with pytest.raises(TaskImportError, match="aspects, thumbs or both"):
        project_task_setup(project=project, actor=None, task_type="rating")
    with pytest.raises(TaskImportError, match="belong to rating"):
        project_task_setup(project=project, actor=None, task_type="ranking", rating_thumbs=True)
    assert ProjectEvent.objects.filter(project=project).count() == 0
    done = project_task_setup(
        project=project, actor=None, task_type="rating", rating_aspects=["helpfulness"]
    )
    assert (done.task_type, done.rating_aspects) == ("rating", ["helpfulness"])
    event = ProjectEvent.objects.get(project=project)
    assert event.changes["task_type"] == {"before": "pairwise", "after": "rating"}
    task_items_create(project=done, rows=[{"prompt": "p", "responses": ["r"]}])
    with pytest.raises(TaskImportError, match="already holds rating data"):
        project_task_setup(project=done, actor=None, task_type="ranking")


def test_import_items_and_export_items_commands(tmp_path):
    path = _jsonl(tmp_path, "o.jsonl", [OASST])
    out = StringIO()
    call_command(
        "import_items", str(path), "--project", "ranked", "--format", "oasst",
        "--task-type", "ranking", stdout=out,
    )  # fmt: skip
    assert "1 items created" in out.getvalue()
    target = tmp_path / "out" / "listwise.jsonl"
    call_command(
        "export_items", "--project", "ranked", "--format", "listwise", "--out", str(target),
        stdout=StringIO(),
    )  # fmt: skip
    row = json.loads(target.read_text())
    assert row == {"prompt": "Say hello.", "responses": ["Hi", "Hello!", "Yo"], "ranks": [3, 1, 2]}
