"""PPO recipe (Schulman et al. 2017; Ziegler et al. 2019; Ouyang et al. 2022) with a value head on the
policy backbone, GAE, clipped objectives, minibatch epochs and mixed rollouts.

Per step, for a batch of B prompts:

1. Rollouts (PIPELINE.md): ``anchor_fraction`` of the prompts are answered by the frozen SFT reference
   at ``anchor_temperature``, ``perturb_fraction`` by the policy with a perturbing instruction
   appended, the rest by the policy at ``temperature``. Everything after the first EOS is masked.
2. Score with the reward model, shape (normalise, length and missing-EOS penalties), and fold the
   per-token KL penalty against the reference into the rewards: r_t = -beta KL_t, plus the score on
   the last token.
3. Old log-probabilities and values from the policy before the update; GAE (gamma, lambda) gives
   advantages (whitened over the batch) and returns.
4. ``ppo_epochs`` passes over shuffled minibatches: clipped surrogate + vf_coef * clipped value loss
   - entropy_coef * entropy, one clipped AdamW step per minibatch; the passes stop early when the
   approximate KL to the rollout policy passes ``target_kl_stop``.

All log-probabilities (policy, old, reference) are of the tempered distribution softmax(logits / T)
with the policy's sampling temperature T, the distribution the policy samples from.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from training.algorithms import (
    clipped_value_loss,
    entropy_from_logits,
    gae,
    kl_early_stop,
    kl_penalized_rewards,
    masked_mean,
    masked_whiten,
    ppo_policy_loss,
)
from training.algorithms.shaping import RewardNormalizer
from training.recipes.callbacks import TrainingCallback
from training.recipes.config import PPOConfig
from training.recipes.data import ChatEncoder, EpochSampler, Messages, load_prompts
from training.recipes.loop import finish_run, mean_metrics, start_run
from training.recipes.models import load_causal_lm, load_tokenizer
from training.recipes.online import (
    Rollout,
    fit_normalizer,
    make_kl_controller,
    repetition_rate,
    sample_rollouts,
    score_rollouts,
    shape_rewards,
)
from training.recipes.packing import (
    SequenceBatch,
    build_batch,
    can_share_prompts,
    completion_token_logprobs,
    last_hidden_states,
    plain_output_weight,
)
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


class ValueHead(nn.Module):
    """hidden -> ``width`` -> 1 with dropout (PIPELINE.md), on the policy's last hidden states."""

    def __init__(self, hidden_size: int, width: int = 1024, dropout: float = 0.1) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Dropout(dropout),
            nn.Linear(hidden_size, width),
            nn.Tanh(),
            nn.Dropout(dropout),
            nn.Linear(width, 1),
        )

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [M, H] -> values [M] float32."""
        return self.net(hidden.float()).squeeze(-1)


def assign_rollout_sources(n_prompts: int, config: PPOConfig) -> list[str]:
    """'anchor', 'perturb' or 'policy' for each prompt of a batch, by PIPELINE.md's shares (rounded;
    the policy gets the remainder)."""
    n_anchor = round(n_prompts * config.anchor_fraction)
    n_perturb = min(round(n_prompts * config.perturb_fraction), n_prompts - n_anchor)
    return (
        ["anchor"] * n_anchor
        + ["perturb"] * n_perturb
        + ["policy"] * (n_prompts - n_anchor - n_perturb)
    )


def _perturbed(prompt: Messages, instruction: str) -> Messages:
    role, content = prompt[-1]
    return (*prompt[:-1], (role, f"{content}\n\n{instruction}"))


def _policy_outputs(
    policy: Any, value_head: ValueHead, batch: SequenceBatch, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(log-probs [M], values [M], entropy [M] or None) from one backbone pass."""
    hidden = last_hidden_states(policy, batch)
    logps = completion_token_logprobs(policy, batch, hidden, temperature=temperature)
    selected = hidden.index_select(0, batch.predict_index)
    values = value_head(selected)
    entropy = None
    if with_entropy:
        weight = plain_output_weight(policy)
        head = policy.get_output_embeddings()
        logits = selected @ weight.T if weight is not None else head(selected)
        entropy = entropy_from_logits(logits / temperature)
    return logps, values, entropy


def train_ppo(config: PPOConfig, callback: TrainingCallback | None = None) -> TrainResult:
    """Run PPO as configured; resumes from the newest checkpoint in ``output_dir`` when allowed."""
    run = start_run(config, callback)
    if run.ranks.distributed:
        raise RuntimeError(
            "PPO runs in one process for now (data-parallel PPO is not implemented): "
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
    value_head = ValueHead(policy.config.hidden_size, config.value_hidden, config.value_dropout).to(
        device
    )
    pad_id = tokenizer.pad_token_id
    temperature = config.temperature

    sampler = EpochSampler(len(prompts), config.batch_size, config.seed)
    total_steps = total_steps_for(config, sampler.batches_per_epoch)
    params = [*policy.parameters(), *value_head.parameters()]
    optimizer = build_optimizer(params, config, device)
    scheduler = build_scheduler(optimizer, config, total_steps)
    kl_controller = make_kl_controller(config, total_steps)
    normalizer: RewardNormalizer | None = None
    start_step = 0
    if resume_from is not None:
        state, extra = run.checkpoints.restore(
            resume_from,
            optimizer=optimizer,
            scheduler=scheduler,
            extra_modules={"value_head": value_head},
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
        sources = assign_rollout_sources(len(batch_prompts), config)
        with throughput.timing():
            rollouts = _mixed_rollouts(
                policy, reference, tokenizer, encoder, batch_prompts, sources, config, step
            )
            with autocast(device, config.bf16):
                scores = score_rollouts(scorer, rollouts, batch_size=len(rollouts))
            if normalizer is None and config.reward_range is not None:
                normalizer = fit_normalizer(config, scores)
            shaped = shape_rewards(scores, rollouts, config, normalizer).to(device)

            full = build_batch(
                [r.sequence() for r in rollouts],
                packed=packed,
                pad_token_id=pad_id,
                device=device,
                share_prompts=packed and can_share_prompts(policy),
            )
            with torch.no_grad(), autocast(device, config.bf16):
                policy.eval()
                value_head.eval()
                old_logps, old_values, _ = _policy_outputs(
                    policy, value_head, full, temperature, with_entropy=False
                )
                ref_logps = completion_token_logprobs(reference, full, temperature=temperature)
                policy.train()
                value_head.train()
            old_logps, mask = full.to_padded(old_logps)
            old_values, _ = full.to_padded(old_values)
            ref_logps, _ = full.to_padded(ref_logps)
            rewards, kl = kl_penalized_rewards(
                shaped,
                old_logps,
                ref_logps,
                mask,
                kl_coef=kl_controller.value,
                estimator=config.kl_estimator,  # type: ignore[arg-type]
            )
            advantages, returns = gae(rewards, old_values, mask, gamma=config.gamma, lam=config.lam)
            if config.whiten_advantages:
                advantages = masked_whiten(advantages, mask)
            stats = _ppo_epochs(
                policy,
                value_head,
                optimizer,
                rollouts,
                config,
                packed=packed,
                pad_id=pad_id,
                device=device,
                old_logps=old_logps,
                old_values=old_values,
                advantages=advantages,
                returns=returns,
                mask=mask,
                params=params,
            )
            scheduler.step()
        kl_per_sequence = (kl * mask).sum(dim=1)
        kl_coef = kl_controller.value
        kl_controller.update(float(kl_per_sequence.mean()), len(rollouts))
        throughput.items += len(rollouts)
        throughput.tokens += sum(len(r.prompt_ids) + len(r.response_ids) for r in rollouts)
        pending.append(
            {
                **stats,
                "reward/score_mean": float(scores.mean()),
                "reward/score_std": float(scores.std()) if len(rollouts) > 1 else 0.0,
                "reward/shaped_mean": float(shaped.mean()),
                "kl": float(kl_per_sequence.mean()),
                "kl_coef": kl_coef,
                "response_length": float(mask.sum(dim=1).float().mean()),
                "repetition_rate": repetition_rate(rollouts),
                "eos_rate": sum(r.finished for r in rollouts) / len(rollouts),
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
                trainer_state={"epoch": epoch, "batch_in_epoch": batch_index + 1, "kind": "ppo"},
                extra_modules={"value_head": value_head},
                extra_state={
                    "kl_controller": kl_controller.state_dict(),
                    "normalizer": None if normalizer is None else vars(normalizer),
                },
            )
        if stop and step < total_steps:
            status = "cancelled"
            break

    summary = {
        "kind": "ppo",
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


def _mixed_rollouts(
    policy: Any,
    reference: Any,
    tokenizer: Any,
    encoder: ChatEncoder,
    prompts: list[Messages],
    sources: list[str],
    config: PPOConfig,
    step: int,
) -> list[Rollout]:
    """Rollouts in prompt order, each from the source assigned to its prompt."""
    device = next(policy.parameters()).device
    by_source: dict[str, list[int]] = {}
    for index, source in enumerate(sources):
        by_source.setdefault(source, []).append(index)
    rollouts: list[Rollout | None] = [None] * len(prompts)
    instructions = config.perturb_instructions
    for source, indices in by_source.items():
        asked = [prompts[i] for i in indices]
        if source == "perturb":
            asked = [
                _perturbed(p, instructions[(step + j) % len(instructions)])
                for j, p in enumerate(asked)
            ]
        model = reference if source == "anchor" else policy
        temperature = config.anchor_temperature if source == "anchor" else config.temperature
        with autocast(device, config.bf16):
            sampled = sample_rollouts(
                model,
                tokenizer,
                encoder,
                asked,
                temperature=temperature,
                top_p=config.top_p,
                max_new_tokens=config.max_new_tokens,
            )
        for index, rollout in zip(indices, sampled, strict=True):
            rollouts[index] = rollout
    return [r for r in rollouts if r is not None]


def _ppo_epochs(
    policy: Any,
    value_head: ValueHead,
    optimizer: torch.optim.Optimizer,
    rollouts: list[Rollout],
    config: PPOConfig,
    *,
    packed: bool,
    pad_id: int,
    device: torch.device,
    old_logps: torch.Tensor,
    old_values: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    params: list[nn.Parameter],
) -> dict[str, float]:
    """Minibatch epochs over one rollout batch; returns mean statistics of the minibatches run."""
    rows: list[dict[str, float]] = []
    epochs_done = 0
    generator = torch.Generator().manual_seed(int(torch.randint(0, 2**31 - 1, ()).item()))
    stopped = False
    for _ in range(config.ppo_epochs):
        order = torch.randperm(len(rollouts), generator=generator).tolist()
        for start in range(0, len(order), config.minibatch_size):
            index = order[start : start + config.minibatch_size]
            batch = build_batch(
                [rollouts[i].sequence() for i in index],
                packed=packed,
                pad_token_id=pad_id,
                device=device,
            )
            with autocast(device, config.bf16):
                logps, values, entropy = _policy_outputs(
                    policy,
                    value_head,
                    batch,
                    config.temperature,
                    with_entropy=config.entropy_coef > 0,
                )
            logps, mb_mask = batch.to_padded(logps)
            values, _ = batch.to_padded(values)
            rows_index = torch.tensor(index, device=device)
            mb_old_logps, mb_advantages, mb_old_values, mb_returns = (
                t.index_select(0, rows_index)[:, : logps.shape[1]]
                for t in (old_logps, advantages, old_values, returns)
            )
            policy_loss, stats = ppo_policy_loss(
                logps, mb_old_logps, mb_advantages, mb_mask, clip_ratio=config.clip_ratio
            )
            value_loss, value_clip = clipped_value_loss(
                values, mb_old_values, mb_returns, mb_mask, clip_range=config.value_clip
            )
            loss = policy_loss + config.vf_coef * value_loss
            mean_entropy = 0.0
            if entropy is not None:
                entropy_padded, _ = batch.to_padded(entropy)
                entropy_mean = masked_mean(entropy_padded, mb_mask)
                loss = loss - config.entropy_coef * entropy_mean
                mean_entropy = float(entropy_mean.detach())
            loss.backward()
            grad_norm = (
                torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
                if config.max_grad_norm is not None
                else torch.zeros(())
            )
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            rows.append(
                {
                    "loss": float(loss.detach()),
                    "policy_loss": float(policy_loss.detach()),
                    "value_loss": float(value_loss.detach()),
                    "clip_fraction": float(stats["clip_fraction"]),
                    "approx_kl": float(stats["approx_kl"]),
                    "value_clip_fraction": float(value_clip),
                    "entropy": mean_entropy,
                    "grad_norm": float(grad_norm),
                }
            )
            if kl_early_stop(float(stats["approx_kl"]), limit=config.target_kl_stop):
                stopped = True
                break
        epochs_done += 1
        if stopped:
            break
    summary = mean_metrics(rows)
    summary.update(ppo_epochs_run=float(epochs_done), early_stopped=float(stopped))
    return summary
