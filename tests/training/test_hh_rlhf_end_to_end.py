"""Real data end to end (issue 22): the Anthropic HH-RLHF harmless pairs (multi-turn conversations)
imported, exported, and trained on with every kind at the defaults for a few steps, from the CLI and
through a Celery worker, to completion. Needs the packaged models, PostgreSQL, Redis and the shared
data (../shared/data beside the repository, or CONCORD_SHARED_DATA); skips without any of them.

Only the step count, the batch sizes and the held-out evaluation size are set; the rest, max_length
512 and max_new_tokens 128 included, are the defaults, so long conversations meet MiniLM's 512
positions as they did in the issue. It is slow on CPU: on 2 cores shared with other test runs the
CLI's rm took 1 min, dpo 3 min and ppo 18 min (sampling 128 tokens); deselect with -m "not slow".
"""

import gzip
import json
import re
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from annotation.exporting import dataset_export
from annotation.services import comparisons_import, project_get_or_create
from tests.agreement.shared_data import DATA_DIR, require
from tests.training.conftest import smollm2_dir
from tests.training.test_runs_worker import Worker, _wait, stack  # noqa: F401 (fixture)
from training import services
from training.models import TrainingRun

pytestmark = [pytest.mark.slow, pytest.mark.services, pytest.mark.django_db(transaction=True)]

HH_FILE = DATA_DIR / "hh-rlhf_harmless-base_test.jsonl.gz"
HH_PAIRS = (
    256  # enough for every kind's held-out split and batches; the test's time is the training
)
TURN = re.compile(r"\n\n(Human|Assistant): ")
STEPS = 2
# Per kind: the few settings changed from the defaults (steps, batch sizes, held-out evaluation).
SETTINGS = {
    "rm": {"max_steps": STEPS, "batch_size": 4},
    "dpo": {"max_steps": STEPS, "batch_size": 2},
    "ppo": {"max_steps": STEPS, "batch_size": 2, "minibatch_size": 2, "eval_prompts": 2},
    "rloo": {"max_steps": STEPS, "batch_size": 2, "eval_prompts": 2},
}
BASE_MODEL = {"rm": "all-minilm-l6-v2", "dpo": "smollm2-135m-instruct"}


def _turns(transcript: str) -> list[dict[str, str]]:
    parts = TURN.split("\n\n" + transcript.lstrip("\n"))
    roles = {"Human": "user", "Assistant": "assistant"}
    return [
        {"role": roles[parts[i]], "content": parts[i + 1].strip()}
        for i in range(1, len(parts) - 1, 2)
    ]


def hh_rlhf_rows(path: Path, limit: int) -> list[dict]:
    """HH-RLHF transcripts as Concord import rows: prompt = the conversation up to the last
    assistant turn, response_a = the chosen last turn, response_b = the rejected one, and the
    crowdworker's label as one judgement. (To be replaced by import_comparisons' own HH reader.)"""
    rows = []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for number, line in enumerate(handle):
            raw = json.loads(line)
            chosen, rejected = _turns(raw["chosen"]), _turns(raw["rejected"])
            if (
                len(chosen) < 2
                or chosen[:-1] != rejected[:-1]
                or chosen[-1] == rejected[-1]
                or not (chosen[-1]["content"] and rejected[-1]["content"])
            ):
                continue  # not one shared conversation with two different, non-empty answers
            rows.append(
                {
                    "id": f"hh-harmless-test-{number}",
                    "prompt": chosen[:-1],
                    "response_a": chosen[-1]["content"],
                    "response_b": rejected[-1]["content"],
                    "judgements": [{"annotator": "hh-crowdworker", "choice": "a", "strength": 1}],
                }
            )
            if len(rows) == limit:
                break
    return rows


@pytest.fixture
def hh_export(stack, settings):  # noqa: F811 (the imported fixture)
    """The first HH_PAIRS usable harmless pairs imported into a project and exported."""
    require(HH_FILE)
    if smollm2_dir() is None:
        pytest.skip("SmolLM2 not fetched (python manage.py fetch_models)")
    settings.CONCORD_MODELS_DIR = Path(settings.BASE_DIR) / "var" / "models"
    stack["CONCORD_MODELS_DIR"] = str(settings.CONCORD_MODELS_DIR)
    project, _ = project_get_or_create(slug="hh-rlhf-harmless")
    rows = hh_rlhf_rows(HH_FILE, HH_PAIRS)
    comparisons_import(project=project, lines=[json.dumps(row) for row in rows])
    export = dataset_export(project=project)
    assert export.n_pairs == HH_PAIRS
    return export


def _cli(kind: str, data: Path, output: Path, reward_model: Path | None = None) -> dict:
    args = ["--kind", kind, "--data", str(data), "--output", str(output)]
    args += ["--model", BASE_MODEL.get(kind, "smollm2-135m-instruct")]
    if reward_model is not None:
        args += ["--reward-model", str(reward_model)]
    for name, value in SETTINGS[kind].items():
        args += ["--set", f"{name}={json.dumps(value)}"]
    out, err = StringIO(), StringIO()
    call_command("train", *args, stdout=out, stderr=err)
    summary = json.loads(out.getvalue().splitlines()[-1])
    assert summary["event"] == "summary" and summary["status"] == "completed", err.getvalue()
    return summary


def test_every_kind_trains_on_hh_rlhf_from_the_cli(hh_export, tmp_path):
    """RM on MiniLM, then DPO, PPO and RLOO on SmolLM2 with that reward model: every run completes;
    the online runs fit the long conversations to MiniLM's 512 positions and say how many."""
    data = Path(hh_export.folder) / "pairs.jsonl"
    rm = _cli("rm", data, tmp_path / "rm")
    assert rm["pairs"] == HH_PAIRS and "pairs_truncated" in rm
    dpo = _cli("dpo", data, tmp_path / "dpo")
    assert dpo["reference_pairs_computed"] <= STEPS * SETTINGS["dpo"]["batch_size"]
    for kind in ("ppo", "rloo"):
        summary = _cli(kind, data, tmp_path / kind, reward_model=tmp_path / "rm" / "final")
        assert summary["samples_truncated"] >= 0 and summary["samples_dropped"] == 0


def test_every_kind_trains_on_hh_rlhf_through_the_worker(hh_export, stack):  # noqa: F811
    """The same four runs launched as the admin launches them, on a real Celery worker."""
    snapshot = services.snapshot_for(export=hh_export)
    worker = Worker(stack)
    worker.start()
    try:
        runs = {}
        for kind in ("rm", "dpo", "ppo", "rloo"):
            run = services.run_create(
                name=f"hh {kind}",
                kind=kind,
                base_model=BASE_MODEL.get(kind, "smollm2-135m-instruct"),
                snapshot=snapshot,
                config=SETTINGS[kind],
                reward_model_run=runs.get("rm"),
            )
            services.run_launch(run=run, user=None)
            runs[kind] = _wait(run, lambda r: r.status in TrainingRun.FINISHED, timeout=1800)
            assert run.status == "succeeded", run.error
            assert run.step == STEPS
    finally:
        worker.stop()
    assert runs["dpo"].summary["reference_pairs_computed"] <= STEPS * 2
    assert "samples_truncated" in runs["rloo"].summary
