"""Continuous reward modelling (issue #33): the periodic check's debounce and one-run-at-a-time
rule on the real database (tasks called directly), and a retrain's after-run work (learning-curve
point, queue scores, the owed follow-up warm-started from it) with a real tiny ensemble."""

import json

import pytest

from annotation.models import Comparison, LearningCurvePoint, QueueOrder
from annotation.services.importing import comparisons_import, project_get_or_create
from tests.factories import JudgementFactory, UserFactory
from tests.helpers.tiny_models import PAIRS, write_jsonl
from training import tasks
from training.continuous_services import continuous_rm_after_run, continuous_rm_check
from training.models import ContinuousRewardModel, TrainingRun
from training.recipes import RewardModelConfig
from training.recipes.reward_model import train_reward_model

pytestmark = pytest.mark.django_db


@pytest.fixture
def project(tmp_path, settings):
    """The 8 tiny pairs, each judged once (A), continuous RM on every 5 judgements, K = 3."""
    settings.EXPORT_DIR = tmp_path / "exports"
    settings.CONCORD_RUNS_DIR = tmp_path / "runs"
    settings.VAR_DIR = tmp_path
    project, _ = project_get_or_create(slug="continuous")
    rows = [
        {
            "prompt": p,
            "response_a": c,
            "response_b": r,
            "judgements": [{"annotator": "u1", "choice": "a"}],
        }
        for p, c, r in PAIRS
    ]
    comparisons_import(project=project, lines=[json.dumps(row) for row in rows])
    project.continuous_rm = True
    project.continuous_rm_every = 5
    project.continuous_rm_ensemble_size = 3
    project.queue_order = QueueOrder.DISAGREEMENT
    project.save()
    return project


def _judge(project, n: int) -> None:
    """n more judgements, by a new annotator each, on the project's comparisons in turn."""
    comparisons = list(Comparison.objects.filter(project=project).order_by("id"))
    for i in range(n):
        JudgementFactory(comparison=comparisons[i % len(comparisons)], annotator=UserFactory())


def test_the_setting_off_starts_nothing(project):
    project.continuous_rm = False
    project.save()
    assert continuous_rm_check(project=project) == "off"
    assert tasks.continuous_rm_check_all() == {}
    assert not TrainingRun.objects.exists()


def test_a_due_check_starts_one_retrain_and_further_checks_owe_exactly_one_followup(project):
    """8 judgements >= N = 5: the periodic task starts one retrain (kind rm, K = 3 heads, queued).
    Checks right after start nothing (debounce); 5 more judgements while it runs mark one
    follow-up; 10 more still leave one follow-up and one run."""
    assert tasks.continuous_rm_check_all() == {"continuous": "started"}
    run = TrainingRun.objects.get()
    assert run.kind == "rm" and run.status == "queued"
    assert run.config["ensemble_size"] == 3 and run.config["ensemble_mode"] == "heads"
    assert run.config["warm_start"] is None
    state = ContinuousRewardModel.objects.get(project=project)
    assert state.labels_at_last_start == 8 and state.current_run == run and not state.followup
    assert continuous_rm_check(project=project) == "running"
    _judge(project, 4)
    assert continuous_rm_check(project=project) == "running"  # 4 new < 5
    _judge(project, 1)
    assert continuous_rm_check(project=project) == "followup"
    _judge(project, 10)
    assert continuous_rm_check(project=project) == "running"
    assert tasks.continuous_rm_check_all() == {"continuous": "running"}
    assert TrainingRun.objects.count() == 1
    assert ContinuousRewardModel.objects.get(project=project).followup is True


def test_a_check_without_enough_new_judgements_waits(project):
    """After a finished retrain, fewer than N new judgements start nothing."""
    assert continuous_rm_check(project=project) == "started"
    TrainingRun.objects.update(status="failed")
    ContinuousRewardModel.objects.update(current_run=None)
    _judge(project, 4)
    assert continuous_rm_check(project=project) == "waiting"
    _judge(project, 1)
    assert continuous_rm_check(project=project) == "started"
    assert TrainingRun.objects.count() == 2


def test_after_a_retrain_the_curve_the_queue_scores_and_the_warm_started_followup(
    project, tiny_bert_dir, tmp_path
):
    """The retrain's folder holds a real 3-head tiny ensemble (trained here on the 8 pairs, as the
    worker would). After it succeeds: one learning-curve point (8 labels, its held-out accuracy),
    every comparison scored (P(A > B) in [0, 1], disagreement >= 0), and the owed follow-up
    started, warm-started from the retrain's final folder."""
    assert continuous_rm_check(project=project) == "started"
    run = TrainingRun.objects.get()
    _judge(project, 5)
    assert continuous_rm_check(project=project) == "followup"
    pairs = write_jsonl(
        tmp_path / "pairs.jsonl", [{"prompt": p, "chosen": c, "rejected": r} for p, c, r in PAIRS]
    )
    result = train_reward_model(
        RewardModelConfig(
            model=str(tiny_bert_dir),
            data=str(pairs),
            output_dir=run.output_dir,
            ensemble_size=3,
            epochs=2,
            batch_size=4,
            max_length=64,
            learning_rate=1e-2,
            eval_fraction=0.25,
            checkpoint_every=0,
            device="cpu",
        )
    )
    TrainingRun.objects.filter(pk=run.pk).update(status="succeeded", summary=result.summary)
    assert continuous_rm_after_run(run_id=run.pk) == "started"
    point = LearningCurvePoint.objects.get(project=project)
    assert point.run_id == run.pk and point.labels == 8
    assert point.accuracy == pytest.approx(result.summary["eval/accuracy"])
    scored = Comparison.objects.filter(project=project)
    assert all(0.0 <= c.ensemble_preference <= 1.0 for c in scored)
    assert all(c.ensemble_disagreement >= 0.0 for c in scored)
    followup = TrainingRun.objects.exclude(pk=run.pk).get()
    assert followup.config["warm_start"] == f"{run.output_dir}/final"
    state = ContinuousRewardModel.objects.get(project=project)
    assert state.current_run == followup and state.last_succeeded_run == run
    assert not state.followup and state.retrains == 2
