"""Writes of training runs: create, launch, cancel, resume, clone; the worker's claim, heartbeat,
metrics, checkpoints and end; the reaper.

The run's state lives in the database and follows the one job lifecycle (``common.lifecycle``). The
Celery task only carries the run id: it claims the run with a conditional update (queued ->
running), so a redelivered or duplicated message finds nothing to do. Cancel is cooperative: the
flag is polled by the training loop through the callback. The reaper is the lifecycle's, for every
job kind; ``runs_reap_stale`` runs it for training runs alone.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import F, ProtectedError
from django.utils import timezone
from django.utils.module_loading import import_string

from annotation.models import DatasetExport
from annotation.services.exporting import export_data_path
from common.errors import ConcordError, ModelUnavailableError
from common.jobs import task_send
from common.lifecycle import (
    CANCELLED,
    JobStateError,
    job_cancel,
    job_claim,
    job_finish,
    jobs_reap_stale,
)
from common.model_registry import model_get, model_path
from training.models import (
    Checkpoint,
    DatasetSnapshot,
    MetricPoint,
    RunEvent,
    TrainingRun,
)

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


logger = logging.getLogger(__name__)


class RunError(ConcordError):
    """An action that does not fit the run's state (the message says why)."""


def _event(run: TrainingRun, action: str, user: AbstractBaseUser | None = None, **detail: Any):
    RunEvent.objects.create(run=run, user=user, action=action, detail=detail)


def snapshot_for(*, export: DatasetExport, name: str = "") -> DatasetSnapshot:
    """The snapshot of an export (created once; an export is immutable, so is its snapshot)."""
    snapshot, _ = DatasetSnapshot.objects.get_or_create(export=export, defaults={"name": name})
    return snapshot


def snapshot_rename(*, snapshot: DatasetSnapshot, name: str) -> DatasetSnapshot:
    """Give a snapshot another display name (its export, what runs train on, never changes)."""
    name = name.strip()
    if len(name) > DatasetSnapshot._meta.get_field("name").max_length:
        raise RunError("name: too long")
    DatasetSnapshot.objects.filter(pk=snapshot.pk).update(name=name)
    snapshot.refresh_from_db()
    return snapshot


@transaction.atomic
def snapshot_delete(*, snapshot: DatasetSnapshot) -> None:
    """Delete a snapshot no run trains on (its export stays). With runs: refused, nothing
    deleted."""
    used = list(snapshot.runs.order_by("pk").values_list("pk", flat=True)[:6])
    if used:
        named = ", ".join(f"#{pk}" for pk in used[:5]) + (", ..." if len(used) > 5 else "")
        raise RunError(f"snapshot #{snapshot.pk} is the data of runs {named}; delete them first")
    snapshot.delete()


def _managed_values(
    *,
    base_model: str,
    snapshot: DatasetSnapshot,
    output_dir: str,
    reward_model_run: TrainingRun | None,
    ready: bool,
) -> dict[str, Any]:
    """The config fields Concord fills in from the run: the base model's folder, the snapshot's
    data file (its export's ``data_file``: pairs.jsonl, or an item export's rows), the run folder,
    the reward model's final folder. ``ready``: the worker's view (the
    folders must exist, else ModelUnavailableError); otherwise the same paths, unchecked, for
    validating a draft on a machine that need not hold the weights."""
    model = model_path(base_model) if ready else (model_get(base_model).path or base_model)
    values: dict[str, Any] = {
        "model": str(model),
        "data": str(export_data_path(snapshot.export)),
        "output_dir": output_dir,
        "resume": True,
    }
    if reward_model_run is not None:
        final = Path(reward_model_run.output_dir) / "final"
        if ready and not final.is_dir():
            raise ModelUnavailableError(f"reward model of run #{reward_model_run.pk} missing")
        values["reward_model"] = str(final)
    return values


def run_managed_values(run: TrainingRun) -> dict[str, Any]:
    """The config fields Concord fills in for ``run`` (``MANAGED_FIELDS``: the base model's
    folder, the snapshot's pairs file, the run folder, resume, the reward model's final folder),
    as the worker will pass them, unchecked (the folders need not exist here): for showing. {} for
    a run whose base model has left the registry."""
    try:
        return _managed_values(
            base_model=run.base_model,
            snapshot=run.snapshot,
            output_dir=run.output_dir,
            reward_model_run=run.reward_model_run,
            ready=False,
        )
    except ModelUnavailableError:
        return {}


def reference_cache_dir() -> str:
    """Where DPO's reference log-probabilities are cached (keyed by data hash and model), shared by
    every run of this installation and by ``manage.py train``."""
    return str(Path(settings.VAR_DIR) / "cache" / "reference-logps")


def run_config_validate(
    *,
    kind: str,
    config: Mapping[str, Any],
    base_model: str,
    snapshot: DatasetSnapshot,
    reward_model_run: TrainingRun | None = None,
    output_dir: str = "",
) -> dict[str, Any]:
    """The run's full settings: ``config`` over the recipe's defaults, checked by the recipe's
    dataclass with the real paths Concord fills in (base model folder, snapshot file, run folder,
    reward model), and returned with every settable field but those paths (what
    ``TrainingRun.config`` stores, JSON-ready: tuples as lists).

    ``output_dir``: the run's folder; empty for a run not created yet (the runs folder stands in;
    run_create checks again with the run's own folder). Raises ConfigError whose ``field`` names
    the setting; fields Concord manages cannot be set, unknown names are refused."""
    from training.recipes.config import ConfigError
    from training.recipes.kinds import kind_spec

    spec = kind_spec(kind)
    cls = spec.config_class
    managed = sorted(set(config) & set(MANAGED_FIELDS))
    if managed:
        raise ConfigError(
            f"{', '.join(managed)}: set by Concord from the run, not in the config",
            field=managed[0],
        )
    known = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(config) - known)
    if unknown:
        raise ConfigError(f"{', '.join(unknown)}: not a {cls.__name__} field", field=unknown[0])
    values = dict(config)
    if spec.has_reference_pass and not values.get("reference_cache_dir"):
        values["reference_cache_dir"] = reference_cache_dir()
    paths = _managed_values(
        base_model=base_model,
        snapshot=snapshot,
        output_dir=output_dir or str(settings.CONCORD_RUNS_DIR),
        reward_model_run=reward_model_run,
        ready=False,
    )
    resolved = cls(**{**values, **paths})  # __post_init__ raises ConfigError on impossible values
    snapshot_rows_check(kind=kind, config=resolved.to_dict(), snapshot=snapshot)
    return {
        name: list(value) if isinstance(value, tuple) else value
        for name, value in resolved.to_dict().items()
        if name in known and name not in MANAGED_FIELDS
    }


def snapshot_row_kind(snapshot: DatasetSnapshot) -> str:
    """The kind of rows the snapshot's file holds (``training.recipes.kinds.ROW_KINDS``): its
    export's ``options["rows"]``; an export that does not say holds pairs (``dataset_export``'s
    TRL-style pairs file)."""
    return str(snapshot.export.options.get("rows") or "pairs")


def snapshot_rows_check(*, kind: str, config: Mapping[str, Any], snapshot: DatasetSnapshot) -> None:
    """A run of ``kind`` with ``config`` can read ``snapshot``'s rows (``row_kinds_accepted``);
    else ConfigError on the ``snapshot`` field naming what the snapshot holds and what the run
    needs, so that the mismatch is refused at the form, not in the worker."""
    from training.recipes.config import ConfigError
    from training.recipes.kinds import ROW_KINDS, kind_spec, row_kinds_accepted

    accepted = row_kinds_accepted(kind, config)
    held = snapshot_row_kind(snapshot)
    if held in accepted:
        return
    run = kind_spec(kind).label
    if kind == "rm":
        run += f" with loss {config.get('loss')!r}"
    needs = "; or ".join(ROW_KINDS.get(name, name) for name in accepted)
    raise ConfigError(
        f"snapshot {snapshot} holds {ROW_KINDS.get(held, held + ' rows')}; a {run} run trains on "
        f"{needs}. Choose a snapshot of those rows"
        + (" or another loss." if kind == "rm" else " or another kind."),
        field="snapshot",
    )


def run_models_check(*, kind: str, base_model: str, reward_model_run: TrainingRun | None) -> None:
    """The base model exists in the registry; PPO/RLOO have a succeeded reward-model run, GRPO
    may have one (its verifiable rewards may score alone)."""
    from training.recipes.kinds import KINDS, kind_spec

    model_get(base_model)  # unknown names raise with the list of known ones
    spec = kind_spec(kind)
    if spec.needs_reward_model and reward_model_run is None:
        raise RunError(f"a {spec.label} run needs a succeeded reward-model run")
    if reward_model_run is None:
        return
    if not spec.takes_reward_model:
        *others, last = [s.label for s in KINDS.values() if s.takes_reward_model]
        takers = f"{', '.join(others)} and {last}" if others else last
        raise RunError(f"only {takers} runs take a reward model")
    if reward_model_run.kind != "rm" or reward_model_run.status != Status.SUCCEEDED:
        raise RunError("the reward model must be a succeeded reward-model (rm) run")


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
    """A new run in draft. ``config``: settings that differ from the recipe's defaults (or all of
    them); the run stores the full resolved settings, validated by the recipe's dataclass with the
    run's real paths (ConfigError naming the field, and nothing written, otherwise). Audited."""
    run_models_check(kind=kind, base_model=base_model, reward_model_run=reward_model_run)
    run = TrainingRun.objects.create(
        name=name,
        kind=kind,
        base_model=base_model,
        snapshot=snapshot,
        reward_model_run=reward_model_run,
        gpus=gpus,
        created_by=created_by,
        cloned_from=cloned_from,
    )
    run.output_dir = str(Path(settings.CONCORD_RUNS_DIR) / f"run-{run.pk}")
    # The run's folder is known once it has a key; an invalid config rolls the insert back.
    run.config = run_config_validate(
        kind=kind,
        config=config or {},
        base_model=base_model,
        snapshot=snapshot,
        reward_model_run=reward_model_run,
        output_dir=run.output_dir,
    )
    run.save(update_fields=["output_dir", "config"])
    _event(run, "cloned" if cloned_from else "created", created_by, config=run.config)
    return run


def _audit_value(value: Any) -> Any:
    return value.pk if isinstance(value, DatasetSnapshot | TrainingRun) else value


@transaction.atomic
def run_update(
    *,
    run: TrainingRun,
    user: AbstractBaseUser | None,
    name: str,
    base_model: str,
    snapshot: DatasetSnapshot,
    config: Mapping[str, Any],
    reward_model_run: TrainingRun | None = None,
    gpus: int = 1,
) -> TrainingRun:
    """Change a draft: its fields and settings, validated as run_create does (ConfigError or
    RunError, nothing written). Audited as a ``changed`` event listing each changed value as
    [old, new] (no event when nothing changed). Only drafts change: a launched run keeps the
    settings it ran with."""
    current = TrainingRun.objects.select_for_update().get(pk=run.pk)
    if current.status != Status.DRAFT:
        raise RunError(f"run #{run.pk} is {current.status}; only a draft can be changed")
    run_models_check(kind=current.kind, base_model=base_model, reward_model_run=reward_model_run)
    resolved = run_config_validate(
        kind=current.kind,
        config=config,
        base_model=base_model,
        snapshot=snapshot,
        reward_model_run=reward_model_run,
        output_dir=current.output_dir,
    )
    fields = {
        "name": name,
        "base_model": base_model,
        "snapshot": snapshot,
        "reward_model_run": reward_model_run,
        "gpus": gpus,
    }
    changed = {
        field: [_audit_value(getattr(current, field)), _audit_value(value)]
        for field, value in fields.items()
        if getattr(current, field) != value
    }
    changed_config = {
        key: [current.config.get(key), value]
        for key, value in resolved.items()
        if current.config.get(key) != value
    }
    if not changed and not changed_config:
        return current
    for field, value in fields.items():
        setattr(current, field, value)
    current.config = resolved
    current.save(update_fields=[*fields, "config"])
    _event(current, "changed", user, fields=changed, config=changed_config)
    return current


def _enqueue(run: TrainingRun) -> None:
    """Send the run to the gpu queue once the transaction that queued it has committed."""
    task_send("training.tasks.run_training_task", args=[run.pk], queue=settings.CONCORD_GPU_QUEUE)


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
    try:
        outcome = job_cancel(model=TrainingRun, pk=run.pk)
    except JobStateError:
        run.refresh_from_db()
        raise RunError(f"run #{run.pk} is {run.status}; there is nothing to cancel") from None
    run.refresh_from_db()
    _event(run, "cancelled" if outcome == CANCELLED else "cancel_requested", user)
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


ACTIVE = (Status.QUEUED, Status.RUNNING)


def run_deletable(run: TrainingRun) -> str:
    """Why the run cannot be deleted now ("" when it can): queued or running (cancel it first),
    or the reward model of other runs."""
    if run.status in ACTIVE:
        return f"run #{run.pk} is {run.status}; cancel it before deleting it"
    users = list(run.policy_runs.order_by("pk").values_list("pk", flat=True)[:5])
    if users:
        named = ", ".join(f"#{pk}" for pk in users)
        return f"run #{run.pk} is the reward model of runs {named}; delete them first"
    return ""


@transaction.atomic
def run_delete(*, run: TrainingRun, user: AbstractBaseUser | None) -> None:
    """Delete a run that is neither queued nor running nor another run's reward model, with its
    checkpoints' records, metric points, samples, events and eval rounds (the run folder on disk
    stays: its checkpoints may be kept by hand). Refused (``RunError``, nothing deleted) otherwise;
    the row is locked so a launch cannot slip in between the check and the delete."""
    locked = TrainingRun.objects.select_for_update().filter(pk=run.pk).first()
    if locked is None:
        raise RunError(f"run #{run.pk} does not exist")
    why = run_deletable(locked)
    if why:
        raise RunError(why)
    try:
        locked.delete()
    except ProtectedError as exc:  # e.g. a checkpoint another run's eval round compares against
        kinds = sorted({type(obj)._meta.verbose_name for obj in exc.protected_objects})
        raise RunError(
            f"run #{run.pk} is still used ({', '.join(kinds)}); delete those first"
        ) from exc
    logger.info(
        "run #%s (%s, %s) deleted by %s", run.pk, locked.kind, locked.name, user or "nobody"
    )


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
    if not job_claim(
        model=TrainingRun, pk=run_id, worker=worker, updates={"attempts": F("attempts") + 1}
    ):
        return None
    run = TrainingRun.objects.select_related("snapshot__export", "reward_model_run").get(pk=run_id)
    _event(run, "started", worker=worker, attempt=run.attempts)
    return run


def run_config_resolved(run: TrainingRun) -> dict[str, Any]:
    """The full configuration the recipe gets: the run's settings and the paths, which must exist
    (ModelUnavailableError saying which otherwise)."""
    from training.recipes.kinds import kind_spec

    values: dict[str, Any] = {
        **run.config,
        **_managed_values(
            base_model=run.base_model,
            snapshot=run.snapshot,
            output_dir=run.output_dir,
            reward_model_run=run.reward_model_run,
            ready=True,
        ),
    }
    if kind_spec(run.kind).has_reference_pass and not values.get("reference_cache_dir"):
        values["reference_cache_dir"] = reference_cache_dir()  # runs stored before it was
    return values


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
    """Record how the attempt ended: succeeded, cancelled or failed (with the error). A succeeded
    run's final model becomes a checkpoint of its last step (``_final_checkpoint_record``). A run
    no longer running (the reaper failed it meanwhile) keeps its state; the event says so."""
    with transaction.atomic():
        finished = job_finish(
            model=TrainingRun,
            pk=run_id,
            state=status,
            error=error[-20_000:],
            updates={"summary": dict(summary or {}), "cancel_requested": False},
        )
        run = TrainingRun.objects.get(pk=run_id)
        if not finished:
            _event(run, "finish_ignored", status=status, state=run.status)
            return
        if status == Status.SUCCEEDED:
            _final_checkpoint_record(run, summary or {})
        _event(run, status, error=error[-2000:] if error else "")


def _final_checkpoint_record(run: TrainingRun, summary: Mapping[str, Any]) -> Checkpoint | None:
    """The final model (``summary["final_model_dir"]``, else ``<output_dir>/final``) as the
    checkpoint of the run's last step (``summary["steps"]``, else ``run.step``) when no checkpoint
    was saved at that step, so a run shorter than ``checkpoint_every`` can still be evaluated and
    rolled back to. Its metrics are those logged at that step. None when the folder is missing
    or a checkpoint of that step exists (it is kept)."""
    final = summary.get("final_model_dir") or (
        str(Path(run.output_dir) / "final") if run.output_dir else ""
    )
    steps = summary.get("steps")
    step = steps if isinstance(steps, int) and steps > 0 else run.step
    if not final or not step or not Path(final).is_dir():
        return None
    if run.checkpoints.filter(step=step).exists():
        return None
    metrics = dict(MetricPoint.objects.filter(run=run, step=step).values_list("name", "value"))
    return checkpoint_record(run_id=run.pk, step=step, path=final, metrics=metrics)


def runs_reap_stale(*, stale_after_s: float | None = None) -> list[int]:
    """Fail running runs whose heartbeat stopped (a killed worker): the one reaper
    (``common.lifecycle.jobs_reap_stale``) for training runs alone. They can be resumed."""
    reaped = jobs_reap_stale(stale_after_s=stale_after_s, models=["training.TrainingRun"])
    return [job.pk for job in reaped]


def run_reaped_record(*, run: TrainingRun) -> None:
    """The audit event of a run the reaper failed (its kind's ``on_reaped``)."""
    beat = run.heartbeat_at.isoformat() if run.heartbeat_at else None
    _event(run, "reaped", heartbeat_at=beat)
