"""Continuous reward modelling (issue #33): a project that enables it gets a reward-model ensemble
retrained from its current consensus every ``continuous_rm_every`` new judgements, each retrain a
normal training run (kind rm, MiniLM, K heads on one encoder, warm-started from the last retrain
that succeeded), its held-out accuracy a point of the project's learning curve, its scores the
labelling queue's acquisition scores.

The rules, kept under one row lock (``ContinuousRewardModel``, SELECT ... FOR UPDATE):

- Debounced: judgements start nothing themselves; ``continuous_rm_check`` runs periodically
  (beat, ``training.tasks.continuous_rm_check_all``) and after each retrain, and starts a retrain
  only when N judgements arrived since the last one started.
- One at a time: while the project's retrain is queued or running, a due check starts nothing and
  marks one follow-up (``followup``; more checks leave it one). When the retrain ends
  (``continuous_rm_after_run``) the check runs again and starts the follow-up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from annotation.models import Comparison, Judgement, LearningCurvePoint, Project
from annotation.services.active_queue import ensemble_scores_store
from annotation.services.exporting import dataset_export
from common.jobs import task_send
from training.models import ContinuousRewardModel, TrainingRun
from training.services import run_create, run_launch, snapshot_for

Status = TrainingRun.Status
ACTIVE = (Status.DRAFT, Status.QUEUED, Status.RUNNING)
CONTINUOUS_RM_BASE_MODEL = "all-minilm-l6-v2"
# A retrain needs at least this many consensus pairs (one held out, the rest to learn from).
MIN_PAIRS = 8


def human_judgements(project: Project) -> int:
    """Judgements in ``project`` by anyone but its trusted model judge."""
    judgements = Judgement.objects.filter(comparison__project=project)
    if project.suggestion_judge_id is not None:
        judgements = judgements.exclude(annotator_id=project.suggestion_judge_id)
    return judgements.count()


def retrain_config(project: Project, warm_from: TrainingRun | None) -> dict[str, Any]:
    """The reward-model settings of a retrain: the project's ensemble size as K heads on one
    encoder, warm-started from ``warm_from``'s final folder when it has the same K."""
    size = project.continuous_rm_ensemble_size
    config: dict[str, Any] = {"ensemble_size": size, "ensemble_mode": "heads"}
    if warm_from is not None and (warm_from.config or {}).get("ensemble_size", 1) == size:
        final = Path(warm_from.output_dir) / "final"
        if final.is_dir():
            config["warm_start"] = str(final)
    return config


def continuous_rm_check(*, project: Project) -> str:
    """Start a retrain when one is due; returns what happened: "off" (the setting is off),
    "waiting" (fewer than N new judgements, or too few consensus pairs), "running" (a retrain
    is queued or running; nothing owed), "followup" (one is running and another came due: it is
    marked, once), or "started"."""
    project = Project.objects.get(pk=project.pk)
    if not project.continuous_rm:
        return "off"
    ContinuousRewardModel.objects.get_or_create(project=project)
    with transaction.atomic():
        state = ContinuousRewardModel.objects.select_for_update(of=("self",)).get(project=project)
        labels = human_judgements(project)
        due = labels - state.labels_at_last_start >= project.continuous_rm_every
        if state.current_run is not None and state.current_run.status in ACTIVE:
            if (due or state.followup) and not state.followup:
                state.followup = True
                state.save(update_fields=["followup", "updated_at"])
                return "followup"
            return "running"
        if not (due or state.followup):
            return "waiting"
        export = dataset_export(project=project)
        if export.n_pairs < MIN_PAIRS:
            return "waiting"
        run = run_create(
            name=f"{project.slug} continuous RM #{state.retrains + 1}",
            kind="rm",
            base_model=CONTINUOUS_RM_BASE_MODEL,
            snapshot=snapshot_for(export=export, name=f"{project.slug} consensus"),
            config=retrain_config(project, state.last_succeeded_run),
        )
        run_launch(run=run, user=None)
        state.current_run = run
        state.labels_at_last_start = labels
        state.followup = False
        state.retrains += 1
        state.save()
    return "started"


def continuous_rm_check_all() -> dict[str, str]:
    """``continuous_rm_check`` on every project with the setting on: {slug: outcome}."""
    return {
        project.slug: continuous_rm_check(project=project)
        for project in Project.objects.filter(continuous_rm=True, archived_at=None)
    }


def learning_curve_record(*, run: TrainingRun) -> LearningCurvePoint | None:
    """The retrain's point of its project's learning curve: the consensus pairs it learnt from
    (its snapshot's) and its held-out accuracy (None when it reported none)."""
    accuracy = (run.summary or {}).get("eval/accuracy")
    if accuracy is None:
        return None
    point, _ = LearningCurvePoint.objects.get_or_create(
        project=run.snapshot.export.project,
        run_id=run.pk,
        defaults={"labels": run.snapshot.n_pairs, "accuracy": float(accuracy)},
    )
    return point


def _messages(prompt: Any) -> tuple[tuple[str, str], ...]:
    if prompt.messages:
        return tuple((m["role"], m["content"]) for m in prompt.messages)
    return (("user", prompt.text),)


def comparisons_score(*, project: Project, folder: str | Path, batch_size: int = 32) -> int:
    """Score every comparison of ``project`` with the reward ensemble in ``folder`` (both
    responses, [K, N] each) and store the scores (``ensemble_scores_store``: preference,
    disagreement, overlap targets, queue order). Worker only: loads torch. Returns N."""
    import numpy as np
    import torch

    from training.recipes.scoring import load_reward_ensemble

    ensemble = load_reward_ensemble(
        folder, "cuda" if torch.cuda.is_available() else "cpu", max_length=512, prompt_budget=256
    )
    rows = list(
        Comparison.objects.filter(project=project)
        .select_related("prompt", "response_a", "response_b")
        .order_by("id")
    )
    if not rows:
        return 0
    prompts = [_messages(c.prompt) for c in rows]
    a = ensemble.score(prompts, [c.response_a.text for c in rows], batch_size=batch_size)
    b = ensemble.score(prompts, [c.response_b.text for c in rows], batch_size=batch_size)
    return ensemble_scores_store(
        project=project,
        comparison_ids=[c.pk for c in rows],
        rewards_a=np.asarray(a.numpy(), dtype=np.float64),
        rewards_b=np.asarray(b.numpy(), dtype=np.float64),
    )


def continuous_rm_after_run(*, run_id: int) -> str:
    """After a retrain ends: a succeeded one becomes the warm start of the next, a learning-curve
    point, and the queue's scores; then the check runs again (the follow-up, if one is owed).
    Returns the check's outcome ("not a retrain" for another run)."""
    state = ContinuousRewardModel.objects.filter(current_run_id=run_id).first()
    if state is None:
        return "not a retrain"
    run = TrainingRun.objects.select_related("snapshot__export__project").get(pk=run_id)
    if run.status == Status.SUCCEEDED:
        learning_curve_record(run=run)
        comparisons_score(project=state.project, folder=Path(run.output_dir) / "final")
        ContinuousRewardModel.objects.filter(pk=state.pk).update(last_succeeded_run=run)
    ContinuousRewardModel.objects.filter(pk=state.pk, current_run_id=run_id).update(
        current_run=None
    )
    return continuous_rm_check(project=state.project)


def retrain_finished_hook(*, run_id: int) -> None:
    """Called after any run's attempt ends (the gpu task): a continuous retrain's after-run work
    is sent to the gpu queue (it scores with torch)."""
    if ContinuousRewardModel.objects.filter(current_run_id=run_id).exists():
        task_send(
            "training.tasks.continuous_rm_after_run",
            args=[run_id],
            queue=settings.CONCORD_GPU_QUEUE,
        )
