"""Project archives: archive_project and restore_project carry a project's whole history to another
instance (here: the same database after the project is deleted), all or nothing."""

import json
import zipfile

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from annotation.demo import demo_load
from annotation.models import Comparison, Judgement, Project
from tests.helpers.archives import (
    add_annotation_history,
    add_training_and_eval,
    measures,
    member_digests,
    purge,
    purge_item_answers,
    rows_of,
)
from tests.helpers.shared_data import PANDALM_TESTSET, require

pytestmark = pytest.mark.django_db


@pytest.fixture
def exports(tmp_path, settings):
    settings.EXPORT_DIR = tmp_path / "exports"


def _round_trip(project: Project, tmp_path) -> tuple[dict, dict, Project]:
    before, counts = measures(project), rows_of(project)
    first = tmp_path / "first.zip"
    call_command("archive_project", "--project", project.slug, "--out", str(first))
    slug = project.slug
    purge(project)
    assert not Project.objects.filter(slug=slug).exists()
    call_command("restore_project", str(first))
    restored = Project.objects.get(slug=slug)
    assert rows_of(restored) == counts
    second = tmp_path / "second.zip"
    call_command("archive_project", "--project", slug, "--out", str(second))
    assert member_digests(second) == member_digests(first), "a row changed on the way"
    return before, measures(restored), restored


def test_demo_round_trip_keeps_reports_consensus_export_hash_and_every_row(tmp_path, exports):
    """The demo project, with gold, repeats, guideline versions, adjudications, an event and a
    clustering, an RM run (config, metrics), a judge and its verdicts, a rated and
    judged eval round, an alert and a stop decision, survives archive -> delete -> restore: the
    agreement report, the Dawid-Skene consensus and the export hash are equal, and archiving the
    restored project again gives byte-identical members (every field, time and key kept)."""
    demo_load()
    project = Project.objects.get(slug="demo")
    add_annotation_history(project)
    add_training_and_eval(project)
    counts = rows_of(project)
    pairwise = {name: n for name, n in counts.items() if not name.startswith("annotation.Task")}
    assert all(pairwise.values()), f"a table without rows: {pairwise}"  # items: test_item_projects
    assert counts["training.MetricPoint"] == 3 and counts["monitoring.EvalJudgeVerdict"] == 2
    assert counts["monitoring.JudgeOutput"] == 4 and counts["monitoring.EvalJudgement"] == 2
    before, after, restored = _round_trip(project, tmp_path)
    assert after == before
    assert (
        before["report"]["n_judgements"]
        == Judgement.objects.filter(comparison__project=restored).count()
        > 0
    )


def test_missing_accounts_are_created_inactive_without_password(tmp_path, exports):
    """An annotator unknown to the new instance comes back as an inactive account with no usable
    password; known usernames are matched, not duplicated."""
    demo_load()
    project = Project.objects.get(slug="demo")
    path = tmp_path / "demo.zip"
    call_command("archive_project", "--project", "demo", "--out", str(path))
    purge(project)
    purge_item_answers()
    get_user_model().objects.filter(username="ben").delete()
    n_users = get_user_model().objects.count()
    call_command("restore_project", str(path))
    ben = get_user_model().objects.get(username="ben")
    assert (ben.is_active, ben.has_usable_password()) == (False, False)
    assert get_user_model().objects.count() == n_users + 1
    assert get_user_model().objects.get(username="ana").is_active


def test_pandalm_round_trip_gives_equal_reports(tmp_path, exports, capsys):
    """PandaLM's 999 comparisons with 3 annotators each: equal agreement report, consensus and
    export hash after the round trip; comparison external ids unchanged."""
    call_command(
        "import_comparisons", str(require(PANDALM_TESTSET)), "--project", "pandalm",
        "--scalars-as-text",
    )  # fmt: skip
    project = Project.objects.get(slug="pandalm")
    ids = sorted(Comparison.objects.filter(project=project).values_list("external_id", flat=True))
    before, after, restored = _round_trip(project, tmp_path)
    assert after == before and before["report"]["n_items"] == 999
    assert sorted(restored.comparisons.values_list("external_id", flat=True)) == ids


def test_restore_under_a_new_slug_beside_the_original(tmp_path, exports):
    """With the original still here, --as restores a copy with new keys: same agreement report
    and consensus by external id; the archived slug alone is refused, naming --as."""
    demo_load()
    path = tmp_path / "demo.zip"
    call_command("archive_project", "--project", "demo", "--out", str(path))
    with pytest.raises(CommandError, match=r"already exists here.*--as NEW_SLUG"):
        call_command("restore_project", str(path))
    call_command("restore_project", str(path), "--as", "demo-copy")
    original = measures(Project.objects.get(slug="demo"))
    copy = measures(Project.objects.get(slug="demo-copy"))
    assert copy["report"] == original["report"] and copy["consensus"] == original["consensus"]


def test_a_copy_with_new_keys_keeps_every_reference_inside_the_copy(tmp_path, exports):
    """Restored beside the original (whose export hash and judge account are renamed first, so
    nothing clashes), every key is new and every reference, including the ids inside JSON fields,
    points into the copy: the eval round's prompt ids, the clustering's, the run's chosen
    checkpoint, the clone's parent, the re-adjudication's superseded verdict."""
    from annotation.models import Adjudication, ClusteringRun, DatasetExport, PromptCluster
    from monitoring.models import EvalRound, Judge
    from training.models import TrainingRun

    demo_load()
    project = Project.objects.get(slug="demo")
    add_annotation_history(project)
    add_training_and_eval(project)
    path = tmp_path / "demo.zip"
    call_command("archive_project", "--project", "demo", "--out", str(path))
    DatasetExport.objects.filter(project=project).update(sha256="0" * 64)
    get_user_model().objects.filter(pk=Judge.objects.get(project=project).annotator_id).update(
        username="old-judge-account"
    )
    call_command("restore_project", str(path), "--as", "demo-copy")
    copy = Project.objects.get(slug="demo-copy")
    prompts = set(copy.prompts.values_list("pk", flat=True))
    assert prompts.isdisjoint(project.prompts.values_list("pk", flat=True))
    round_ = EvalRound.objects.get(project=copy)
    assert set(round_.prompt_ids) <= prompts and len(round_.prompt_ids) == 2
    assert set(round_.items.values_list("prompt_id", flat=True)) == set(round_.prompt_ids)
    assert round_.checkpoint.run.snapshot.export.project == copy
    assert round_.judge.project == copy and not round_.judge.annotator.is_active
    clustering = ClusteringRun.objects.get(project=copy)
    assert set(clustering.projection["prompt_ids"]) <= prompts
    assert set(PromptCluster.objects.get(run=clustering).central_prompt_ids) <= prompts
    runs = TrainingRun.objects.filter(snapshot__export__project=copy)
    first, clone = runs.get(name="rm"), runs.get(name="rm again")
    assert first.result_checkpoint.run == first and clone.cloned_from == first
    later = Adjudication.objects.get(comparison__project=copy, supersedes__isnull=False)
    assert later.supersedes.comparison == later.comparison and later.note == "on second look"
    original, restored = measures(project), measures(copy)
    assert restored["report"] == original["report"]
    assert restored["consensus"] == original["consensus"]


def test_a_copy_that_clashes_is_refused_and_nothing_is_written(tmp_path, exports):
    """Beside the original, the archived export (same hash) cannot be restored a second time:
    refused with a plain message, and no row of the copy is left."""
    demo_load()
    project = Project.objects.get(slug="demo")
    add_training_and_eval(project)
    path = tmp_path / "demo.zip"
    call_command("archive_project", "--project", "demo", "--out", str(path))
    state = _state()
    with pytest.raises(CommandError, match="clashes with data already in this instance"):
        call_command("restore_project", str(path), "--as", "demo-copy")
    assert _state() == state


def test_new_rows_after_a_restore_get_fresh_keys(tmp_path, exports):
    """On a fresh instance the key sequences start low: after a restore that kept the archived keys,
    the next comparison gets a key past them (the sequence was moved), not a clash. PostgreSQL."""
    from django.db import connection

    from annotation.services.importing import comparisons_import

    if connection.vendor != "postgresql":
        pytest.skip("sequences are PostgreSQL's")
    demo_load()
    project = Project.objects.get(slug="demo")
    path = tmp_path / "demo.zip"
    call_command("archive_project", "--project", "demo", "--out", str(path))
    lowest = min(project.comparisons.values_list("pk", flat=True))
    purge(project)
    with connection.cursor() as cursor:  # as if nothing had ever been inserted past ``lowest``
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('annotation_comparison', 'id'), %s, false)",
            [lowest],
        )
    call_command("restore_project", str(path))
    restored = Project.objects.get(slug="demo")
    before = set(restored.comparisons.values_list("pk", flat=True))
    row = {"prompt": "A new question?", "response_a": "Yes.", "response_b": "No."}
    comparisons_import(project=restored, lines=[json.dumps(row)])
    new = set(restored.comparisons.values_list("pk", flat=True)) - before
    assert len(new) == 1 and min(new) > max(before)


def _state() -> tuple[int, int, int]:
    return (Project.objects.count(), Judgement.objects.count(), get_user_model().objects.count())


def test_truncated_archive_is_refused_and_nothing_is_written(tmp_path, exports):
    """An archive cut in half is refused with a plain message; no project, judgement or account
    appears."""
    demo_load()
    path = tmp_path / "demo.zip"
    call_command("archive_project", "--project", "demo", "--out", str(path))
    purge(Project.objects.get(slug="demo"))
    purge_item_answers()
    get_user_model().objects.filter(username="ben").delete()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    state = _state()
    with pytest.raises(CommandError, match="not a complete Concord archive"):
        call_command("restore_project", str(path))
    assert _state() == state


def test_tampered_member_is_refused_and_nothing_is_written(tmp_path, exports):
    """One judgement's choice changed inside a re-packed archive (the manifest left as it was):
    refused, naming the member; nothing restored."""
    demo_load()
    path = tmp_path / "demo.zip"
    call_command("archive_project", "--project", "demo", "--out", str(path))
    purge(Project.objects.get(slug="demo"))
    tampered = tmp_path / "tampered.zip"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tampered, "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            if name == "annotation.judgement.jsonl":
                lines = data.decode().splitlines(keepends=True)
                row = json.loads(lines[0])
                row["choice"] = "b" if row["choice"] != "b" else "a"
                lines[0] = json.dumps(row, sort_keys=True) + "\n"
                data = "".join(lines).encode()
            dst.writestr(name, data)
    state = _state()
    with pytest.raises(
        CommandError, match=r"annotation\.judgement\.jsonl does not match the manifest"
    ):
        call_command("restore_project", str(tampered))
    assert _state() == state


def test_archive_download_is_the_leads_only(client, annotator, exports):
    """An annotator gets 404 for the download (lead pages are not revealed); a lead gets a zip
    attachment named after the project."""
    from tests.factories import UserFactory

    demo_load()
    client.force_login(annotator)
    assert client.get("/annotation/p/demo/settings/archive-file/").status_code == 404
    client.force_login(UserFactory(username="lead2", role="ML engineer"))
    response = client.get("/annotation/p/demo/settings/archive-file/")
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    assert 'filename="demo-' in response["Content-Disposition"]
    body = b"".join(response.streaming_content)
    assert body[:2] == b"PK"


def test_a_file_that_is_not_an_archive_is_refused(tmp_path, exports):
    """A zip without a manifest, and a missing file, each get a plain message."""
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("notes.txt", "hello")
    with pytest.raises(CommandError, match="has no manifest: not a Concord project archive"):
        call_command("restore_project", str(other))
    with pytest.raises(CommandError, match="No archive at"):
        call_command("restore_project", str(tmp_path / "missing.zip"))


def test_a_file_changed_after_its_check_is_rolled_back(tmp_path, exports):
    """The rows are hashed again as they are loaded: a member that no longer matches the checked
    manifest (the file replaced between check and load) rolls the whole restore back."""
    from common.archive import ArchiveError, archive_check
    from common.archive_restore import archive_restore

    demo_load()
    path = tmp_path / "demo.zip"
    call_command("archive_project", "--project", "demo", "--out", str(path))
    manifest = archive_check(path)
    purge(Project.objects.get(slug="demo"))
    with zipfile.ZipFile(path) as src:
        members = {name: src.read(name) for name in src.namelist()}
    members["annotation.comparison.jsonl"] = members["annotation.comparison.jsonl"].replace(
        b'"gold": ""', b'"gold": "a"', 1
    )
    with zipfile.ZipFile(path, "w") as dst:
        for name, data in members.items():
            dst.writestr(name, data)
    state = _state()
    with pytest.raises(ArchiveError, match="changed while it was restored"):
        archive_restore(path, options={"slug": "demo"}, manifest=manifest)
    assert _state() == state and not Comparison.objects.filter(project__slug="demo").exists()
