"""Training runs: validated creation, launch/cancel/resume/clone with audit, the worker's claim,
metrics, checkpoints and heartbeat, the reaper, alerts, the launcher command, admin and pages."""

import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from monitoring.alerts import evaluate_metrics
from monitoring.models import Alert
from tests.factories import snapshot_of_pairs, training_run
from tests.helpers.clients import logged_in
from tests.helpers.tiny_models import tiny_llama
from training import services
from training.models import Checkpoint, MetricPoint, RunEvent, TrainingRun
from training.recipes.config import ConfigError
from training.worker import launch_command, run_execute

pytestmark = pytest.mark.django_db


@pytest.fixture
def models_dir(tmp_path_factory, tiny_tokenizer_dir, settings):
    """A models folder whose 'smollm2-135m-instruct' is a tiny 2-layer Llama (fast on CPU)."""
    folder = tmp_path_factory.mktemp("models")
    tiny_llama(folder / "smollm2-135m-instruct", tiny_tokenizer_dir)
    settings.CONCORD_MODELS_DIR = folder
    return folder


@pytest.fixture
def snapshot(tmp_path, settings):
    settings.EXPORT_DIR = tmp_path / "exports"
    settings.CONCORD_RUNS_DIR = tmp_path / "runs"
    settings.VAR_DIR = tmp_path
    return snapshot_of_pairs(slug="runs")


TINY = {"max_steps": 4, "batch_size": 2, "max_length": 64, "checkpoint_every": 2,
        "learning_rate": 1e-3}  # fmt: skip


def _dpo(snapshot, user=None, **config):
    return training_run(
        snapshot=snapshot, name="tiny dpo", config={**TINY, **config}, created_by=user
    )


def _queued(run):
    TrainingRun.objects.filter(pk=run.pk).update(status="queued")
    run.refresh_from_db()
    return run


def test_create_validates_settings_by_the_recipe(snapshot):
    with pytest.raises(ConfigError, match="beta"):
        _dpo(snapshot, beta=-1.0)
    with pytest.raises(ConfigError, match="model, output_dir: set by Concord"):
        _dpo(snapshot, model="/x", output_dir="/y")
    with pytest.raises(ConfigError, match="nonsense: not a DPOConfig field"):
        _dpo(snapshot, nonsense=1)
    assert not TrainingRun.objects.exists()


def test_rl_runs_need_a_succeeded_reward_model(snapshot):
    with pytest.raises(services.RunError, match="needs a succeeded reward-model run"):
        services.run_create(
            name="r", kind="rloo", base_model="smollm2-135m-instruct", snapshot=snapshot
        )


def test_launch_queues_once_and_is_audited(
    snapshot, ml_engineer, django_capture_on_commit_callbacks
):
    run = _dpo(snapshot, ml_engineer)
    assert run.status == "draft" and run.output_dir.endswith(f"run-{run.pk}")
    with django_capture_on_commit_callbacks() as callbacks:
        services.run_launch(run=run, user=ml_engineer)
    assert run.status == "queued" and len(callbacks) == 1
    with pytest.raises(services.RunError, match="only a draft can be launched"):
        services.run_launch(run=run, user=ml_engineer)
    assert list(run.events.values_list("action", "user__username")) == [
        ("created", "emily"), ("launched", "emily"),
    ]  # fmt: skip


def test_worker_runs_a_tiny_dpo_to_the_end(snapshot, models_dir):
    """Metrics, checkpoints, progress and the summary land in the database; a duplicate message
    (a second execution of the same run) does nothing."""
    run = _queued(_dpo(snapshot))
    assert run_execute(run_id=run.pk, worker="test:1") == "succeeded"
    run.refresh_from_db()
    assert (run.status, run.step, run.total_steps, run.attempts) == ("succeeded", 4, 4, 1)
    assert MetricPoint.objects.filter(run=run, name="loss").count() >= 4
    assert list(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [2, 4]
    assert Path(run.output_dir, "config.json").is_file()
    assert run.summary
    assert run_execute(run_id=run.pk, worker="test:2") == "skipped"
    assert run.events.filter(action="started").count() == 1


def test_a_run_shorter_than_checkpoint_every_ends_with_its_final_model_as_a_checkpoint(
    snapshot, models_dir
):
    """3 steps with checkpoint_every 10: the loop saves no checkpoint, so the succeeded run's
    final model (``<output_dir>/final``) is recorded as the checkpoint of step 3, with the
    metrics logged at step 3, and is the only one (it can be evaluated and rolled back to)."""
    run = _queued(_dpo(snapshot, max_steps=3, checkpoint_every=10))
    assert run_execute(run_id=run.pk, worker="test:1") == "succeeded"
    run.refresh_from_db()
    final = Path(run.output_dir) / "final"
    assert list(run.checkpoints.values_list("step", "path")) == [(3, str(final))]
    assert not (Path(run.output_dir) / "checkpoints").exists()
    logged = MetricPoint.objects.get(run=run, step=3, name="loss").value
    assert run.checkpoints.get().metrics["loss"] == logged


def test_a_checkpoint_saved_at_the_last_step_is_kept_as_the_final_one(snapshot, models_dir):
    """4 steps, checkpoint_every 2: the step-4 checkpoint stays the loop's folder (no second
    record of step 4 pointing at ``final``)."""
    run = _queued(_dpo(snapshot))
    assert run_execute(run_id=run.pk, worker="test:1") == "succeeded"
    paths = dict(run.checkpoints.values_list("step", "path"))
    assert sorted(paths) == [2, 4] and paths[4].endswith("step-00000004")


def test_cancel_before_start_and_while_running(snapshot, models_dir, settings):
    draft = _dpo(snapshot)
    services.run_cancel(run=draft, user=None)
    assert draft.status == "cancelled"
    settings.CONCORD_HEARTBEAT_EVERY_S = 0.05
    run = _queued(_dpo(snapshot, max_steps=400, checkpoint_every=0))
    TrainingRun.objects.filter(pk=run.pk).update(cancel_requested=True)
    assert run_execute(run_id=run.pk, worker="test") == "cancelled"
    run.refresh_from_db()
    assert 0 < run.step < 400 and not run.cancel_requested
    assert run.checkpoints.exists()  # the loop checkpoints before it stops


def test_reaper_fails_a_silent_run_and_resume_continues(snapshot, models_dir):
    run = _queued(_dpo(snapshot))
    TrainingRun.objects.filter(pk=run.pk).update(
        status="running", heartbeat_at=timezone.now() - timedelta(minutes=10)
    )
    assert services.runs_reap_stale(stale_after_s=60) == [run.pk]
    run.refresh_from_db()
    assert run.status == "failed" and "resume to continue" in run.error
    services.run_resume(run=run, user=None)
    assert run_execute(run_id=run.pk, worker="test") == "succeeded"
    assert list(run.events.values_list("action", flat=True))[-4:] == [
        "reaped", "resumed", "started", "succeeded",
    ]  # fmt: skip


def test_resume_counts_a_checkpoint_written_but_not_recorded(snapshot):
    """A worker killed after renaming checkpoint 15 into place but before recording it: resuming
    records it (the recipe will load it) and says so; a partial folder stays ignored."""
    from training.recipes.checkpoint_files import STATE_FILE, checkpoint_folder, partial_folder

    run = _dpo(snapshot)
    output = Path(run.output_dir)
    for step in (10, 15):
        folder = checkpoint_folder(output, step)
        folder.mkdir(parents=True)
        (folder / STATE_FILE).write_text(json.dumps({"step": step}))
    partial_folder(output, 20).mkdir()
    services.checkpoint_record(
        run_id=run.pk, step=10, path=str(checkpoint_folder(output, 10)), metrics={"loss": 0.6}
    )
    TrainingRun.objects.filter(pk=run.pk).update(status="failed")
    run.refresh_from_db()
    services.run_resume(run=run, user=None)
    resumed = run.events.get(action="resumed")
    assert resumed.detail == {"from_step": 15, "recovered_checkpoints": [15]}
    assert list(run.checkpoints.values_list("step", "metrics")) == [(10, {"loss": 0.6}), (15, {})]


def test_clone_copies_settings_with_changes(snapshot):
    run = _dpo(snapshot, beta=0.2)
    clone = services.run_clone(run=run, user=None, changes={"max_steps": 9})
    assert clone.status == "draft" and clone.cloned_from == run
    # Runs store their full resolved settings: the copy has every one of them, with the change.
    assert clone.config == {**run.config, "max_steps": 9}
    assert {**TINY, "beta": 0.2}.items() <= run.config.items()


def test_alerts_open_with_diagnosis_and_resolve(snapshot):
    run = _dpo(snapshot)
    (alert,) = evaluate_metrics(run_id=run.pk, step=3, metrics={"kl": 0.4, "loss": 1.0})
    assert (alert.metric, alert.threshold, alert.step) == ("kl", 0.15, 3)
    assert "reference model loaded correctly" in alert.diagnosis
    assert evaluate_metrics(run_id=run.pk, step=4, metrics={"kl": 0.5}) == []  # one open alert
    evaluate_metrics(run_id=run.pk, step=5, metrics={"kl": 0.1, "reward/score_std": 0.01})
    assert Alert.objects.get(metric="kl").resolved_at is not None
    assert Alert.objects.get(metric="reward/score_std").resolved_at is None


def test_metrics_record_replaces_a_repeated_step(snapshot):
    run = _dpo(snapshot)
    services.metrics_record(run_id=run.pk, step=1, metrics={"loss": 0.7, "note": "x"})
    services.metrics_record(run_id=run.pk, step=1, metrics={"loss": 0.6})
    assert list(MetricPoint.objects.values_list("name", "value")) == [("loss", 0.6)]


def test_launch_command_for_several_gpus(tmp_path):
    config = tmp_path / "c.json"
    command = launch_command(gpus=4, config_path=config)
    assert command[1:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4"]
    assert command[-3:] == ["-m", "training.launch", str(config)]
    assert launch_command(gpus=2, config_path=config, launcher="deepspeed")[:2] == [
        "deepspeed", "--num_gpus=2",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="two or more GPUs"):
        launch_command(gpus=1, config_path=config)


def test_admin_actions_launch_and_clone(snapshot, ml_engineer, django_capture_on_commit_callbacks):
    run = _dpo(snapshot)
    client = logged_in(ml_engineer)
    url = reverse("admin:training_trainingrun_changelist")
    with django_capture_on_commit_callbacks():
        client.post(url, {"action": "launch", "_selected_action": [run.pk]})
    run.refresh_from_db()
    assert run.status == "queued"
    assert RunEvent.objects.filter(run=run, action="launched", user=ml_engineer).exists()
    response = client.post(url, {"action": "clone_with_changes", "_selected_action": [run.pk]})
    clone = TrainingRun.objects.exclude(pk=run.pk).get()
    assert response.url == reverse("admin:training_trainingrun_change", args=[clone.pk])


def test_run_pages_and_metrics_json(snapshot, ml_engineer, annotator):
    run = _dpo(snapshot)
    services.metrics_record(run_id=run.pk, step=1, metrics={"loss": 0.69})
    services.metrics_record(run_id=run.pk, step=2, metrics={"loss": 0.61, "kl": 0.2})
    client = logged_in(ml_engineer)
    assert "tiny dpo" in client.get(reverse("monitoring:runs")).content.decode()
    assert client.get(reverse("monitoring:run-detail", args=[run.pk])).status_code == 200
    data = client.get(reverse("monitoring:run-metrics", args=[run.pk]) + "?after=1").json()
    assert data["series"] == {"loss": [[2, 0.61]], "kl": [[2, 0.2]]}
    assert data["alerts"] == 1
    assert logged_in(annotator).get(reverse("monitoring:runs")).status_code == 404
