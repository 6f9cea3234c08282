"""Training runs and what they leave behind: dataset snapshots, checkpoints, metric points, events.

A run's state lives here, not in the broker: draft -> queued -> running -> succeeded / failed /
cancelled, with a heartbeat the worker refreshes and a cancel flag the training loop polls.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.choices import BaseChoiceIterator

from annotation.models import DatasetExport, Project


class DatasetSnapshot(models.Model):
    """A frozen export of a project's preferences that runs train on (named by its SHA-256)."""

    export = models.OneToOneField(DatasetExport, on_delete=models.PROTECT, related_name="snapshot")
    name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        label = self.name or self.export.project.slug
        return f"{label} @ {self.export.sha256[:12]} ({self.export.n_pairs} pairs)"

    @property
    def sha256(self) -> str:
        return self.export.sha256

    @property
    def n_pairs(self) -> int:
        return self.export.n_pairs


def kind_choices() -> list[tuple[str, str]]:
    """(value, label) of every training kind, in the order people see them: the kind registry
    (training.recipes.kinds, pure and torch-free), read on each call so that a kind registered
    later is a choice too."""
    from training.recipes.kinds import KINDS  # web code imports training.recipes where it uses it

    return [(spec.name, spec.label) for spec in KINDS.values()]


class KindChoices(BaseChoiceIterator):
    """The kind field's choices: kind_choices() read on each use (forms, validation, display).

    Not a callable: Django would write a migration naming the callable. This iterator compares
    equal to the list the migrations hold and is written as that list, so the registry's kinds
    need no migration while their values and labels stay as they are."""

    def __iter__(self) -> Iterator[tuple[str, str]]:
        yield from kind_choices()


def _registry_kinds(*, reward_model: tuple[str, ...]) -> tuple[str, ...]:
    from training.recipes.kinds import KINDS

    return tuple(spec.name for spec in KINDS.values() if spec.reward_model in reward_model)


# Kinds that score with a reward-model run (PPO and RLOO need one, GRPO may use one), as the
# registry says when this module loads: the database constraint below is built from them.
REWARD_MODEL_KINDS = _registry_kinds(reward_model=("optional", "required"))
REWARD_MODEL_REQUIRED = _registry_kinds(reward_model=("required",))


class TrainingRun(models.Model):
    """One training job: what to train, on what, with which validated configuration."""

    # The registry's kinds as an enum (Kind.RM, Kind.DPO, ...) for code that names one; the
    # field's choices read the registry itself (kind_choices).
    Kind = models.TextChoices(
        "Kind", [(value.upper(), (value, label)) for value, label in kind_choices()]
    )

    class Status(models.TextChoices):
        DRAFT = "draft", "Draft"
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    FINISHED = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)

    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=8, choices=KindChoices())
    base_model = models.CharField(
        max_length=100, help_text="Registry name of the model to train (policy or reward base)."
    )
    snapshot = models.ForeignKey(
        DatasetSnapshot,
        on_delete=models.PROTECT,
        related_name="runs",
        help_text=(
            "Preference pairs (rm, dpo, simpo, orpo, kto) or the prompts to roll out on "
            "(ppo, rloo, grpo)."
        ),
    )
    reward_model_run = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="policy_runs",
        help_text=(
            "PPO / RLOO (required), GRPO (optional beside verifiable rewards): a succeeded "
            "reward-model run whose model scores the rollouts."
        ),
    )
    config = models.JSONField(
        default=dict, blank=True, help_text="Settings that differ from the recipe's defaults."
    )
    gpus = models.PositiveSmallIntegerField(
        default=1, help_text="GPUs to use; more than one starts torchrun (or deepspeed)."
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.DRAFT)
    cancel_requested = models.BooleanField(default=False)
    step = models.PositiveIntegerField(default=0)
    total_steps = models.PositiveIntegerField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    worker = models.CharField(max_length=200, blank=True)
    error = models.TextField(blank=True)
    summary = models.JSONField(default=dict, blank=True)
    output_dir = models.CharField(max_length=500, blank=True)
    result_checkpoint = models.ForeignKey(
        "Checkpoint",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The checkpoint chosen as this run's result (a roll back); default: the final model.",
    )
    result_is_base = models.BooleanField(
        default=False,
        help_text="A reviewer rejected the run: no checkpoint of it beats its base model, which "
        "stays the model to use.",
    )
    cloned_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="clones"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Work before (or between) steps that the recipe reports, e.g. the DPO reference pass; cleared
    # at the next step. ``phase_total`` 0: unknown.
    phase = models.CharField(max_length=64, blank=True)
    phase_done = models.PositiveIntegerField(default=0)
    phase_total = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(gpus__gte=1, gpus__lte=64), name="run_gpus_range"),
            models.CheckConstraint(
                condition=Q(kind__in=REWARD_MODEL_KINDS) | Q(reward_model_run__isnull=True),
                name="run_reward_model_only_for_rl",
            ),
        ]
        indexes = [models.Index(fields=["status", "heartbeat_at"], name="run_liveness")]

    def __str__(self) -> str:
        return f"#{self.pk} {self.name} ({self.kind}, {self.status})"

    @property
    def progress_percent(self) -> int:
        if not self.total_steps:
            return 0
        return min(100, round(100 * self.step / self.total_steps))

    @property
    def lora_label(self) -> str:
        """The run's LoRA in a few words, e.g. ``LoRA r=16 alpha=32`` (``, merged`` when
        merge_lora), for a run that trains adapters; "" for one that trains every weight."""
        config = self.config or {}
        rank = config.get("lora_rank") or 0
        if not rank:
            return ""
        alpha = config.get("lora_alpha", 32.0)
        merged = ", merged" if config.get("merge_lora") else ""
        return f"LoRA r={rank} alpha={alpha:g}{merged}"


def _is_folder(path: str) -> bool:
    return bool(path) and Path(path).is_dir()


class CheckpointQuerySet(models.QuerySet):
    def on_disk(self) -> CheckpointQuerySet:
        """These checkpoints less those whose folder is gone (``keep_checkpoints`` prunes the
        older ones while the run trains; a folder may be moved or deleted by hand): only these can
        be evaluated or rolled back to. Reads each folder's existence (one stat per checkpoint)."""
        present = [pk for pk, path in self.values_list("pk", "path") if _is_folder(path)]
        return self.filter(pk__in=present)


class Checkpoint(models.Model):
    """A saved state of a run: weights loadable with transformers, plus what is needed to resume."""

    run = models.ForeignKey(TrainingRun, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.PositiveIntegerField()
    path = models.CharField(max_length=500)
    metrics = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = CheckpointQuerySet.as_manager()

    class Meta:
        ordering = ["run", "step"]
        constraints = [
            models.UniqueConstraint(fields=["run", "step"], name="checkpoint_once_per_step")
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} step {self.step}"

    @property
    def on_disk(self) -> bool:
        """Whether the checkpoint's folder still exists."""
        return _is_folder(self.path)

    @property
    def missing_text(self) -> str:
        """A plain sentence for a checkpoint whose folder is gone (see ``on_disk``)."""
        return (
            f"the checkpoint of step {self.step} of run #{self.run_id} is no longer on disk (runs "
            "keep only their newest keep_checkpoints checkpoints); choose another checkpoint"
        )


class MetricPoint(models.Model):
    """One logged value of a run's metric at a step (loss, kl, reward_mean, ...)."""

    run = models.ForeignKey(TrainingRun, on_delete=models.CASCADE, related_name="metric_points")
    step = models.PositiveIntegerField()
    name = models.CharField(max_length=64)
    value = models.FloatField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # A resumed run logs a repeated step again: the newer value replaces the older one.
            models.UniqueConstraint(fields=["run", "name", "step"], name="metric_once_per_step")
        ]
        indexes = [models.Index(fields=["run", "step"], name="metric_run_step")]

    def __str__(self) -> str:
        return f"run {self.run_id} {self.name}@{self.step} = {self.value:g}"


class RunSample(models.Model):
    """One generation an online run kept at an evaluation step: the prompt, the policy's response,
    its reward, and any per-sample figures (score, kl, length)."""

    run = models.ForeignKey(TrainingRun, on_delete=models.CASCADE, related_name="samples")
    step = models.PositiveIntegerField()
    position = models.PositiveSmallIntegerField(help_text="Order within the step's samples.")
    prompt = models.TextField()
    response = models.TextField()
    reward = models.FloatField(null=True, blank=True)
    figures = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "step", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "step", "position"], name="sample_once_per_position"
            )
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} sample {self.position}@{self.step}"


class RunEvent(models.Model):
    """The audit trail of a run: who created, launched, cancelled, resumed or cloned it, and when
    the worker started, finished, failed or was found dead."""

    run = models.ForeignKey(TrainingRun, on_delete=models.CASCADE, related_name="events")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    action = models.CharField(max_length=32)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "created_at", "pk"]

    def __str__(self) -> str:
        return f"run {self.run_id}: {self.action} by {self.user or 'system'}"


class ContinuousRewardModel(models.Model):
    """A project's continuous reward modelling (issue #33): which retrain is the latest, how many
    consensus labels it learnt from, and whether one follow-up retrain is owed.

    One row per project, locked (SELECT ... FOR UPDATE) by every check, so two checks never both
    start a retrain: while ``current_run`` is queued or running, a due check only sets
    ``followup`` (one follow-up, however many checks come), started when the run has finished."""

    project = models.OneToOneField(
        Project, on_delete=models.CASCADE, related_name="continuous_reward_model"
    )
    current_run = models.ForeignKey(
        TrainingRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    last_succeeded_run = models.ForeignKey(
        TrainingRun,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The latest retrain that succeeded: the next one starts from its weights.",
    )
    labels_at_last_start = models.PositiveIntegerField(
        default=0, help_text="Judgements in the project when the latest retrain was started."
    )
    followup = models.BooleanField(
        default=False, help_text="A retrain came due while one ran: start one when it finishes."
    )
    retrains = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"continuous RM of {self.project.slug} ({self.retrains} retrains)"
