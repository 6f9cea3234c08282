"""The run around PPO's, RLOO's and GRPO's steps: set-up (models, held-out prompts, sampler, updates,
KL controller, restore), the step loop with held-out evaluation and samples, checkpoints that keep the
KL controller, the normaliser and every rank's RNG, and the summary. The steps themselves are in
``ppo.py``, ``rloo.py`` and ``grpo.py``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from training.algorithms import KLController, RewardNormalizer
from training.recipes.checkpoint_files import checkpoint_step
from training.recipes.config import OnlineRLConfig
from training.recipes.data import EpochSampler, Messages, load_prompts
from training.recipes.distributed import seed_rank_streams
from training.recipes.eval_kl import evaluation_kl
from training.recipes.loop import LoopEnd, Position, Run, StepOutcome, finish_run, run_steps
from training.recipes.online import (
    OnlineModels,
    eval_due,
    evaluate_policy,
    fit_normalizer,
    gather_scores,
    load_online_models,
    make_kl_controller,
    rank_rng_states,
    require_prompts_per_rank,
    restore_rank_rng,
    split_eval_prompts,
)
from training.recipes.packing import build_batch, can_share_prompts, completion_token_logprobs
from training.recipes.runtime import (
    Throughput,
    TrainResult,
    build_scheduler,
    peak_memory_bytes,
    total_steps_for,
)
from training.recipes.updates import PlainUpdates, ZeroUpdates, make_updates
from training.recipes.zero import require_zero_available


@dataclass
class OnlineState:
    """What an online run holds between steps: the models, the training and held-out prompts,
    the updates (plain or DeepSpeed) of the policy and ``extra_modules`` (PPO's value head), the
    schedule, the KL controller, the reward normaliser (fitted on the first scores), where the
    run starts, and ``eval_score`` (how held-out answers are scored when not by the reward model
    alone: GRPO's total reward)."""

    run: Run
    config: OnlineRLConfig
    models: OnlineModels
    prompts: list[Messages]
    eval_prompts: list[Messages]
    sampler: EpochSampler
    total_steps: int
    start_step: int
    updates: PlainUpdates | ZeroUpdates
    scheduler: Any
    kl_controller: KLController
    normalizer: RewardNormalizer | None
    extra_modules: dict[str, nn.Module] | None
    eval_score: Callable[[list[Any]], torch.Tensor] | None = None

    def samples_due(self, step: int) -> bool:
        """Whether ``step`` shows its rollouts (every ``eval_every`` steps and the last)."""
        return step % self.config.eval_every == 0 or step == self.total_steps

    def evaluate(self, step: int) -> dict[str, float]:
        """The held-out metrics when due at ``step`` (``evaluate_policy``), with the policy's KL
        from its reference on the same prompts (``eval_kl``, when the run has a reference:
        ``eval_kl.evaluation_kl``), else {}."""
        if not eval_due(self.config, step, self.total_steps, len(self.eval_prompts)):
            return {}
        metrics = evaluate_policy(
            self.models,
            self.eval_prompts,
            self.config,
            ranks=self.run.ranks,
            device=self.run.device,
            score=self.eval_score,
        )
        kl = evaluation_kl(
            self.models,
            self.eval_prompts,
            self.config,
            ranks=self.run.ranks,
            device=self.run.device,
            token_logprobs=self.token_logprobs,
        )
        return metrics if kl is None else {**metrics, "eval_kl": kl}

    def token_logprobs(self, model: Any, sequences: list[Any]) -> tuple[torch.Tensor, Any]:
        """Per-token completion log-probs [M] of ``sequences`` (TokenizedSequence) under ``model``
        at the sampling temperature, and the batch (SequenceBatch) they were laid out in."""
        batch = build_batch(
            sequences,
            packed=self.models.packed,
            pad_token_id=self.models.tokenizer.pad_token_id,
            device=self.run.device,
            share_prompts=self.models.packed and can_share_prompts(model),
        )
        logps = completion_token_logprobs(model, batch, temperature=self.config.temperature)
        return logps, batch

    def count(
        self, throughput: Throughput, metrics: dict[str, float], rollouts: int, tokens: int
    ) -> float:
        """Count a step's rollouts and tokens (over every rank), feed its KL to the controller;
        returns the KL coefficient the step used."""
        kl_coef = self.kl_controller.value
        self.kl_controller.update(metrics["kl"], rollouts)
        throughput.items += rollouts
        throughput.tokens += tokens
        return kl_coef


def setup_online(
    run: Run,
    config: OnlineRLConfig,
    *,
    extra_modules: Callable[[Any], dict[str, nn.Module]] | None = None,
) -> OnlineState:
    """Models (the policy from the checkpoint when resuming), prompts, sampler, the updates of the
    policy and of ``extra_modules(policy)`` (trained beside it), schedule and KL controller, each
    rank's sampling stream, restored to where the run stopped."""
    device, ranks = run.device, run.ranks
    require_zero_available(config, device.type)
    resume_from = run.resume_from
    models = load_online_models(config, device=device, resume_from=resume_from)
    prompts, eval_prompts = split_eval_prompts(load_prompts(config.data), config.eval_prompts)
    extra = None
    if extra_modules is not None:
        extra = {name: m.to(device) for name, m in extra_modules(models.policy).items()}
    require_prompts_per_rank(len(prompts), config.batch_size, ranks)
    sampler = EpochSampler(len(prompts), config.batch_size, config.seed)
    total_steps = total_steps_for(config, sampler.batches_per_epoch)
    trained = models.policy if extra is None else nn.ModuleDict({"policy": models.policy, **extra})
    updates = make_updates(config, trained, ranks=ranks, device=device)
    state = OnlineState(
        run=run,
        config=config,
        models=models,
        prompts=prompts,
        eval_prompts=eval_prompts,
        sampler=sampler,
        total_steps=total_steps,
        start_step=0,
        updates=updates,
        scheduler=build_scheduler(updates.optimizer, config, total_steps),
        kl_controller=make_kl_controller(config, total_steps),
        normalizer=None,
        extra_modules=extra,
    )
    seed_rank_streams(config.seed, ranks)
    if resume_from is not None:
        restore_online_checkpoint(state, resume_from)
    return state


def run_online(
    state: OnlineState,
    kind: str,
    train_step: Callable[[OnlineState, Position, Throughput], StepOutcome],
) -> TrainResult:
    """Run ``train_step`` over the run's steps (``loop.run_steps``) with held-out evaluation and
    online checkpoints; save the final policy and the summary."""
    run = state.run
    end = run_steps(
        run,
        state.sampler,
        start_step=state.start_step,
        total_steps=state.total_steps,
        rate_name="samples",
        train_step=lambda at, throughput: train_step(state, at, throughput),
        save_checkpoint=lambda at: save_online_checkpoint(state, at, kind),
        evaluate=state.evaluate,
    )
    return finish_run(
        run,
        status=end.status,
        step=end.step,
        model=state.models.policy,
        tokenizer=state.models.tokenizer,
        summary=online_summary(state, end, kind),
    )


def online_summary(state: OnlineState, end: LoopEnd, kind: str) -> dict[str, Any]:
    """The run's summary: prompts, rates, the final KL coefficient, what was fitted or cut."""
    throughput, models = end.throughput, state.models
    return {
        "kind": kind,
        "prompts": len(state.prompts),
        "eval_prompts": len(state.eval_prompts),
        "samples_trained": throughput.items,
        "tokens_trained": throughput.tokens,
        "train_seconds": throughput.seconds,
        "samples_per_second": throughput.per_second(throughput.items),
        "tokens_per_second": throughput.per_second(throughput.tokens),
        "kl_coef": state.kl_controller.value,
        **models.encoder.fit.summary(),
        **(models.scorer.fit.summary() if models.scorer is not None else {}),
        "packed": models.packed,
        "bf16": state.config.bf16,
        "peak_memory_bytes": peak_memory_bytes(state.run.device),
        "reward_clusters": models.scorer.conditioned_clusters() if models.scorer else 0,
        "reference_model": models.reference is not None,
    }


def save_online_checkpoint(state: OnlineState, at: Position, kind: str) -> None:
    """Checkpoint an online run after step ``at`` (every rank calls it): policy weights, optimiser
    (or DeepSpeed's sharded states beside), schedule, KL controller, normaliser and each rank's
    RNG."""
    run, updates = state.run, state.updates
    rank_rng = rank_rng_states(run.ranks)
    updates.save_states(run.output_dir, at.step)
    run.save_checkpoint(
        step=at.step,
        model=state.models.policy,
        tokenizer=state.models.tokenizer,
        optimizer=updates.checkpoint_optimizer,
        scheduler=state.scheduler,
        trainer_state=at.trainer_state(kind),
        extra_modules=state.extra_modules,
        extra_state={
            "kl_controller": state.kl_controller.state_dict(),
            "normalizer": None if state.normalizer is None else vars(state.normalizer),
            "rank_rng": rank_rng,
        },
    )
    updates.prune_states(
        run.output_dir, {checkpoint_step(path) for path in run.checkpoints.checkpoints()}
    )


def restore_online_checkpoint(state: OnlineState, resume_from: Path) -> None:
    """Load what ``save_online_checkpoint`` wrote into ``state`` (the policy's weights were loaded
    from ``resume_from`` already): step, optimiser, schedule, KL controller, normaliser, RNG."""
    run = state.run
    step, extra = run.restore_training_state(
        resume_from,
        optimizer=state.updates.checkpoint_optimizer,
        scheduler=state.scheduler,
        extra_modules=state.extra_modules,
    )
    state.updates.load_states(run.output_dir, step)
    state.kl_controller.load_state_dict(extra["kl_controller"])
    restore_rank_rng(extra.get("rank_rng"), run.ranks)
    if extra.get("normalizer"):
        state.normalizer = RewardNormalizer(**extra["normalizer"])
    state.start_step = step


def fitted_normalizer(state: OnlineState, scores: torch.Tensor) -> RewardNormalizer | None:
    """The run's reward normaliser, fitted on the first step's ``scores`` [R] of every rank."""
    if state.normalizer is None and state.config.reward_range is not None:
        state.normalizer = fit_normalizer(
            state.config, gather_scores(scores, state.run.ranks, state.run.device)
        )
    return state.normalizer
