"""Real data end to end (issue 22): the Anthropic HH-RLHF harmless pairs (multi-turn conversations)
imported, exported, and trained on with every kind (rm, dpo, simpo, orpo, kto, ppo, rloo, grpo) at
the defaults
for a few steps, from the CLI and through a Celery worker, to completion. Needs the packaged models,
PostgreSQL, Redis and the shared data (../shared/data beside the repository, or
CONCORD_SHARED_DATA); skips without any of them.

Only the step count, the batch sizes and the held-out evaluation size are set; the rest, max_length
512 and max_new_tokens 128 included, are the defaults, so long conversations meet MiniLM's 512
positions as they did in the issue. It is slow on CPU: on 2 cores shared with other test runs the
CLI's rm took 1 min, dpo 3 min and ppo 18 min (sampling 128 tokens), so it runs only when
CONCORD_E2E=1 is set.
"""

import json
import os
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from annotation.models import Project
from annotation.services.exporting import dataset_export
from tests.helpers.shared_data import DATA_DIR, require
from tests.helpers.tiny_models import smollm2_dir
from tests.helpers.worker import Worker, stack  # noqa: F401 (fixture)
from tests.helpers.worker import wait_for_run as _wait
from training import services
from training.models import TrainingRun

pytestmark = [
    pytest.mark.slow,
    pytest.mark.services,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
    # Each test trains eight kinds: an hour each (the suite's 600 s is per ordinary test).
    pytest.mark.timeout(3600),
    # Tens of minutes of CPU (PPO and RLOO sample 128 tokens at the defaults): asked for, not in the
    # default run. `CONCORD_E2E=1 make test PYTEST_ARGS=tests/training/test_hh_rlhf_end_to_end.py`
    pytest.mark.skipif(
        not os.environ.get("CONCORD_E2E"), reason="the HH-RLHF end-to-end run needs CONCORD_E2E=1"
    ),
]

HH_FILE = DATA_DIR / "hh-rlhf_harmless-base_test.jsonl.gz"
HH_PAIRS = 2312  # every pair of the file: import_comparisons' HH-RLHF reader splits each transcript
STEPS = 2
# Per kind: the few settings changed from the defaults (steps, batch sizes, held-out evaluation).
SETTINGS = {
    "rm": {"max_steps": STEPS, "batch_size": 4},
    "dpo": {"max_steps": STEPS, "batch_size": 2},
    "simpo": {"max_steps": STEPS, "batch_size": 2},
    "orpo": {"max_steps": STEPS, "batch_size": 2},
    "kto": {"max_steps": STEPS, "batch_size": 2},
    "ppo": {"max_steps": STEPS, "batch_size": 2, "minibatch_size": 2, "eval_prompts": 2},
    "rloo": {"max_steps": STEPS, "batch_size": 2, "eval_prompts": 2},
    "grpo": {"max_steps": STEPS, "batch_size": 2, "eval_prompts": 2},
}
ONLINE = ("ppo", "rloo", "grpo")  # scored by the reward model trained first
BASE_MODEL = {"rm": "all-minilm-l6-v2", "dpo": "smollm2-135m-instruct"}


@pytest.fixture
def hh_export(stack, settings):  # noqa: F811 (the imported fixture)
    """The whole harmless file imported in its own format (detected) and exported."""
    require(HH_FILE)
    if smollm2_dir() is None:
        pytest.skip("SmolLM2 not fetched (python manage.py fetch_models)")
    settings.CONCORD_MODELS_DIR = Path(settings.BASE_DIR) / "var" / "models"
    stack["CONCORD_MODELS_DIR"] = str(settings.CONCORD_MODELS_DIR)
    out = StringIO()
    call_command("import_comparisons", str(HH_FILE), "--project", "hh-rlhf-harmless", stdout=out)
    assert "hh-rlhf" in out.getvalue()  # the format auto-detection chose
    export = dataset_export(project=Project.objects.get(slug="hh-rlhf-harmless"))
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
    """RM on MiniLM, then DPO, SimPO, ORPO, KTO, PPO, RLOO and GRPO on SmolLM2 (the online three
    with that reward model): every run completes; SimPO and ORPO load no reference model; KTO splits
    each pair into one desirable and one undesirable example; the online runs fit the long
    conversations to MiniLM's 512 positions and say how many."""
    data = Path(hh_export.folder) / "pairs.jsonl"
    rm = _cli("rm", data, tmp_path / "rm")
    assert rm["pairs"] == HH_PAIRS and "pairs_truncated" in rm
    dpo = _cli("dpo", data, tmp_path / "dpo")
    assert dpo["reference_pairs_computed"] <= STEPS * SETTINGS["dpo"]["batch_size"]
    for kind in ("simpo", "orpo"):
        summary = _cli(kind, data, tmp_path / kind)
        assert summary["reference_model"] is None and "pairs_truncated" in summary
        assert summary["pairs_trained"] == STEPS * SETTINGS[kind]["batch_size"]
    kto = _cli("kto", data, tmp_path / "kto")
    assert kto["desirable_examples"] == kto["undesirable_examples"] == kto["examples"] // 2
    assert kto["examples_trained"] == STEPS * SETTINGS["kto"]["batch_size"]
    for kind in ONLINE:
        summary = _cli(kind, data, tmp_path / kind, reward_model=tmp_path / "rm" / "final")
        assert summary["samples_truncated"] >= 0 and summary["samples_dropped"] == 0


def test_every_kind_trains_on_hh_rlhf_through_the_worker(hh_export, stack):  # noqa: F811
    """The same eight runs launched as the admin launches them, on a real Celery worker."""
    snapshot = services.snapshot_for(export=hh_export)
    worker = Worker(stack)
    worker.start()
    try:
        runs = {}
        for kind in ("rm", "dpo", "simpo", "orpo", "kto", *ONLINE):
            run = services.run_create(
                name=f"hh {kind}",
                kind=kind,
                base_model=BASE_MODEL.get(kind, "smollm2-135m-instruct"),
                snapshot=snapshot,
                config=SETTINGS[kind],
                reward_model_run=runs["rm"] if kind in ONLINE else None,
            )
            services.run_launch(run=run, user=None)
            runs[kind] = _wait(run, lambda r: r.status in TrainingRun.FINISHED, timeout=1800)
            assert run.status == "succeeded", run.error
            assert run.step == STEPS
    finally:
        worker.stop()
    assert runs["dpo"].summary["reference_pairs_computed"] <= STEPS * 2
    for kind in ("simpo", "orpo"):
        assert runs[kind].summary["reference_model"] is None
        assert runs[kind].summary["pairs_trained"] == STEPS * 2
    assert runs["kto"].summary["examples_trained"] == STEPS * 2
    for kind in ONLINE:
        assert "samples_truncated" in runs[kind].summary
