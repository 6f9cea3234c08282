"""Reference answers travel from an import to the export and on to GRPO's answer-checking rewards.

A prompt imported with an ``answer`` (or ``metadata.answer``) keeps it in ``Prompt.metadata``; each
exported pairs.jsonl row of that prompt carries it as ``answer`` (rows of prompts without one have no
such key, as before), the Parquet export as an ``answer`` column (null where none), and GRPO reads it
from the exported file as from a hand-written prompts file.
"""

import json
from pathlib import Path

import pytest
from django.core.management import call_command

from annotation.models import DatasetExport, Prompt
from annotation.services.exporting import dataset_export
from annotation.services.importing import comparisons_import, project_get_or_create

pytestmark = pytest.mark.django_db

# The export's pairs fields before answers existed: a row without an answer has exactly these.
PAIR_FIELDS = {
    "prompt", "chosen", "rejected", "margin", "consensus", "n_judgements", "agreement",
    "comparison_id", "chosen_side", "cluster", "external_id", "model_chosen", "model_rejected", "tie",
}  # fmt: skip
SEVEN = (("user", "What is 7 x 6?"),)
NINE = (("system", "Be brief."), ("user", "What is 9 x 8?"))
VOTES = [{"annotator": "ann1", "choice": "a"}, {"annotator": "ann2", "choice": "a"}]


@pytest.fixture(autouse=True)
def _export_dir(settings, tmp_path):
    settings.EXPORT_DIR = tmp_path / "exports"


def _maths_file(tmp_path: Path, *, unanswered: bool = True) -> Path:
    """Four comparisons on three prompts: "7 x 6?" with a top-level answer (on one of its two
    rows), a conversation with ``metadata.answer`` given as a number, and (``unanswered``) one
    prompt without an answer."""
    rows = [
        {"prompt": "What is 7 x 6?", "response_a": "#### 42", "response_b": "#### 40",
         "answer": "42", "judgements": VOTES},
        {"prompt": "What is 7 x 6?", "response_a": "It is 42.", "response_b": "#### 48",
         "judgements": VOTES},
        {"prompt": [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "What is 9 x 8?"}],
         "response_a": "#### 72", "response_b": "#### 71", "metadata": {"answer": 72},
         "judgements": VOTES},
        {"prompt": "Name a colour.", "response_a": "Blue.", "response_b": "Seven.",
         "judgements": VOTES},
    ][: 4 if unanswered else 3]  # fmt: skip
    path = tmp_path / "maths.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _grpo_config(data: Path, tmp_path: Path, rewards: tuple[str, ...] = ("exact_answer",)):
    from training.recipes.config import GRPOConfig

    return GRPOConfig(
        model=str(tmp_path / "no-model"), data=str(data), output_dir=str(tmp_path / "run"),
        rewards=rewards, kl_coef=0.0, device="cpu",
    )  # fmt: skip


def test_imported_answers_reach_the_export(tmp_path):
    """import_comparisons -> export_dataset: every exported row of an answered prompt carries its
    answer as text ("72" from the number 72), the row of the prompt without one has no ``answer``;
    GRPO's loader maps each answered prompt to its answer, and exact_answer, which needs every
    prompt's, stops the run counting the one prompt (of three) without."""
    from training.recipes.config import ConfigError
    from training.recipes.data import load_prompt_answers
    from training.recipes.grpo import grpo_rewards

    call_command("import_comparisons", str(_maths_file(tmp_path)), "--project", "maths")
    assert Prompt.objects.get(text="What is 7 x 6?").metadata == {"answer": "42"}
    out = tmp_path / "train.jsonl"
    call_command("export_dataset", "--project", "maths", "--out", str(out))
    rows = _read(out)
    assert [row.get("answer") for row in rows] == ["42", "42", "72", None]
    assert set(rows[0]) == PAIR_FIELDS | {"answer"} and set(rows[3]) == PAIR_FIELDS
    assert load_prompt_answers(out) == {SEVEN: "42", NINE: "72"}
    with pytest.raises(ConfigError, match="1 of the data's 3 prompts have no 'answer' field"):
        grpo_rewards(_grpo_config(out, tmp_path))


def test_grpo_scores_an_exported_snapshot_with_exact_answer(tmp_path):
    """Every prompt answered: GRPO's reward set-up accepts the export's pairs.jsonl (the file a
    training run's snapshot names), and exact_answer scores a completion against each prompt's
    answer: "#### 42" on 7 x 6 and "#### 72" on 9 x 8 are right (1), "#### 42" on 9 x 8 wrong (0)."""
    from training.algorithms.rewards import combine
    from training.recipes.grpo import grpo_rewards

    path = _maths_file(tmp_path, unanswered=False)
    call_command("import_comparisons", str(path), "--project", "maths")
    export = dataset_export(project=Prompt.objects.first().project)
    rewards = grpo_rewards(_grpo_config(Path(export.folder) / "pairs.jsonl", tmp_path))
    assert rewards.answers == {SEVEN: "42", NINE: "72"}
    scored = combine(
        rewards.components, rewards.weights, ["#### 42", "#### 72", "#### 42"],
        answers=[rewards.answers[SEVEN], rewards.answers[NINE], rewards.answers[NINE]],
    )  # fmt: skip
    assert scored.total == [1.0, 1.0, 0.0]


def test_an_export_without_answers_is_unchanged(tmp_path):
    """No answers imported: the rows have the fields they always had (no ``answer`` key, so the
    hash of the same content is the same as before) and exact_answer stops the run naming the
    prompts that lack one, as for a hand-written file without answers."""
    from training.recipes.config import ConfigError
    from training.recipes.grpo import grpo_rewards

    project = project_get_or_create(slug="plain")[0]
    rows = [{"prompt": f"Say {n}.", "response_a": f"{n}", "response_b": "no", "judgements": VOTES}
            for n in range(3)]  # fmt: skip
    comparisons_import(project=project, lines=[json.dumps(row) for row in rows])
    export = dataset_export(project=project)
    pairs = Path(export.folder) / "pairs.jsonl"
    assert all(set(row) == PAIR_FIELDS for row in _read(pairs))
    with pytest.raises(ConfigError, match="3 of the data's 3 prompts have no 'answer' field"):
        grpo_rewards(_grpo_config(pairs, tmp_path))


def test_hf_export_has_an_answer_column(tmp_path):
    """The Parquet splits carry ``answer`` (null for the prompt without one) and the card lists it."""
    pq = pytest.importorskip("pyarrow.parquet")
    call_command("import_comparisons", str(_maths_file(tmp_path)), "--project", "maths")
    out = tmp_path / "maths-hf"
    call_command(
        "export_dataset", "--project", "maths", "--format", "hf", "--out", str(out),
        "--test-fraction", "0",
    )  # fmt: skip
    table = pq.read_table(out / "data" / "train-00000-of-00001.parquet")
    assert str(table.schema.field("answer").type) == "string"
    assert table.column("answer").to_pylist() == ["42", "42", "72", None]
    assert "`answer` (the prompt's reference answer" in (out / "README.md").read_text()


def test_an_unusable_stored_answer_stops_the_export_and_writes_nothing(tmp_path):
    """A prompt whose metadata.answer was edited into a list (not through the import, which refuses
    it): the export fails naming the prompt, and leaves neither a snapshot row nor a folder."""
    call_command("import_comparisons", str(_maths_file(tmp_path)), "--project", "maths")
    prompt = Prompt.objects.get(text="Name a colour.")
    prompt.metadata = {"answer": ["blue", "red"]}
    prompt.save(update_fields=["metadata"])
    project = prompt.project
    with pytest.raises(ValueError, match=rf"prompt {prompt.pk}: metadata.answer must be a text"):
        dataset_export(project=project)
    assert not DatasetExport.objects.exists()
    assert [p.name for p in (tmp_path / "exports" / "maths").iterdir()] == []


def test_lead_page_and_api_report_an_unusable_stored_answer(tmp_path, ml_engineer):
    """The same bad stored answer through the lead's page (the export job, run by the worker,
    fails with the error, which its page shows) and the API (400 naming the prompt): no export
    either way."""
    from django.urls import reverse

    from annotation.services.export_jobs import export_job_run
    from tests.helpers.clients import logged_in

    call_command("import_comparisons", str(_maths_file(tmp_path)), "--project", "maths")
    prompt = Prompt.objects.get(text="Name a colour.")
    prompt.metadata = {"answer": True}
    prompt.save(update_fields=["metadata"])
    prompt.project.members.add(ml_engineer)
    client = logged_in(ml_engineer)
    queued = client.post(reverse("annotation:export-create", args=["maths"]))
    job_id = int(queued["Location"].rstrip("/").rsplit("/", 1)[-1])
    assert export_job_run(job_id=job_id).status == "failed"
    page = client.get(queued["Location"]).content.decode()
    assert f"prompt {prompt.pk}: metadata.answer must be a text" in page
    api = client.post(
        reverse("api-export-create", args=["maths"]), {}, content_type="application/json"
    )
    assert api.status_code == 400
    assert f"prompt {prompt.pk}: metadata.answer" in api.json()["detail"][0]
    assert not DatasetExport.objects.exists()
