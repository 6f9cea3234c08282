"""Writes of training runs: create, launch, cancel, resume, clone; the worker's claim, heartbeat,
metrics, checkpoints and end; the reaper.

The run's state lives in the database. The Celery task only carries the run id: it claims the run with
a conditional update (queued -> running), so a redelivered or duplicated message finds nothing to do.
Cancel is cooperative: the flag is polled by the training loop through the callback.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.module_loading import import_string

from annotation.models import DatasetExport
from common.errors import ConcordError, ModelUnavailableError
from common.model_registry import model_get, model_path
from training.models import Checkpoint, DatasetSnapshot, MetricPoint, RunEvent, TrainingRun

# Config fields Concord fills in itself (from the run's base model, snapshot and folder).
MANAGED_FIELDS = (
    "model",
    "data",
    "judgements",
    "output_dir",
    "resume",
    "reward_model",
    "ref_model",
)
Status = TrainingRun.Status


class RunError(ConcordError):
    """An action that does not fit the run's state (the message says why)."""


def _event(run: TrainingRun, action: str, user: AbstractBaseUser | None = None, **detail: Any):
    RunEvent.objects.create(run=run, user=user, action=action, detail=detail)


def snapshot_for(*, export: DatasetExport, name: str = "") -> DatasetSnapshot:
    """The snapshot of an export (created once; an export is immutable, so is its snapshot)."""
    snapshot, _ = DatasetSnapshot.objects.get_or_create(export=export, defaults={"name": name})
    return snapshot


def config_overrides_validate(kind: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Check settings against the recipe's dataclass; returns them, or raises ConfigError naming the
    field. Fields Concord manages (model, data, output folder, resume) cannot be set."""
    from training.recipes.config import ConfigError, config_class

    cls = config_class(kind)
    managed = sorted(set(overrides) & set(MANAGED_FIELDS))
    if managed:
        raise ConfigError(f"{', '.join(managed)}: set by Concord from the run, not in the config")
    known = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"{', '.join(unknown)}: not a {cls.__name__} field")
    placeholders = {"model": "-", "data": "-", "output_dir": "-"}
    if "reward_model" in known:
        placeholders["reward_model"] = "-"
    cls(**{**placeholders, **overrides})  # __post_init__ raises ConfigError on impossible values
    return dict(overrides)


def run_models_check(*, kind: str, base_model: str, reward_model_run: TrainingRun | None) -> None:
    """The base model exists in the registry; PPO/RLOO have a succeeded reward-model run."""
    model_get(base_model)  # unknown names raise with the list of known ones
    if kind in ("ppo", "rloo"):
        if reward_model_run is None:
            raise RunError(f"a {kind.upper()} run needs a succeeded reward-model run")
        if reward_model_run.kind != "rm" or reward_model_run.status != Status.SUCCEEDED:
            raise RunError("the reward model must be a succeeded reward-model (rm) run")
    elif reward_model_run is not None:
        raise RunError("only PPO and RLOO runs take a reward model")


@transaction.atomic
def run_create(
    *,
    name: str,
    kind: str,
    base_model: str,
    snapshot: DatasetSnapshot,
    config: Mapping[str, Any] | None = None,
    reward_model_run: TrainingRun | None = None,
    gpus: int = 1,
    created_by: AbstractBaseUser | None = None,
    cloned_from: TrainingRun | None = None,
) -> TrainingRun:
    """A new run in draft, its configuration validated by the recipe's dataclass."""
    run_models_check(kind=kind, base_model=base_model, reward_model_run=reward_model_run)
    overrides = config_overrides_validate(kind, config or {})
    run = TrainingRun.objects.create(
        name=name,
        kind=kind,
        base_model=base_model,
        snapshot=snapshot,
        config=overrides,
        reward_model_run=reward_model_run,
        gpus=gpus,
        created_by=created_by,
        cloned_from=cloned_from,
    )
    run.output_dir = str(Path(settings.CONCORD_RUNS_DIR) / f"run-{run.pk}")
    run.save(update_fields=["output_dir"])
    _event(run, "cloned" if cloned_from else "created", created_by, config=overrides)
    return run


def _enqueue(run: TrainingRun) -> None:
    """Send the run to the gpu queue once the transaction that queued it has committed."""
    from training.tasks import run_training_task

    queue = settings.CONCORD_GPU_QUEUE
    transaction.on_commit(lambda: run_training_task.apply_async(args=[run.pk], queue=queue))


@transaction.atomic
def run_launch(*, run: TrainingRun, user: AbstractBaseUser | None) -> TrainingRun:
    """Queue a draft run on the gpu queue (audited)."""
    updated = TrainingRun.objects.filter(pk=run.pk, status=Status.DRAFT).update(
        status=Status.QUEUED, cancel_requested=False
    )
    if not updated:
        run.refresh_from_db()
        raise RunError(f"run #{run.pk} is {run.status}; only a draft can be launched")
    run.refresh_from_db()
    _event(run, "launched", user)
    _enqueue(run)
    return run


@transaction.atomic
def run_cancel(*, run: TrainingRun, user: AbstractBaseUser | None) -> TrainingRun:
    """Cancel: at once when not started yet; a running run stops at its next step (with a checkpoint)."""
    now = timezone.now()
    if TrainingRun.objects.filter(pk=run.pk, status__in=[Status.DRAFT, Status.QUEUED]).update(
        status=Status.CANCELLED, finished_at=now
    ):
        run.refresh_from_db()
        _event(run, "cancelled", user)
        return run
    if not TrainingRun.objects.filter(pk=run.pk, status=Status.RUNNING).update(
        cancel_requested=True
    ):
        run.refresh_from_db()
        raise RunError(f"run #{run.pk} is {run.status}; there is nothing to cancel")
    run.refresh_from_db()
    _event(run, "cancel_requested", user)
    return run


@transaction.atomic
def run_resume(*, run: TrainingRun, user: AbstractBaseUser | None) -> TrainingRun:
    """Queue a failed or cancelled run again; it continues from its newest checkpoint."""
    if not TrainingRun.objects.filter(
        pk=run.pk, status__in=[Status.FAILED, Status.CANCELLED]
    ).update(status=Status.QUEUED, cancel_requested=False, error="", finished_at=None):
        run.refresh_from_db()
        raise RunError(f"run #{run.pk} is {run.status}; only failed or cancelled runs resume")
    run.refresh_from_db()
    recovered = _record_unrecorded_checkpoints(run)
    last = run.checkpoints.order_by("-step").first()
    detail: dict[str, Any] = {"from_step": last.step if last else 0}
    if recovered:
        detail["recovered_checkpoints"] = recovered
    _event(run, "resumed", user, **detail)
    _enqueue(run)
    return run


def _record_unrecorded_checkpoints(run: TrainingRun) -> list[int]:
    """Record the complete checkpoints on disk that the database lacks (a worker killed between
    writing a checkpoint and recording it) and return their steps. The recipe resumes from the
    newest complete folder, so the ``resumed`` event must count it too."""
    if not run.output_dir:
        return []
    from training.recipes.checkpoint_files import complete_checkpoints  # torch-free, still a recipe

    recorded = set(run.checkpoints.values_list("step", flat=True))
    recovered = []
    for step, folder in complete_checkpoints(Path(run.output_dir)):
        if step not in recorded:
            checkpoint_record(run_id=run.pk, step=step, path=str(folder), metrics={})
            recovered.append(step)
    return recovered


def run_clone(
    *, run: TrainingRun, user: AbstractBaseUser | None, changes: Mapping[str, Any] | None = None
) -> TrainingRun:
    """A new draft with the same settings (``changes`` merged into the config)."""
    return run_create(
        name=f"{run.name} (copy)",
        kind=run.kind,
        base_model=run.base_model,
        snapshot=run.snapshot,
        config={**run.config, **(changes or {})},
        reward_model_run=run.reward_model_run,
        gpus=run.gpus,
        created_by=user,
        cloned_from=run,
    )


# --- The worker's side -------------------------------------------------------------------------------


def run_claim(*, run_id: int, worker: str) -> TrainingRun | None:
    """queued -> running for this worker, or None when the run is not queued (a duplicate message,
    a cancelled run): whoever claims it first runs it, nobody runs it twice."""
    now = timezone.now()
    claimed = TrainingRun.objects.filter(pk=run_id, status=Status.QUEUED).update(
        status=Status.RUNNING,
        worker=worker,
        attempts=F("attempts") + 1,
        started_at=now,
        heartbeat_at=now,
    )
    if not claimed:
        return None
    run = TrainingRun.objects.select_related("snapshot__export", "reward_model_run").get(pk=run_id)
    _event(run, "started", worker=worker, attempt=run.attempts)
    return run


def run_config_resolved(run: TrainingRun) -> dict[str, Any]:
    """The full configuration the recipe gets: defaults, the run's settings, and the paths."""
    values: dict[str, Any] = {
        **run.config,
        "model": str(model_path(run.base_model)),
        "data": str(Path(run.snapshot.export.folder) / "pairs.jsonl"),
        "output_dir": run.output_dir,
        "resume": True,
    }
    if run.kind == "dpo":
        # Reference log-probabilities are cached by dataset hash and model, shared across runs.
        values.setdefault(
            "reference_cache_dir", str(Path(settings.VAR_DIR) / "cache" / "reference-logps")
        )
    if run.reward_model_run is not None:
        final = Path(run.reward_model_run.output_dir) / "final"
        if not final.is_dir():
            raise ModelUnavailableError(f"reward model of run #{run.reward_model_run_id} missing")
        values["reward_model"] = str(final)
    return values


def run_heartbeat(*, run_id: int) -> bool:
    """Refresh the heartbeat; returns whether cancel was requested."""
    TrainingRun.objects.filter(pk=run_id, status=Status.RUNNING).update(heartbeat_at=timezone.now())
    return bool(
        TrainingRun.objects.filter(pk=run_id).values_list("cancel_requested", flat=True).first()
    )


def run_progress(*, run_id: int, step: int, total_steps: int | None) -> None:
    TrainingRun.objects.filter(pk=run_id).update(
        step=step, total_steps=total_steps, heartbeat_at=timezone.now()
    )


def metrics_record(*, run_id: int, step: int, metrics: Mapping[str, Any]) -> None:
    """Store a logged step's numeric metrics (a repeated step replaces its values) and run the
    monitoring hook on them."""
    numeric = {
        name: float(value)
        for name, value in metrics.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }
    if not numeric:
        return
    MetricPoint.objects.bulk_create(
        [MetricPoint(run_id=run_id, step=step, name=n, value=v) for n, v in numeric.items()],
        update_conflicts=True,
        unique_fields=["run", "name", "step"],
        # A step logged again (after a resume) takes the new value and the new time.
        update_fields=["value", "created_at"],
    )
    hook = getattr(settings, "CONCORD_METRICS_HOOK", "")
    if hook:
        import_string(hook)(run_id=run_id, step=step, metrics=numeric)


def checkpoint_record(
    *, run_id: int, step: int, path: str, metrics: Mapping[str, Any]
) -> Checkpoint:
    checkpoint, _ = Checkpoint.objects.update_or_create(
        run_id=run_id, step=step, defaults={"path": path, "metrics": dict(metrics)}
    )
    return checkpoint


def run_finish(
    *, run_id: int, status: str, error: str = "", summary: Mapping[str, Any] | None = None
) -> None:
    """Record how the attempt ended: succeeded, cancelled or failed (with the error)."""
    TrainingRun.objects.filter(pk=run_id).update(
        status=status,
        error=error[-20_000:],
        summary=dict(summary or {}),
        finished_at=timezone.now(),
        cancel_requested=False,
    )
    run = TrainingRun.objects.get(pk=run_id)
    _event(run, status, error=error[-2000:] if error else "")


def runs_reap_stale(*, stale_after_s: int | None = None) -> list[int]:
    """Fail running runs whose heartbeat stopped (a killed worker); they can be resumed."""
    stale_after = stale_after_s if stale_after_s is not None else settings.CONCORD_HEARTBEAT_STALE_S
    limit = timezone.now() - timedelta(seconds=stale_after)
    reaped = []
    for run in TrainingRun.objects.filter(status=Status.RUNNING, heartbeat_at__lt=limit):
        message = (
            f"the worker stopped answering (no heartbeat since {run.heartbeat_at:%Y-%m-%d %H:%M:%S}"
            f" UTC); resume to continue from the last checkpoint"
        )
        if TrainingRun.objects.filter(pk=run.pk, status=Status.RUNNING).update(
            status=Status.FAILED, error=message, finished_at=timezone.now()
        ):
            _event(run, "reaped", heartbeat_at=run.heartbeat_at.isoformat())
            reaped.append(run.pk)
    return reaped
