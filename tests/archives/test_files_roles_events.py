"""What a project archive carries beside the rows: the exports' files (written back under the new
instance's export folder and checked against the export's hash), the accounts' roles and the
members' roles, and the ids inside audit events (mapped to the restored ids)."""

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from annotation.demo import demo_load
from annotation.models import Comparison, DatasetExport, Judgement, Project, ProjectEvent
from annotation.services.exporting import dataset_export, export_folder_sha256
from common.roles import ANNOTATOR, user_roles
from tests.helpers.archives import add_training_and_eval, measures, purge, purge_item_answers
from training.models import TrainingRun

pytestmark = pytest.mark.django_db


@pytest.fixture
def exports(tmp_path, settings):
    settings.EXPORT_DIR = tmp_path / "exports"
    return settings


def _archive(tmp_path: Path, slug: str = "demo") -> Path:
    path = tmp_path / f"{slug}.zip"
    call_command("archive_project", "--project", slug, "--out", str(path))
    return path


def _state() -> tuple[int, int, int, int]:
    return (
        Project.objects.count(),
        Judgement.objects.count(),
        get_user_model().objects.count(),
        DatasetExport.objects.count(),
    )


def _repack(source: Path, out: Path, name: str, data: bytes, *, extra: dict | None = None) -> None:
    """Copy the archive with member ``name`` replaced by ``data`` and the manifest updated to
    match (a consistent forgery: the member checks pass, only the content is wrong); ``extra``
    adds a manifest entry for a new member holding ``data``."""
    with zipfile.ZipFile(source) as src:
        manifest = json.loads(src.read("manifest.json"))
        entry = {
            "rows": data.count(b"\n"),
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
        if extra is not None:
            manifest["members"].append({**extra, **entry})
        else:
            next(m for m in manifest["members"] if m["name"] == name).update(entry)
        with zipfile.ZipFile(out, "w") as dst:
            for member in src.namelist():
                if member != "manifest.json":
                    dst.writestr(member, data if member == name else src.read(member))
            if extra is not None:
                dst.writestr(name, data)
            dst.writestr("manifest.json", json.dumps(manifest))


def test_restored_exports_get_their_files_on_the_new_instance(tmp_path, exports):
    """Archived here, restored where EXPORT_DIR is another (empty) folder: the export's files are
    written under EXPORT_DIR/demo/<sha256>/, hash to the export, and the restored run's training
    data path names a file that exists; the agreement report, consensus and export hash are the
    original's."""
    demo_load()
    project = Project.objects.get(slug="demo")
    add_training_and_eval(project)
    before = measures(project)
    sha = DatasetExport.objects.get(project=project).sha256
    path = _archive(tmp_path)
    purge(project)
    exports.EXPORT_DIR = tmp_path / "another-instance"
    call_command("restore_project", str(path))
    restored = Project.objects.get(slug="demo")
    export = DatasetExport.objects.get(project=restored)
    folder = Path(export.folder)
    assert folder == tmp_path / "another-instance" / "demo" / sha
    assert sorted(p.name for p in folder.iterdir()) == [
        "judgements.jsonl",
        "manifest.json",
        "pairs.jsonl",
    ]
    assert export_folder_sha256(folder) == export.sha256 == sha
    run = TrainingRun.objects.get(snapshot__export=export, name="rm")
    assert (Path(run.snapshot.export.folder) / "pairs.jsonl").is_file()  # the run's training data
    assert measures(restored) == before


def test_an_export_whose_files_are_gone_is_not_archived(tmp_path, exports):
    """The export's folder was deleted: archiving refuses, naming the export and the folder,
    instead of writing an archive whose export would name nothing."""
    demo_load()
    export = dataset_export(project=Project.objects.get(slug="demo"))
    shutil.rmtree(export.folder)
    with pytest.raises(CommandError, match=r"annotation\.DatasetExport \d+ names the folder"):
        _archive(tmp_path)


def test_export_files_that_do_not_hash_to_the_export_are_refused_and_nothing_is_written(
    tmp_path, exports
):
    """A forged archive whose pairs file was changed (and the manifest made to match): the
    restore refuses, since the files no longer hash to the export, and leaves no row and no
    folder behind."""
    demo_load()
    project = Project.objects.get(slug="demo")
    export = dataset_export(project=project)
    path = _archive(tmp_path)
    purge(project)
    exports.EXPORT_DIR = tmp_path / "another-instance"
    name = f"files/annotation.datasetexport/{export.pk}/pairs.jsonl"
    with zipfile.ZipFile(path) as zf:
        pairs = zf.read(name)
    forged = tmp_path / "forged.zip"
    _repack(path, forged, name, pairs.replace(b'"chosen_side": "a"', b'"chosen_side": "b"', 1))
    state = _state()
    with pytest.raises(CommandError, match="do not hash to it"):
        call_command("restore_project", str(forged))
    assert _state() == state
    assert not any((tmp_path / "another-instance").rglob("*.jsonl"))


def test_a_carried_file_with_a_path_in_its_name_is_refused(tmp_path, exports):
    """A manifest entry for a file whose name climbs out of its folder is refused before anything
    is written."""
    demo_load()
    project = Project.objects.get(slug="demo")
    export = dataset_export(project=project)
    path = _archive(tmp_path)
    purge(project)
    forged = tmp_path / "forged.zip"
    evil = f"files/annotation.datasetexport/{export.pk}/../../../evil.sh"
    owner = {"name": evil, "model": "files", "owner": "annotation.DatasetExport", "pk": export.pk}
    _repack(path, forged, evil, b"echo owned\n", extra=owner)
    state = _state()
    with pytest.raises(CommandError, match="belongs to no archived row"):
        call_command("restore_project", str(forged))
    assert _state() == state


def test_accounts_come_back_with_their_roles_and_members_with_their_role(tmp_path, exports):
    """The demo's members, deleted from this instance, come back inactive with the roles they had;
    memberships (role, paused) are equal; a member whose account is still here but lacks the role
    their membership needs is given it."""
    demo_load()
    project = Project.objects.get(slug="demo")
    memberships = sorted(project.memberships.values_list("user__username", "role", "paused_at"))
    usernames = [username for username, _, _ in memberships]
    users = get_user_model().objects.filter(username__in=usernames)
    roles = {user.username: user_roles(user) for user in users}
    kept, *gone = usernames
    path = _archive(tmp_path)
    purge(project)
    purge_item_answers()
    get_user_model().objects.filter(username__in=gone).delete()
    get_user_model().objects.get(username=kept).groups.clear()
    call_command("restore_project", str(path))
    restored = Project.objects.get(slug="demo")
    assert (
        sorted(restored.memberships.values_list("user__username", "role", "paused_at"))
        == memberships
    )
    for user in get_user_model().objects.filter(username__in=gone):
        assert not user.is_active and not user.has_usable_password()
        assert user_roles(user) == set(), "inactive accounts hold no role until activated"
        user.is_active = True
        assert user_roles(user) == roles[user.username]
    assert ANNOTATOR in user_roles(get_user_model().objects.get(username=kept))


def test_ids_inside_event_payloads_point_at_the_restored_rows(tmp_path, exports):
    """An audit event naming comparisons, an export and (nested) a prompt, restored beside the
    original (new keys): its ids name the copy's rows; other numbers are left alone."""
    demo_load()
    project = Project.objects.get(slug="demo")
    export = dataset_export(project=project)
    comparisons = list(Comparison.objects.filter(project=project).order_by("pk")[:2])
    ProjectEvent.objects.create(
        project=project,
        kind="edited",
        changes={
            "comparison_ids": [c.pk for c in comparisons],
            "export_id": export.pk,
            "gold": {"prompt_id": comparisons[0].prompt_id, "count": 2},
            "overlap": {"before": 1, "after": 3},
        },
    )
    path = _archive(tmp_path)
    DatasetExport.objects.filter(pk=export.pk).update(sha256="0" * 64)  # the copy's must not clash
    call_command("restore_project", str(path), "--as", "demo-copy")
    copy = Project.objects.get(slug="demo-copy")
    event = ProjectEvent.objects.get(project=copy, changes__has_key="comparison_ids")
    by_external = dict(Comparison.objects.filter(project=copy).values_list("external_id", "pk"))
    copied = [by_external[c.external_id] for c in comparisons]
    copied_prompt = Comparison.objects.get(pk=copied[0]).prompt_id
    assert event.changes == {
        "comparison_ids": copied,
        "export_id": DatasetExport.objects.get(project=copy).pk,
        "gold": {"prompt_id": copied_prompt, "count": 2},
        "overlap": {"before": 1, "after": 3},
    }
    assert set(copied).isdisjoint(c.pk for c in comparisons)
