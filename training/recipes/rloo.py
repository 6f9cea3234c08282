"""RLOO recipe (Ahmadian et al. 2024): K sampled responses per prompt, each baselined by the mean
reward of the other K - 1, with a KL penalty against the frozen reference folded into the reward.

Per step: sample K responses for each of B prompts (the policy's chat template, temperature T),
score them with the reward model, shape (normalise, length and missing-EOS penalties), subtract
kl_coef * sum_t (log pi - log pi_ref), take leave-one-out advantages, and make one REINFORCE step
on -A * log pi(y | x) averaged over the B * K samples. The policy's log-probabilities for the KL and
the gradient come from the same forward pass (the update is on-policy).
"""

from __future__ import annotations

from typing import Any

import torch

from training.algorithms import kl_estimate, rloo_advantages, segment_sum
from training.algorithms.shaping import RewardNormalizer
from training.recipes.callbacks import TrainingCallback
from training.recipes.config import RLOOConfig
from training.recipes.data import ChatEncoder, EpochSampler, load_prompts
from training.recipes.loop import finish_run, mean_metrics, optimizer_step, start_run
from training.recipes.models import load_causal_lm, load_tokenizer
from training.recipes.online import (
    fit_normalizer,
    make_kl_controller,
    repetition_rate,
    sample_rollouts,
    score_rollouts,
    shape_rewards,
)
from training.recipes.packing import build_batch, can_share_prompts, completion_token_logprobs
from training.recipes.reward_model import RewardScorer, load_sequence_classifier
from training.recipes.runtime import (
    Throughput,
    TrainResult,
    autocast,
    build_optimizer,
    build_scheduler,
    memory_fraction,
    peak_memory_bytes,
    total_steps_for,
)


def _token_logprobs(model: Any, sequences: list, *, packed: bool, pad_id: int, device, temperature):
    batch = build_batch(
        sequences,
        packed=packed,
        pad_token_id=pad_id,
        device=device,
        share_prompts=packed and can_share_prompts(model),
    )
    return completion_token_logprobs(model, batch, temperature=temperature), batch


def train_rloo(config: RLOOConfig, callback: TrainingCallback | None = None) -> TrainResult:
    """Run RLOO as configured; resumes from the newest checkpoint in ``output_dir`` when allowed."""
    run = start_run(config, callback)
    if run.ranks.distributed:
        raise RuntimeError(
            "RLOO runs in one process for now (data-parallel RLOO is not implemented): "
            "launch it on one GPU"
        )
    device = run.device
    tokenizer = load_tokenizer(config.model, padding_side="left")
    encoder = ChatEncoder(
        tokenizer, max_length=config.max_length, prompt_budget=config.prompt_budget
    )
    prompts = load_prompts(config.data)
    resume_from = run.resume_from
    policy, packed = load_causal_lm(
        resume_from or config.model,
        device=device,
        packing=config.packing,
        bf16=config.bf16,
        gradient_checkpointing=config.gradient_checkpointing,
        no_dropout=config.disable_dropout,
    )
    reference, _ = load_causal_lm(
        config.ref_model or config.model, device=device, packing=config.packing, trainable=False
    )
    reward_tokenizer = load_tokenizer(config.reward_model)
    reward_model = (
        load_sequence_classifier(
            config.reward_model,
            device=device,
            tokenizer=reward_tokenizer,
            packing=config.packing and bool(getattr(reward_tokenizer, "chat_template", None)),
        )
        .eval()
        .requires_grad_(False)
    )
    scorer = RewardScorer(
        reward_model,
        reward_tokenizer,
        max_length=config.max_length + config.max_new_tokens,
        prompt_budget=config.prompt_budget,
    )
    pad_id = tokenizer.pad_token_id
    k = config.rloo_k

    sampler = EpochSampler(len(prompts), config.batch_size, config.seed)
    total_steps = total_steps_for(config, sampler.batches_per_epoch)
    optimizer = build_optimizer(policy.parameters(), config, device)
    scheduler = build_scheduler(optimizer, config, total_steps)
    kl_controller = make_kl_controller(config, total_steps)
    normalizer: RewardNormalizer | None = None
    start_step = 0
    if resume_from is not None:
        state, extra = run.checkpoints.restore(
            resume_from, optimizer=optimizer, scheduler=scheduler
        )
        start_step = state.step
        kl_controller.load_state_dict(extra["kl_controller"])
        if extra.get("normalizer"):
            normalizer = RewardNormalizer(**extra["normalizer"])

    run.callback.on_start(total_steps=total_steps, config=config.to_dict())
    throughput = Throughput()
    pending: list[dict[str, float]] = []
    status, step = "completed", start_step
    for step_index, epoch, batch_index in sampler.positions(start_step, total_steps):
        step = step_index + 1
        batch_prompts = [prompts[i] for i in sampler.batch(epoch, batch_index)]
        with throughput.timing():
            with autocast(device, config.bf16):
                rollouts = sample_rollouts(
                    policy,
                    tokenizer,
                    encoder,
                    [p for p in batch_prompts for _ in range(k)],
                    temperature=config.temperature,
                    top_p=config.top_p,
                    max_new_tokens=config.max_new_tokens,
                )
                scores = score_rollouts(scorer, rollouts, batch_size=len(rollouts))
            if normalizer is None and config.reward_range is not None:
                normalizer = fit_normalizer(config, scores)
            shaped = shape_rewards(scores, rollouts, config, normalizer).to(device)
            sequences = [r.sequence() for r in rollouts]
            with torch.no_grad(), autocast(device, config.bf16):
                ref_logps, _ = _token_logprobs(
                    reference,
                    sequences,
                    packed=packed,
                    pad_id=pad_id,
                    device=device,
                    temperature=config.temperature,
                )
            with autocast(device, config.bf16):
                logps, batch = _token_logprobs(
                    policy,
                    sequences,
                    packed=packed,
                    pad_id=pad_id,
                    device=device,
                    temperature=config.temperature,
                )
            n = len(rollouts)
            kl_tokens = kl_estimate(logps.detach(), ref_logps, config.kl_estimator)  # type: ignore[arg-type]
            kl = segment_sum(kl_tokens, batch.segment_ids, n)
            rewards = shaped - kl_controller.value * kl
            advantages = rloo_advantages(rewards.view(-1, k)).view(-1)
            sequence_logps = segment_sum(logps, batch.segment_ids, n)
            loss = -(advantages.detach() * sequence_logps).mean()
            loss.backward()
            grad_norm = optimizer_step(
                policy.parameters(), optimizer, scheduler, config.max_grad_norm
            )
        kl_coef = kl_controller.value
        kl_controller.update(float(kl.mean()), n)
        throughput.items += n
        throughput.tokens += sum(len(seq.input_ids) for seq in sequences)
        lengths = batch.completion_lengths.float()
        pending.append(
            {
                "loss": float(loss.detach()),
                "reward/score_mean": float(scores.mean()),
                "reward/score_std": float(scores.std()) if n > 1 else 0.0,
                "reward/shaped_mean": float(shaped.mean()),
                "reward/total_mean": float(rewards.mean()),
                "kl": float(kl.mean()),
                "kl_coef": kl_coef,
                "response_length": float(lengths.mean()),
                "repetition_rate": repetition_rate(rollouts),
                "eos_rate": sum(r.finished for r in rollouts) / n,
                "grad_norm": grad_norm,
                "learning_rate": scheduler.get_last_lr()[0],
            }
        )
        run.callback.on_step(step=step, total_steps=total_steps)
        if step % config.log_every == 0 or step == total_steps:
            logged = mean_metrics(pending)
            logged.update(
                epoch=epoch + (batch_index + 1) / sampler.batches_per_epoch,
                samples_per_second=throughput.per_second(throughput.items),
                tokens_per_second=throughput.per_second(throughput.tokens),
            )
            fraction = memory_fraction(device)
            if fraction is not None:
                logged["memory_fraction"] = fraction
            run.callback.on_log(step=step, metrics=logged)
            pending = []
        stop = run.stop_requested()
        if run.checkpoints.due(step) or (stop and step < total_steps):
            run.save_checkpoint(
                step=step,
                model=policy,
                tokenizer=tokenizer,
                optimizer=optimizer,
                scheduler=scheduler,
                trainer_state={"epoch": epoch, "batch_in_epoch": batch_index + 1, "kind": "rloo"},
                extra_state={
                    "kl_controller": kl_controller.state_dict(),
                    "normalizer": None if normalizer is None else vars(normalizer),
                },
            )
        if stop and step < total_steps:
            status = "cancelled"
            break

    summary = {
        "kind": "rloo",
        "prompts": len(prompts),
        "samples_trained": throughput.items,
        "tokens_trained": throughput.tokens,
        "train_seconds": throughput.seconds,
        "samples_per_second": throughput.per_second(throughput.items),
        "tokens_per_second": throughput.per_second(throughput.tokens),
        "kl_coef": kl_controller.value,
        "packed": packed,
        "bf16": config.bf16,
        "peak_memory_bytes": peak_memory_bytes(device),
    }
    return finish_run(
        run, status=status, step=step, model=policy, tokenizer=tokenizer, summary=summary
    )
