"""The Hugging Face export: Parquet train/test split by prompt, a dataset card, loadable by datasets."""

import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from annotation.models import Prompt
from annotation.services.hf_export import prompts_for_test_split
from annotation.services.importing import comparisons_import, project_get_or_create

pytestmark = pytest.mark.django_db
datasets = pytest.importorskip("datasets")


@pytest.fixture(autouse=True)
def _export_dir(settings, tmp_path):
    settings.EXPORT_DIR = tmp_path / "exports"


def _rows(n_prompts: int, *, conversational: bool) -> list[str]:
    """Two comparisons per prompt, each judged by three annotators with a majority for a."""
    lines = []
    for p in range(n_prompts):
        text = f"Question {p}?"
        prompt = [{"role": "user", "content": text}] if conversational and p % 2 else text
        for k in range(2):
            lines.append(
                json.dumps(
                    {
                        "id": f"{p}-{k}",
                        "prompt": prompt,
                        "response_a": f"good {p}.{k}",
                        "response_b": "" if k else f"bad {p}",
                        "judgements": [
                            {"annotator": "ann1", "choice": "a", "strength": 2},
                            {"annotator": "ann2", "choice": "a"},
                            {"annotator": "ann3", "choice": "a" if p % 5 else "b"},
                        ],
                    }
                )
            )
    return lines


def _export(tmp_path: Path, slug: str, *args: str) -> Path:
    out = tmp_path / f"{slug}-hf"
    call_command("export_dataset", "--project", slug, "--format", "hf", "--out", str(out), *args)
    return out


def _load(folder: Path, tmp_path: Path):
    return datasets.load_dataset(str(folder), cache_dir=str(tmp_path / "hf-cache"))


def test_hf_export_loads_with_datasets_and_splits_by_prompt(tmp_path, capsys):
    project = project_get_or_create(slug="hf", guidelines="Prefer the correct answer.")[0]
    comparisons_import(project=project, lines=_rows(40, conversational=True))
    for index, prompt in enumerate(Prompt.objects.order_by("pk")):
        prompt.cluster = index % 3
        prompt.save(update_fields=["cluster"])
    out = _export(tmp_path, "hf", "--test-fraction", "0.25", "--license", "cc-by-4.0")
    assert "train 60 rows, test 20 rows" in capsys.readouterr().out
    loaded = _load(out, tmp_path)
    assert {name: len(split) for name, split in loaded.items()} == {"train": 60, "test": 20}
    train_prompts = {json.dumps(r["prompt"]) for r in loaded["train"]}
    test_prompts = {json.dumps(r["prompt"]) for r in loaded["test"]}
    assert not train_prompts & test_prompts and len(test_prompts) == 10
    # stratified: clusters of 14, 13 and 13 prompts send round(a quarter) = 4, 3, 3 to test
    assert sorted(r["cluster"] for r in loaded["test"]) == [0] * 8 + [1] * 6 + [2] * 6
    row = loaded["train"][0]
    # TRL's conversational preference format: prompt turns, chosen/rejected the assistant's reply
    assert row["prompt"][-1]["role"] == "user"
    assert [turn["role"] for turn in row["chosen"]] == ["assistant"]
    assert [turn["role"] for turn in row["rejected"]] == ["assistant"]
    assert {"margin", "agreement", "comparison_id", "model_chosen"} <= set(row)


def test_hf_export_of_text_prompts_is_trl_standard_format(tmp_path):
    project = project_get_or_create(slug="plain")[0]
    comparisons_import(project=project, lines=_rows(6, conversational=False))
    out = _export(tmp_path, "plain")
    loaded = _load(out, tmp_path)
    row = loaded["train"][0]
    assert all(isinstance(row[k], str) for k in ("prompt", "chosen", "rejected"))
    try:
        from trl.data_utils import is_conversational
    except ImportError:
        return
    assert not is_conversational(row)


def test_dataset_card_has_yaml_metadata_and_the_summary(tmp_path):
    project = project_get_or_create(slug="card", guidelines="Be kind.")[0]
    comparisons_import(project=project, lines=_rows(10, conversational=False))
    out = _export(tmp_path, "card", "--license", "apache-2.0")
    card = (out / "README.md").read_text()
    front, body = card.split("---\n")[1], card.split("---\n", 2)[2]
    assert "license: apache-2.0" in front and "- n<1K" in front
    assert "- split: train\n    path: data/train-*.parquet" in front
    assert "- split: test\n    path: data/test-*.parquet" in front
    from annotation.models import DatasetExport

    export = DatasetExport.objects.get()
    assert f"Export hash: `{export.sha256}`" in body
    assert "by 3 annotators; overlap 3" in body
    assert "Consensus rule: majority" in body
    assert "Guidelines version: `" in body
    assert "fleiss kappa:" in body and "95% bootstrap interval" in body
    assert "Cohen's kappa, ann1 and ann2:" in body


def _fleiss_line(out: Path) -> str:
    card = (out / "README.md").read_text()
    return next(line for line in card.splitlines() if line.startswith("- fleiss kappa:"))


def test_card_reads_the_dashboards_report_while_it_matches_the_judgements(tmp_path):
    from django.core.cache import cache

    from annotation.selectors.agreement import dashboard_cache_key
    from annotation.services.agreement import dashboard_refresh

    project = project_get_or_create(slug="stored")[0]
    comparisons_import(project=project, lines=_rows(10, conversational=False))
    computed = _fleiss_line(_export(tmp_path, "stored"))  # no report stored: computed for the card
    payload = dashboard_refresh(project=project, n_boot=50, pair_boot=0)
    assert _fleiss_line(_export(tmp_path, "stored")) == computed.split(" (")[0] + (
        " (95% bootstrap interval {:.3f} to {:.3f})".format(
            *payload["summary"]["intervals"]["fleiss_kappa"]
        )
    )
    # A stored figure nobody computed shows that the card read the stored report.
    payload["summary"]["fleiss_kappa"] = 0.123
    cache.set(dashboard_cache_key(project), payload)
    assert _fleiss_line(_export(tmp_path, "stored")).startswith("- fleiss kappa: 0.123 (")
    # A new judgement makes the stored report stale: the card computes its own again.
    comparisons_import(
        project=project,
        lines=[json.dumps({"id": "new", "prompt": "New?", "response_a": "x", "response_b": "y",
                           "judgements": [{"annotator": "ann1", "choice": "b"}]})],
    )  # fmt: skip
    assert not _fleiss_line(_export(tmp_path, "stored")).startswith("- fleiss kappa: 0.123")


def test_bad_licence_is_refused(tmp_path):
    project = project_get_or_create(slug="lic")[0]
    comparisons_import(project=project, lines=_rows(2, conversational=False))
    with pytest.raises(CommandError, match="license must be one SPDX-style identifier"):
        _export(tmp_path, "lic", "--license", "all rights reserved")


def test_split_keeps_every_cluster_in_train_and_is_deterministic():
    prompts = {f"{i:064x}": i % 2 for i in range(20)} | {"f" * 64: None}
    chosen = prompts_for_test_split(prompts, test_fraction=0.2)
    assert len(chosen) == 4 and chosen == prompts_for_test_split(prompts, test_fraction=0.2)
    assert sorted(prompts[k] for k in chosen) == [0, 0, 1, 1]
    assert prompts_for_test_split(prompts, test_fraction=0.0) == set()
    with pytest.raises(ValueError, match="test_fraction must be in"):
        prompts_for_test_split(prompts, test_fraction=1.0)


@pytest.mark.parametrize(
    "prompt",
    [
        'say "hi" \\ é 日本\n\x01',
        [{"role": "user", "content": "z é"}, {"content": "x", "role": "a"}],
    ],
)
def test_a_prompts_key_is_the_sha256_of_its_sorted_json(prompt):
    """The split depends on these keys: a text or a message list hashes as
    ``json.dumps(prompt, sort_keys=True, ensure_ascii=False)`` always did."""
    import hashlib

    from annotation.services.hf_export import _prompt_key

    text = json.dumps(prompt, sort_keys=True, ensure_ascii=False)
    assert _prompt_key(prompt) == hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_lead_page_downloads_the_hf_dataset_as_a_zip(tmp_path, ml_engineer):
    """The first ask for the zip queues the job that builds it on the worker (run here by hand)
    and shows its page; then the same link serves the zip."""
    import io
    import zipfile

    from django.urls import reverse

    from annotation.models import ExportJob
    from annotation.services.export_jobs import export_job_run
    from annotation.services.exporting import dataset_export
    from tests.helpers.clients import logged_in

    project = project_get_or_create(slug="zipped")[0]
    comparisons_import(project=project, lines=_rows(6, conversational=False))
    export = dataset_export(project=project)
    client = logged_in(ml_engineer)
    page = client.get(reverse("annotation:project-manage", args=["zipped"])).content.decode()
    url = reverse("annotation:export-download", args=["zipped", export.sha256, "hf"])
    assert url in page
    job = ExportJob.objects.get(pk=client.get(url)["Location"].rstrip("/").rsplit("/", 1)[-1])
    assert export_job_run(job_id=job.pk).status == "succeeded"
    response = client.get(url)
    assert response.status_code == 200
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    assert sorted(archive.namelist()) == [
        "README.md",
        "data/test-00000-of-00001.parquet",
        "data/train-00000-of-00001.parquet",
    ]
    archive.extractall(tmp_path / "unzipped")
    loaded = _load(tmp_path / "unzipped", tmp_path)
    assert len(loaded["train"]) + len(loaded["test"]) == export.n_pairs
