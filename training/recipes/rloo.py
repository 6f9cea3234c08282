"""RLOO recipe (Ahmadian et al. 2024): K sampled responses per prompt, each baselined by the mean
reward of the other K - 1, with a KL penalty against the frozen reference folded into the reward.

Per step: sample K responses for each of B prompts (the policy's chat template, temperature T),
score them with the reward model, shape (normalise, length and missing-EOS penalties), subtract
kl_coef * sum_t (log pi - log pi_ref), take leave-one-out advantages, and make one REINFORCE step
on -A * log pi(y | x) averaged over the B * K samples. The policy's log-probabilities for the KL and
the gradient come from the same forward pass (the update is on-policy); ``micro_batch_size``
prompts (with their K samples) go through it at a time, the passes' gradients adding up.

Under torchrun each rank samples for its contiguous block of the B prompts (all K samples of a
prompt stay on one rank, so the leave-one-out baselines are local), divides its loss by the global
B * K and the gradients are summed before the step: the single-process step on the same samples.
The normaliser is fitted on every rank's first scores, and the KL controller sees the global KL.
"""

from __future__ import annotations

import torch

from training.algorithms import kl_estimate, rloo_advantages, segment_sum
from training.recipes.callbacks import TrainingCallback
from training.recipes.config import RLOOConfig
from training.recipes.distributed import all_reduce_sum
from training.recipes.loop import Position, StepOutcome, start_run
from training.recipes.online import (
    rollout_metrics,
    sample_rollouts,
    score_rollouts,
    shape_rewards,
    update_passes,
)
from training.recipes.online_run import OnlineState, fitted_normalizer, run_online, setup_online
from training.recipes.runtime import Throughput, TrainResult, autocast
from training.recipes.samples import rollout_samples


def train_rloo(config: RLOOConfig, callback: TrainingCallback | None = None) -> TrainResult:
    """Run RLOO as configured; resumes from the newest checkpoint in ``output_dir`` when allowed."""
    run = start_run(config, callback)
    return run_online(setup_online(run, config), "rloo", rloo_step)


def rloo_step(state: OnlineState, at: Position, throughput: Throughput) -> StepOutcome:
    """One RLOO step on the prompts of the sampler's batch at ``at`` (this rank's block): sample K
    each, score and shape, fold in the KL, leave-one-out advantages, one REINFORCE update."""
    config, run, models = state.config, state.run, state.models
    device, k = run.device, config.rloo_k
    index = state.sampler.batch(at.epoch, at.batch_index)
    step_samples = len(index) * k  # over every rank
    with throughput.timing():
        with autocast(device, config.bf16):
            rollouts = sample_rollouts(
                models.policy,
                models.tokenizer,
                models.encoder,
                [state.prompts[i] for i in run.ranks.block(index) for _ in range(k)],
                temperature=config.temperature,
                top_p=config.top_p,
                max_new_tokens=config.max_new_tokens,
                engine=config.engine,
            )
            scored = score_rollouts(models.scorer, rollouts, len(rollouts), config)
            scores = scored.reward
        shaped = shape_rewards(scores, rollouts, config, fitted_normalizer(state, scores)).to(
            device
        )
        sequences = [r.sequence() for r in rollouts]
        kl, rewards, sequence_logps, loss_value = reinforce_update(
            state, sequences, shaped, step_samples=step_samples
        )
        grad_norm = state.updates.step()
        state.scheduler.step()
    metrics, n_all, tokens = rollout_metrics(
        rollouts,
        scores=scores,
        shaped=shaped,
        kl=kl,
        ranks=run.ranks,
        device=device,
        missing_eos_penalty=config.missing_eos_penalty,
        **{"reward/total_mean": rewards, "negative_logp": -sequence_logps, **scored.columns},
    )
    # Entropy per response token, estimated by the sampled tokens' -log pi (unbiased: they
    # were drawn from this tempered distribution); the monitoring alert reads "entropy".
    metrics["entropy"] = metrics.pop("negative_logp") / max(metrics["response_length"], 1e-9)
    kl_coef = state.count(throughput, metrics, n_all, tokens)
    samples = None
    if state.samples_due(at.step):
        samples = rollout_samples(
            rollouts=rollouts,
            rewards=rewards.float().cpu().tolist(),
            figures={"score": scores.float().cpu().tolist(), "kl": kl.float().cpu().tolist()},
        )
    loss_sum = all_reduce_sum({"loss": loss_value}, run.ranks, device)
    return StepOutcome(
        {
            **loss_sum,
            **metrics,
            "kl_coef": kl_coef,
            "grad_norm": grad_norm,
            "learning_rate": state.scheduler.get_last_lr()[0],
        },
        samples=samples,
    )


def reinforce_update(
    state: OnlineState, sequences: list, shaped: torch.Tensor, *, step_samples: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """The backward of one RLOO update on this rank's R samples (K per prompt, prompt after
    prompt), in passes of ``micro_batch_size`` prompts (``online.update_passes``: a prompt's K
    samples share a pass, so its leave-one-out baseline is whole) whose gradients add up. Per pass:
    the reference's and the policy's log-probs, the KL folded into the shaped rewards [R], the
    advantages, and the pass's share of -mean(A * log pi) over every rank's ``step_samples``
    samples. Returns (KL
    [R], rewards [R], summed log-probs [R], all detached; this rank's loss)."""
    config, models, run = state.config, state.models, state.run
    k, n = config.rloo_k, len(sequences)
    kl = torch.zeros(n, device=run.device)
    rewards = torch.zeros(n, device=run.device)
    sequence_logps = torch.zeros(n, device=run.device)
    loss_value = 0.0
    for part in update_passes(n, k, config.micro_batch_size):
        chunk = sequences[part]
        with torch.no_grad(), autocast(run.device, config.bf16):
            ref_logps, _ = state.token_logprobs(models.reference, chunk)
        with autocast(run.device, config.bf16):
            logps, batch = state.token_logprobs(models.policy, chunk)
        kl_tokens = kl_estimate(logps.detach(), ref_logps, config.kl_estimator)  # type: ignore[arg-type]
        kl[part] = segment_sum(kl_tokens, batch.segment_ids, len(chunk))
        rewards[part] = shaped[part] - state.kl_controller.value * kl[part]
        advantages = rloo_advantages(rewards[part].view(-1, k)).view(-1)
        totals = segment_sum(logps, batch.segment_ids, len(chunk))
        # This pass's share of the mean over every rank's samples.
        loss = -(advantages.detach() * totals).sum() / step_samples
        state.updates.backward(loss)
        sequence_logps[part] = totals.detach()
        loss_value += float(loss.detach())
    return kl, rewards, sequence_logps, loss_value
