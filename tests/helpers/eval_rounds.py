"""A run with two checkpoints (tiny Llamas), a baseline model in the registry, a project of 8 held-out
prompts (and the 2 the run trained on), and three reviewers: enough for a round's whole life on CPU."""

import json

import pytest

from annotation.services.exporting import dataset_export
from annotation.services.importing import comparisons_import, project_get_or_create
from common.roles import REVIEWER
from monitoring.models import EvalItem, EvalRound
from monitoring.services import eval_rounds as eval_services
from monitoring.tasks import stopping_panel_refresh
from tests.factories import UserFactory
from tests.helpers import tiny_models
from tests.helpers.tiny_models import PAIRS, tiny_llama
from training import services
from training.models import Checkpoint, TrainingRun

BASELINE = "smollm2-135m-instruct"
tiny_tokenizer_dir = tiny_models.tiny_tokenizer_dir  # the session fixture, shared
# The run's training data: two labelled pairs of the project, exported before the PAIRS came.
TRAINED_PAIRS = [
    {"prompt": "Trained on: name a fruit.", "response_a": "Apple.", "response_b": "Rock.",
     "judgements": [{"annotator": "tess", "choice": "a"}]},
    {"prompt": "Trained on: name a month.", "response_a": "May.", "response_b": "Blue.",
     "judgements": [{"annotator": "tess", "choice": "a"}]},
]  # fmt: skip


@pytest.fixture
def models_dir(tmp_path_factory, tiny_tokenizer_dir, settings):
    """A models folder whose baseline is a tiny 2-layer Llama (seed 0)."""
    folder = tmp_path_factory.mktemp("models")
    tiny_llama(folder / BASELINE, tiny_tokenizer_dir)
    settings.CONCORD_MODELS_DIR = folder
    return folder


@pytest.fixture
def run_with_checkpoints(db, tmp_path, settings, tiny_tokenizer_dir, models_dir):
    """A running DPO run with checkpoints at steps 2 and 4 (different tiny weights). It trained
    on TRAINED_PAIRS (labelled and exported first); the 8 PAIRS came into the project after the
    export: held out, the prompts rounds draw from."""
    settings.EXPORT_DIR = tmp_path / "exports"
    settings.CONCORD_RUNS_DIR = tmp_path / "runs"
    settings.VAR_DIR = tmp_path
    project, _ = project_get_or_create(slug="eval")
    comparisons_import(project=project, lines=[json.dumps(r) for r in TRAINED_PAIRS])
    snapshot = services.snapshot_for(export=dataset_export(project=project))
    rows = [{"prompt": p, "response_a": c, "response_b": r} for p, c, r in PAIRS]
    comparisons_import(project=project, lines=[json.dumps(r) for r in rows])
    run = services.run_create(
        name="tiny", kind="dpo", base_model=BASELINE, snapshot=snapshot,
        config={"max_steps": 4}, created_by=None,
    )  # fmt: skip
    TrainingRun.objects.filter(pk=run.pk).update(status=TrainingRun.Status.RUNNING)
    run.refresh_from_db()
    for step, seed in ((2, 1), (4, 2)):
        folder = tiny_llama(tmp_path / f"ckpt-{step}", tiny_tokenizer_dir, seed=seed)
        Checkpoint.objects.create(run=run, step=step, path=str(folder), metrics={})
    return run


@pytest.fixture
def queued(monkeypatch):
    """The stopping-panel task the services ask for (ratings, metric points), recorded instead of
    sent to the broker: one dict of ``apply_async``'s arguments per call."""
    calls: list[dict] = []
    monkeypatch.setattr(
        stopping_panel_refresh, "apply_async", lambda **kwargs: calls.append(kwargs)
    )
    return calls


@pytest.fixture
def reviewers(db):
    return [UserFactory(username=f"rev{k}", role=REVIEWER) for k in range(4)]


def hand_written_round(run, *, step: int = 4) -> EvalRound:
    """A round of 4 items on ``run``'s checkpoint at ``step``, open for ratings without
    generation: hand-written answers that differ ("**CKPT** answer <position>" against "BASE
    answer"; identical ones would never be shown), 8 and 4 tokens long."""
    round_ = eval_services.round_create(
        checkpoint=run.checkpoints.get(step=step), project=run.snapshot.export.project, size=4,
        created_by=None, baseline_model=BASELINE, enqueue=False,
    )  # fmt: skip
    for item in round_.items.all():
        EvalItem.objects.filter(pk=item.pk).update(
            checkpoint_text=f"**CKPT** answer {item.position}", baseline_text="BASE answer",
            checkpoint_tokens=8, baseline_tokens=4,
        )  # fmt: skip
    EvalRound.objects.filter(pk=round_.pk).update(status="open")
    round_.refresh_from_db()
    return round_


@pytest.fixture
def open_round(run_with_checkpoints):
    """``hand_written_round`` on the checkpoint at step 4."""
    return hand_written_round(run_with_checkpoints)


TINY_SAMPLING = {"max_new_tokens": 6, "temperature": 1.0, "seed": 0}


def make_round(run, **kwargs) -> EvalRound:
    checkpoint = run.checkpoints.get(step=4)
    args = {"project": run.snapshot.export.project, "size": 4, "created_by": None,
            "baseline_model": BASELINE, "sampling": TINY_SAMPLING, "enqueue": False}  # fmt: skip
    return eval_services.round_create(checkpoint=checkpoint, **{**args, **kwargs})


def hand_rated_round(
    run, reviewers, *, step: int = 4, usefulness: int = 4, baseline_wins: bool = False
) -> EvalRound:
    """An open round of 4 hand-written items (answers that differ), rated by three reviewers:
    the checkpoint wins every item but the first (a tie); with ``baseline_wins`` the base model
    wins every item."""
    round_ = hand_written_round(run, step=step)
    for reviewer in reviewers[:3]:
        while a := eval_services.eval_claim_next(reviewer=reviewer, round_=round_):
            mine = "left" if a.shown_left == "checkpoint" else "right"
            pick = "tie" if a.item.position == 0 else mine
            if baseline_wins:
                pick = "right" if mine == "left" else "left"
            eval_services.eval_submit(
                assignment=a, reviewer=reviewer, pick=pick, usefulness=usefulness
            )
    return round_
