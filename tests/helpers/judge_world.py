"""A small judged world, built here from configs: a tiny byte-level BPE tokenizer with a ChatML
template, a tiny Llama registered as the generative judge model, a tiny reward model as the final
folder of a succeeded reward-model run, and a project of 6 pairs labelled by three people."""

import json
from pathlib import Path

import pytest

from annotation.services.exporting import dataset_export
from annotation.services.importing import comparisons_import, project_get_or_create
from tests.helpers.tiny_models import chatml_tokenizer, tiny_llama
from training.models import TrainingRun
from training.services import snapshot_for

JUDGE_MODEL = "smollm2-135m-instruct"  # the registry name the tiny judge model is saved under
# prompt, response a, response b, the three people's choices (a, b, tie)
ROWS = [
    ("What is 2 + 2?", "4.", "2 + 2 is 22.", "aaa"),
    ("Capital of Italy?", "Rome.", "Milan is the capital.", "aab"),
    ("A synonym for quick?", "Fast.", "Slow.", "aaa"),
    ("Boiling point of water at sea level?", "100 degrees Celsius.", "50 C.", "abt"),
    ("How many days in a week?", "Five.", "Seven days.", "bbb"),
    ("Colour of the sky on a clear day?", "Blue.", "Green, mostly.", "aat"),
]


@pytest.fixture(scope="session")
def judge_tokenizer_dir(tmp_path_factory) -> Path:
    """A ~300-token byte-level BPE tokenizer trained on the rows, <|im_end|> as EOS and pad."""
    corpus = [text for row in ROWS for text in row[:3]] * 4 + ["Response A B [[A]] [[B]] [[C]]"]
    return chatml_tokenizer(tmp_path_factory.mktemp("judge-tokenizer"), corpus, vocab_size=300)


def save_tiny_llama(folder: Path, tokenizer_dir: Path, *, classifier: bool, seed: int) -> Path:
    """A 2-layer Llama (hidden 32) saved with the tokenizer: a causal LM, or a 1-label sequence
    classifier (a reward model); 1024 positions."""
    return tiny_llama(
        folder, tokenizer_dir, seed=seed, for_classification=classifier, max_positions=1024
    )


@pytest.fixture
def judge_models(tmp_path, judge_tokenizer_dir, settings):
    """The tiny causal LM under the registry's SmolLM2 name (CONCORD_MODELS_DIR in tmp)."""
    settings.CONCORD_MODELS_DIR = tmp_path / "models"
    save_tiny_llama(
        tmp_path / "models" / JUDGE_MODEL, judge_tokenizer_dir, classifier=False, seed=0
    )
    return tmp_path / "models"


def rows_jsonl(rows=ROWS) -> list[str]:
    """The rows as Concord JSONL, judged by ann1..ann3."""
    return [
        json.dumps({
            "prompt": prompt, "response_a": a, "response_b": b, "id": f"pair-{k}",
            "judgements": [
                {"annotator": f"ann{r + 1}", "choice": {"t": "tie"}.get(c, c)}
                for r, c in enumerate(choices)
            ],
        })
        for k, (prompt, a, b, choices) in enumerate(rows)
    ]  # fmt: skip


@pytest.fixture
def judged_project(db, tmp_path, settings):
    settings.EXPORT_DIR = tmp_path / "exports"
    project, _ = project_get_or_create(slug="judged", overlap=3)
    comparisons_import(project=project, lines=rows_jsonl())
    return project


@pytest.fixture
def reward_run(judged_project, tmp_path, judge_tokenizer_dir, settings):
    """A succeeded reward-model run of the project whose final folder holds a tiny reward model."""
    settings.CONCORD_RUNS_DIR = tmp_path / "runs"
    output = tmp_path / "runs" / "rm"
    save_tiny_llama(output / "final", judge_tokenizer_dir, classifier=True, seed=1)
    return TrainingRun.objects.create(
        name="tiny rm", kind="rm", base_model=JUDGE_MODEL, status="succeeded",
        snapshot=snapshot_for(export=dataset_export(project=judged_project)), config={},
        output_dir=str(output),
    )  # fmt: skip
