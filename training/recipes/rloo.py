"""RLOO recipe (Ahmadian et al. 2024): K sampled responses per prompt, each baselined by the mean
reward of the other K - 1, with a KL penalty against the frozen reference folded into the reward.

Per step: sample K responses for each of B prompts (the policy's chat template, temperature T),
score them with the reward model, shape (normalise, length and missing-EOS penalties), subtract
kl_coef * sum_t (log pi - log pi_ref), take leave-one-out advantages, and make one REINFORCE step
on -A * log pi(y | x) averaged over the B * K samples. The policy's log-probabilities for the KL and
the gradient come from the same forward pass (the update is on-policy).

Under torchrun each rank samples for its contiguous block of the B prompts (all K samples of a
prompt stay on one rank, so the leave-one-out baselines are local), divides its loss by the global
B * K and the gradients are summed before the step: the single-process step on the same samples.
The normaliser is fitted on every rank's first scores, and the KL controller sees the global KL.
"""

from __future__ import annotations

from typing import Any

import torch

from training.algorithms import kl_estimate, rloo_advantages, segment_sum
from training.algorithms.shaping import RewardNormalizer
from training.recipes.callbacks import TrainingCallback
from training.recipes.config import RLOOConfig
from training.recipes.data import EpochSampler, load_prompts
from training.recipes.distributed import all_reduce_sum, seed_rank_streams
from training.recipes.loop import finish_run, mean_metrics, start_run
from training.recipes.online import (
    eval_due,
    evaluate_policy,
    fit_normalizer,
    gather_scores,
    load_online_models,
    make_kl_controller,
    require_prompts_per_rank,
    restore_online_checkpoint,
    rollout_metrics,
    sample_rollouts,
    save_online_checkpoint,
    score_rollouts,
    shape_rewards,
    split_eval_prompts,
)
from training.recipes.packing import build_batch, can_share_prompts, completion_token_logprobs
from training.recipes.runtime import (
    Throughput,
    TrainResult,
    autocast,
    build_scheduler,
    memory_fraction,
    peak_memory_bytes,
    total_steps_for,
)
from training.recipes.samples import rollout_samples
from training.recipes.updates import make_updates
from training.recipes.zero import require_zero_available


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
    ranks, device = run.ranks, run.device
    require_zero_available(config, device.type)
    resume_from = run.resume_from
    models = load_online_models(config, device=device, resume_from=resume_from)
    policy, reference, tokenizer = models.policy, models.reference, models.tokenizer
    packed = models.packed
    prompts, eval_prompts = split_eval_prompts(load_prompts(config.data), config.eval_prompts)
    pad_id = tokenizer.pad_token_id
    k = config.rloo_k

    require_prompts_per_rank(len(prompts), config.batch_size, ranks)
    sampler = EpochSampler(len(prompts), config.batch_size, config.seed)
    total_steps = total_steps_for(config, sampler.batches_per_epoch)
    updates = make_updates(config, policy, ranks=ranks, device=device)
    scheduler = build_scheduler(updates.optimizer, config, total_steps)
    kl_controller = make_kl_controller(config, total_steps)
    normalizer: RewardNormalizer | None = None
    seed_rank_streams(config.seed, ranks)
    start_step = 0
    if resume_from is not None:
        start_step, normalizer = restore_online_checkpoint(
            run, updates, resume_from, scheduler=scheduler, kl_controller=kl_controller
        )

    run.callback.on_start(total_steps=total_steps, config=config.to_dict())
    throughput = Throughput()
    pending: list[dict[str, float]] = []
    status, step = "completed", start_step
    for step_index, epoch, batch_index in sampler.positions(start_step, total_steps):
        step = step_index + 1
        index = sampler.batch(epoch, batch_index)
        batch_prompts = [prompts[i] for i in ranks.block(index)]
        step_samples = len(index) * k  # over every rank
        with throughput.timing():
            with autocast(device, config.bf16):
                rollouts = sample_rollouts(
                    policy,
                    tokenizer,
                    models.encoder,
                    [p for p in batch_prompts for _ in range(k)],
                    temperature=config.temperature,
                    top_p=config.top_p,
                    max_new_tokens=config.max_new_tokens,
                )
                scores = score_rollouts(models.scorer, rollouts, batch_size=len(rollouts))
            if normalizer is None and config.reward_range is not None:
                normalizer = fit_normalizer(config, gather_scores(scores, ranks, device))
            shaped = shape_rewards(scores, rollouts, config, normalizer).to(device)
            n = len(rollouts)
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
            kl_tokens = kl_estimate(logps.detach(), ref_logps, config.kl_estimator)  # type: ignore[arg-type]
            kl = segment_sum(kl_tokens, batch.segment_ids, n)
            rewards = shaped - kl_controller.value * kl
            advantages = rloo_advantages(rewards.view(-1, k)).view(-1)
            sequence_logps = segment_sum(logps, batch.segment_ids, n)
            # This rank's share of the mean over every rank's samples (the mean itself in one process).
            loss = -(advantages.detach() * sequence_logps).mean() * (n / step_samples)
            updates.backward(loss)
            grad_norm = updates.step()
            scheduler.step()
        metrics, n_all, tokens = rollout_metrics(
            rollouts,
            scores=scores,
            shaped=shaped,
            kl=kl,
            ranks=ranks,
            device=device,
            missing_eos_penalty=config.missing_eos_penalty,
            **{"reward/total_mean": rewards, "negative_logp": -sequence_logps.detach()},
        )
        # Entropy per response token, estimated by the sampled tokens' -log pi (unbiased: they
        # were drawn from this tempered distribution); the monitoring alert reads "entropy".
        metrics["entropy"] = metrics.pop("negative_logp") / max(metrics["response_length"], 1e-9)
        kl_coef = kl_controller.value
        kl_controller.update(metrics["kl"], n_all)
        throughput.items += n_all
        throughput.tokens += tokens
        pending.append(
            {
                **all_reduce_sum({"loss": float(loss.detach())}, ranks, device),
                **metrics,
                "kl_coef": kl_coef,
                "grad_norm": grad_norm,
                "learning_rate": scheduler.get_last_lr()[0],
            }
        )
        run.callback.on_step(step=step, total_steps=total_steps)
        if step % config.eval_every == 0 or step == total_steps:
            samples = rollout_samples(
                rollouts=rollouts,
                rewards=rewards.detach().float().cpu().tolist(),
                figures={"score": scores.float().cpu().tolist(), "kl": kl.float().cpu().tolist()},
            )
            run.callback.on_samples(step=step, samples=samples)
        evaluated = (
            evaluate_policy(models, eval_prompts, config, ranks=ranks, device=device)
            if eval_due(config, step, total_steps, len(eval_prompts))
            else {}
        )
        if step % config.log_every == 0 or step == total_steps or evaluated:
            logged = mean_metrics(pending)
            logged.update(
                evaluated,
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
            save_online_checkpoint(
                run,
                updates,
                step=step,
                policy=policy,
                tokenizer=tokenizer,
                scheduler=scheduler,
                kl_controller=kl_controller,
                normalizer=normalizer,
                trainer_state={"epoch": epoch, "batch_in_epoch": batch_index + 1, "kind": "rloo"},
            )
        if stop and step < total_steps:
            status = "cancelled"
            break

    summary = {
        "kind": "rloo",
        "prompts": len(prompts),
        "eval_prompts": len(eval_prompts),
        "samples_trained": throughput.items,
        "tokens_trained": throughput.tokens,
        "train_seconds": throughput.seconds,
        "samples_per_second": throughput.per_second(throughput.items),
        "tokens_per_second": throughput.per_second(throughput.tokens),
        "kl_coef": kl_controller.value,
        **models.encoder.fit.summary(),
        **models.scorer.fit.summary(),
        "packed": packed,
        "bf16": config.bf16,
        "peak_memory_bytes": peak_memory_bytes(device),
        "reward_clusters": models.scorer.conditioned_clusters(),
    }
    return finish_run(
        run, status=status, step=step, model=policy, tokenizer=tokenizer, summary=summary
    )
