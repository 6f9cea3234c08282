"""Which checkpoints a human-eval round or a roll back may use: a reward model's never (it answers
no prompt), and only those still on disk (``keep_checkpoints`` prunes older folders while a run
trains). A refusal is a plain sentence and writes nothing; a round whose checkpoint is pruned after
it was created fails with that sentence, not a transformers traceback."""

import re
import shutil
from pathlib import Path

import pytest

from monitoring.models import EvalRound, StopDecision
from monitoring.selectors import runs as selectors
from monitoring.services import eval_rounds as eval_services
from monitoring.services.eval_rounds import EvalError
from tests.helpers.eval_rounds import BASELINE, TINY_SAMPLING, make_round
from training import services
from training.models import Checkpoint

pytestmark = pytest.mark.django_db

GONE = "is no longer on disk (runs keep only their newest keep_checkpoints checkpoints)"


@pytest.fixture
def reward_model_checkpoint(run_with_checkpoints, tmp_path) -> Checkpoint:
    """Step 5 of a reward-model run on the same snapshot, its folder on disk."""
    rm = services.run_create(
        name="rm", kind="rm", base_model=BASELINE, snapshot=run_with_checkpoints.snapshot
    )
    folder = tmp_path / "rm-step-5"
    folder.mkdir()
    return Checkpoint.objects.create(run=rm, step=5, path=str(folder))


def test_round_create_refuses_a_reward_model_checkpoint(
    run_with_checkpoints, reward_model_checkpoint
):
    """The form leaves reward models out, and so does the service behind it: as the checkpoint
    under test or as the baseline, the round is refused with a sentence and nothing is written."""
    project = run_with_checkpoints.snapshot.export.project
    with pytest.raises(EvalError, match=r"is a reward model's: it scores answers but writes none"):
        eval_services.round_create(
            checkpoint=reward_model_checkpoint, project=project, size=4, created_by=None,
            baseline_model=BASELINE, enqueue=False,
        )  # fmt: skip
    with pytest.raises(EvalError, match=r"step 5 of run #\d+ is a reward model's"):
        make_round(
            run_with_checkpoints, baseline_model="", baseline_checkpoint=reward_model_checkpoint
        )
    assert not EvalRound.objects.exists()


def test_a_checkpoint_pruned_from_disk_is_neither_listed_nor_evaluated(run_with_checkpoints):
    """keep_checkpoints removed step 2's folder: the run page's list and the roll-back choices hold
    step 4 only; a round on step 2 and a roll back to it are refused with a sentence naming
    keep_checkpoints, and nothing is written."""
    run = run_with_checkpoints
    pruned = run.checkpoints.get(step=2)
    shutil.rmtree(pruned.path)
    assert [row["step"] for row in selectors.run_checkpoints(run)] == [4]
    assert list(run.checkpoints.on_disk().values_list("step", flat=True)) == [4]
    with pytest.raises(
        EvalError, match=re.escape(f"the checkpoint of step 2 of run #{run.pk} {GONE}")
    ):
        eval_services.round_create(
            checkpoint=pruned, project=run.snapshot.export.project, size=4, created_by=None,
            baseline_model=BASELINE, enqueue=False,
        )  # fmt: skip
    with pytest.raises(EvalError, match=re.escape(GONE)):
        eval_services.decision_record(
            run=run, decision="rollback", reviewer=None, checkpoint=pruned
        )
    assert not EvalRound.objects.exists() and not StopDecision.objects.exists()


def test_a_round_whose_checkpoint_was_pruned_after_creation_fails_with_a_sentence(
    run_with_checkpoints,
):
    """Created while step 4's folder existed, generated after it was removed: the round fails with
    the plain sentence (before: "OSError: Repo id must be in the form ..." from transformers)."""
    round_ = make_round(run_with_checkpoints, sampling=TINY_SAMPLING)
    shutil.rmtree(Path(round_.checkpoint.path))
    eval_services.round_generate(round_id=round_.pk)
    round_.refresh_from_db()
    assert round_.status == "failed"
    step = f"the checkpoint of step 4 of run #{run_with_checkpoints.pk} {GONE}"
    assert round_.error == f"{step}; choose another checkpoint"
