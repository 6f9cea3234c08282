"""Where ``export_dataset`` writes: under var/exports/SLUG/ unless --out names a place, and then
exactly there (a relative path from the working directory, a folder that exists as that folder)."""

import json

import pytest
from django.core.management import call_command

from annotation.models import DatasetExport
from tests.helpers.annotation_data import project_with_votes

pytestmark = pytest.mark.django_db


def _lines(path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_without_out_the_files_go_under_the_export_folder(tmp_path, settings, capsys):
    """No --out: var/exports/exp/exp-<first 12 hex of the hash>.jsonl and its .judgements.jsonl,
    beside the frozen snapshot folder; the repository root gets nothing."""
    settings.EXPORT_DIR = tmp_path / "exports"
    project_with_votes()
    call_command("export_dataset", "--project", "exp")
    export = DatasetExport.objects.get()
    pairs = tmp_path / "exports" / "exp" / f"exp-{export.sha256[:12]}.jsonl"
    raw = pairs.with_name(f"exp-{export.sha256[:12]}.judgements.jsonl")
    assert (_lines(pairs), _lines(raw)) == (2, 4)
    assert str(pairs) in capsys.readouterr().out


def test_a_relative_out_is_kept_as_given(tmp_path, settings, monkeypatch):
    """--out train.jsonl writes train.jsonl in the working directory, not under var/."""
    settings.EXPORT_DIR = tmp_path / "exports"
    monkeypatch.chdir(tmp_path)
    project_with_votes()
    call_command("export_dataset", "--project", "exp", "--out", "train.jsonl")
    assert (_lines(tmp_path / "train.jsonl"), _lines(tmp_path / "train.judgements.jsonl")) == (2, 4)


def test_an_out_folder_that_exists_gets_the_named_copy(tmp_path, settings):
    settings.EXPORT_DIR = tmp_path / "exports"
    (tmp_path / "mine").mkdir()
    project_with_votes()
    call_command("export_dataset", "--project", "exp", "--out", str(tmp_path / "mine"))
    sha = DatasetExport.objects.get().sha256
    first = json.loads((tmp_path / "mine" / f"exp-{sha[:12]}.jsonl").read_text().splitlines()[0])
    assert first["chosen"] == "good"


def test_hf_without_out_writes_a_dataset_folder_under_exports(tmp_path, settings):
    settings.EXPORT_DIR = tmp_path / "exports"
    project_with_votes()
    call_command("export_dataset", "--project", "exp", "--format", "hf")
    sha = DatasetExport.objects.get().sha256
    folder = tmp_path / "exports" / "exp" / f"exp-{sha[:12]}-hf"
    assert (folder / "README.md").is_file()
    assert sorted(p.name for p in (folder / "data").iterdir()) == [
        "test-00000-of-00001.parquet",
        "train-00000-of-00001.parquet",
    ]
