"""PPO recipe (Schulman et al. 2017; Ziegler et al. 2019; Ouyang et al. 2022) with a value head on the
policy backbone, GAE, clipped objectives, minibatch epochs and mixed rollouts.

Per step, for a batch of B prompts:

1. Rollouts (PIPELINE.md): ``anchor_fraction`` of the prompts are answered by the frozen SFT reference
   at ``anchor_temperature``, ``perturb_fraction`` by the policy with a perturbing instruction
   appended, the rest by the policy at ``temperature``; ``samples_per_prompt`` responses each.
   Everything after the first EOS is masked.
2. Score with the reward model. A prompt whose responses' raw scores vary more than
   ``double_sample_variance`` gets as many responses again from the same source (twice the samples,
   PIPELINE.md). Shape (normalise, length and missing-EOS penalties), and fold the per-token KL
   penalty against the reference into the rewards: r_t = -beta KL_t, plus the score on the last token.
3. Old log-probabilities and values from the policy before the update; GAE (gamma, lambda) gives
   advantages (whitened over the batch) and returns.
4. ``ppo_epochs`` passes over shuffled minibatches: clipped surrogate + vf_coef * clipped value loss
   - entropy_coef * entropy, one clipped AdamW step per minibatch; the passes stop early when the
   approximate KL to the rollout policy passes ``target_kl_stop``.

All log-probabilities (policy, old, reference) are of the tempered distribution softmax(logits / T)
with the policy's sampling temperature T, the distribution the policy samples from.

Under torchrun each rank samples for its contiguous block of the B prompts. Whitening statistics, the
normaliser's fit, the KL controller's input and the logged metrics are taken over every rank's
rollouts; a minibatch is a slice of one permutation of the global rollout order (the same on every
rank, seeded by step), each rank runs its own members of it, divides its token sums by the
minibatch's global token count, and the gradients are summed before each step. With the same
rollouts this is the single-process update (sampling itself differs: each rank draws its own
random numbers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from training.algorithms import (
    clipped_value_loss,
    entropy_from_logits,
    gae,
    kl_early_stop,
    kl_penalized_rewards,
    masked_whiten,
    ppo_policy_loss,
)
from training.algorithms.ppo import entropy_bonus
from training.recipes.callbacks import TrainingCallback
from training.recipes.config import PPOConfig
from training.recipes.data import Messages
from training.recipes.distributed import Ranks, all_reduce_sum, gather_objects
from training.recipes.loop import Position, StepOutcome, mean_metrics, start_run
from training.recipes.online import (
    OnlineModels,
    Rollout,
    objective_scores,
    rollout_metrics,
    sample_rollouts,
    score_rollout_members,
    shape_rewards,
)
from training.recipes.online_run import OnlineState, fitted_normalizer, run_online, setup_online
from training.recipes.packing import (
    SequenceBatch,
    build_batch,
    can_share_prompts,
    completion_token_logprobs,
    last_hidden_states,
    plain_output_weight,
)
from training.recipes.runtime import Throughput, TrainResult, autocast
from training.recipes.samples import rollout_samples


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


def rollout_prompts(
    prompts: list[Messages], sources: list[str], config: PPOConfig, step: int
) -> list[Messages]:
    """What each prompt's source is asked: 'perturb' prompts get an instruction appended (cycled by
    the step and the prompt's place among the batch's perturbed prompts), the others as they are."""
    instructions = config.perturb_instructions
    asked, n_perturbed = [], 0
    for prompt, source in zip(prompts, sources, strict=True):
        if source == "perturb":
            prompt = _perturbed(prompt, instructions[(step + n_perturbed) % len(instructions)])
            n_perturbed += 1
        asked.append(prompt)
    return asked


def high_variance_prompts(scores: torch.Tensor, threshold: float) -> torch.Tensor:
    """Which prompts get twice the samples (PIPELINE.md): scores [P, S] (S >= 2 raw reward-model
    scores per prompt) -> [P] bool, True where the unbiased variance across the S exceeds
    ``threshold``. E.g. scores (0, 1) have variance 0.5 (doubled at 0.15), (0.2, 0.4) 0.02 (not)."""
    return scores.float().var(dim=1) > threshold


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
    state = setup_online(
        run,
        config,
        extra_modules=lambda policy: {
            "value_head": ValueHead(
                policy.config.hidden_size, config.value_hidden, config.value_dropout
            )
        },
    )
    return run_online(state, "ppo", ppo_step)


def ppo_step(state: OnlineState, at: Position, throughput: Throughput) -> StepOutcome:
    """One PPO step on the prompts of the sampler's batch at ``at`` (steps 1-4 of the module
    docstring); this rank rolls out its block of them."""
    config, run, models = state.config, state.run, state.models
    device, ranks = run.device, run.ranks
    batch_prompts = [state.prompts[i] for i in state.sampler.batch(at.epoch, at.batch_index)]
    sources = assign_rollout_sources(len(batch_prompts), config)
    asked = rollout_prompts(batch_prompts, sources, config, at.step)
    models.scorer.share_clusters(asked, batch_prompts)
    mine = ranks.block(range(len(asked)))
    with throughput.timing():
        rollouts, members, doubled = collect_rollouts(
            models, [asked[i] for i in mine], [sources[i] for i in mine], config, device
        )
        scored = objective_scores(members, config)
        scores = scored.reward
        shaped = shape_rewards(scores, rollouts, config, fitted_normalizer(state, scores)).to(
            device
        )
        advantages = _advantages(state, rollouts, shaped)
        stats = _ppo_epochs(state, rollouts, advantages, step=at.step)
        state.scheduler.step()
    kl = (advantages.kl * advantages.mask).sum(dim=1)
    metrics, n_all, tokens = rollout_metrics(
        rollouts,
        scores=scores,
        shaped=shaped,
        kl=kl,
        ranks=ranks,
        device=device,
        missing_eos_penalty=config.missing_eos_penalty,
        **scored.columns,
    )
    doubled_count = all_reduce_sum({"doubled": float(sum(doubled))}, ranks, device)
    kl_coef = state.count(throughput, metrics, n_all, tokens)
    samples = None
    if state.samples_due(at.step):
        samples = rollout_samples(
            rollouts=rollouts,
            rewards=shaped.float().cpu().tolist(),
            figures={"score": scores.float().cpu().tolist(), "kl": kl.float().cpu().tolist()},
        )
    return StepOutcome(
        {
            **stats,
            **metrics,
            "kl_coef": kl_coef,
            "double_sampled_fraction": doubled_count["doubled"] / len(batch_prompts),
            "learning_rate": state.scheduler.get_last_lr()[0],
        },
        samples=samples,
    )


@dataclass
class Advantages:
    """A rollout batch's targets, padded [R, T] (``mask`` 1 on response tokens): log-probs and
    values of the policy before the update, per-token KL to the reference, GAE advantages
    (whitened when configured) and returns."""

    old_logps: torch.Tensor
    old_values: torch.Tensor
    kl: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    mask: torch.Tensor


def _advantages(state: OnlineState, rollouts: list[Rollout], shaped: torch.Tensor) -> Advantages:
    """Old log-probs and values (policy before the update, dropout off), reference log-probs,
    the KL-penalised rewards, and GAE over them (step 3 of the module docstring)."""
    config, models, device = state.config, state.models, state.run.device
    policy, value_head = models.policy, _value_head(state)
    full = build_batch(
        [r.sequence() for r in rollouts],
        packed=models.packed,
        pad_token_id=models.tokenizer.pad_token_id,
        device=device,
        share_prompts=models.packed and can_share_prompts(policy),
    )
    with torch.no_grad(), autocast(device, config.bf16):
        policy.eval()
        value_head.eval()
        old_logps, old_values, _ = _policy_outputs(
            policy, value_head, full, config.temperature, with_entropy=False
        )
        ref_logps = completion_token_logprobs(
            models.reference, full, temperature=config.temperature
        )
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
        kl_coef=state.kl_controller.value,
        estimator=config.kl_estimator,  # type: ignore[arg-type]
    )
    advantages, returns = gae(rewards, old_values, mask, gamma=config.gamma, lam=config.lam)
    if config.whiten_advantages:
        advantages = _whiten(advantages, mask, state.run.ranks, device)
    return Advantages(old_logps, old_values, kl, advantages, returns, mask)


def _value_head(state: OnlineState) -> ValueHead:
    assert state.extra_modules is not None  # setup_online built it for train_ppo
    return state.extra_modules["value_head"]  # type: ignore[return-value]


def _sample_from_sources(
    models: OnlineModels,
    asked: list[Messages],
    sources: list[str],
    repeats: int,
    config: PPOConfig,
    device: torch.device,
) -> list[list[Rollout]]:
    """``repeats`` rollouts for each asked prompt, from the source assigned to it (one generate call
    per source)."""
    by_source: dict[str, list[int]] = {}
    for index, source in enumerate(sources):
        by_source.setdefault(source, []).append(index)
    rollouts: list[list[Rollout]] = [[] for _ in asked]
    for source, indices in by_source.items():
        anchor = source == "anchor"
        with autocast(device, config.bf16):
            sampled = sample_rollouts(
                models.reference if anchor else models.policy,
                models.tokenizer,
                models.encoder,
                [asked[i] for i in indices for _ in range(repeats)],
                temperature=config.anchor_temperature if anchor else config.temperature,
                top_p=config.top_p,
                max_new_tokens=config.max_new_tokens,
                engine=config.engine,
            )
        for position, index in enumerate(indices):
            rollouts[index] = sampled[position * repeats : (position + 1) * repeats]
    return rollouts


def collect_rollouts(
    models: OnlineModels,
    asked: list[Messages],
    sources: list[str],
    config: PPOConfig,
    device: torch.device,
) -> tuple[list[Rollout], torch.Tensor, list[bool]]:
    """A step's rollouts for these prompts, every reward-model member's raw scores [K, R] (K = 1
    for a plain reward model), and which prompts were doubled.

    Each prompt gets ``samples_per_prompt`` responses; those whose scores' variance (under the
    configured ensemble objective) passes ``double_sample_variance`` get as many again from the
    same source. Rollouts come prompt by prompt (a prompt's first samples, then its extra ones),
    so blocks of prompts on several ranks concatenate into the single-process order.
    """
    per_prompt = config.samples_per_prompt

    def scored(groups: list[list[Rollout]]) -> torch.Tensor:
        """Members' scores [K, G, per_prompt] of G groups of samples."""
        flat = [r for group in groups for r in group]
        with autocast(device, config.bf16):
            members = score_rollout_members(models.scorer, flat, batch_size=len(flat))
        return members.view(members.shape[0], len(groups), per_prompt)

    base = _sample_from_sources(models, asked, sources, per_prompt, config, device)
    base_members = scored(base)
    doubled = [False] * len(asked)
    if config.double_sample_variance is not None:
        base_scores = objective_scores(base_members.flatten(1), config).reward
        doubled = high_variance_prompts(
            base_scores.view(len(asked), per_prompt), config.double_sample_variance
        ).tolist()
    chosen = [i for i, flag in enumerate(doubled) if flag]
    extra: dict[int, tuple[list[Rollout], torch.Tensor]] = {}
    if chosen:
        groups = _sample_from_sources(
            models, [asked[i] for i in chosen], [sources[i] for i in chosen], per_prompt, config,
            device,
        )  # fmt: skip
        extra = dict(zip(chosen, zip(groups, scored(groups).unbind(1), strict=True), strict=True))
    rollouts: list[Rollout] = []
    members: list[torch.Tensor] = []
    for index in range(len(asked)):
        rollouts += base[index]
        members.append(base_members[:, index])
        if index in extra:
            rollouts += extra[index][0]
            members.append(extra[index][1])
    return rollouts, torch.cat(members, dim=1), doubled


def _whiten(
    values: torch.Tensor, mask: torch.Tensor, ranks: Ranks, device: torch.device
) -> torch.Tensor:
    """``masked_whiten`` with the mean and unbiased variance of every rank's kept entries."""
    if not ranks.distributed:
        return masked_whiten(values, mask)
    kept = mask.to(values.dtype)
    sums = all_reduce_sum(
        {"sum": float((values * kept).sum()), "count": float(kept.sum())}, ranks, device
    )
    mean = sums["sum"] / max(sums["count"], 1.0)
    squares = all_reduce_sum({"sq": float((((values - mean) ** 2) * kept).sum())}, ranks, device)
    variance = squares["sq"] / max(sums["count"] - 1, 1.0)
    whitened = (values - mean) / (variance + 1e-8) ** 0.5
    return torch.where(mask.bool(), whitened, torch.zeros_like(whitened))


def _ppo_epochs(
    state: OnlineState, rollouts: list[Rollout], targets: Advantages, *, step: int
) -> dict[str, float]:
    """Minibatch epochs over one rollout batch; returns mean statistics of the minibatches run.

    Minibatches are slices of a permutation of the global rollout order (rank 0's rollouts, then
    rank 1's, ...), drawn from a generator seeded by the step, so every rank agrees on them; each
    rank runs its own members of each and token sums are divided by the minibatch's token count
    over every rank. A rank with no member runs one of its rows with weight 0, so every rank makes
    the same backward passes (DeepSpeed reduces gradients during backward)."""
    config, ranks, device = state.config, state.run.ranks, state.run.device
    counts = gather_objects(len(rollouts), ranks)
    offset, total = sum(counts[: ranks.rank]), sum(counts)
    generator = torch.Generator().manual_seed(config.seed * 1_000_003 + step)
    rows: list[dict[str, float]] = []
    epochs_done = 0
    stopped = False
    for _ in range(config.ppo_epochs):
        order = torch.randperm(total, generator=generator).tolist()
        for start in range(0, total, config.minibatch_size):
            chunk = order[start : start + config.minibatch_size]
            index = [g - offset for g in chunk if offset <= g < offset + len(rollouts)]
            local_tokens = float(targets.mask[index].sum()) if index else 0.0
            tokens = max(all_reduce_sum({"tokens": local_tokens}, ranks, device)["tokens"], 1.0)
            sums = _minibatch_backward(
                state,
                rollouts,
                index or [0],
                targets,
                weight=1.0 if index else 0.0,
                tokens=tokens,
            )
            sums = all_reduce_sum(sums, ranks, device)
            grad_norm = state.updates.step()
            approx_kl = sums["approx_kl"] / tokens
            rows.append(
                {
                    "loss": sums["loss"],
                    "policy_loss": sums["policy_loss"],
                    "value_loss": sums["value_loss"],
                    "clip_fraction": sums["clip"] / tokens,
                    "approx_kl": approx_kl,
                    "value_clip_fraction": sums["value_clip"] / tokens,
                    "entropy": sums["entropy"],
                    "grad_norm": grad_norm,
                }
            )
            if kl_early_stop(approx_kl, limit=config.target_kl_stop):
                stopped = True
                break
        epochs_done += 1
        if stopped:
            break
    summary = mean_metrics(rows)
    summary.update(ppo_epochs_run=float(epochs_done), early_stopped=float(stopped))
    return summary


def _minibatch_backward(
    state: OnlineState,
    rollouts: list[Rollout],
    index: list[int],
    targets: Advantages,
    *,
    weight: float,
    tokens: float,
) -> dict[str, float]:
    """Forward and backward of this rank's rows ``index`` of a minibatch whose tokens over every
    rank number ``tokens``, the loss times ``weight`` (1, or 0 for a stand-in row); returns this
    rank's share of the losses and its token sums of the clip and KL statistics (times weight)."""
    config, models, device = state.config, state.models, state.run.device
    batch = build_batch(
        [rollouts[i].sequence() for i in index],
        packed=models.packed,
        pad_token_id=models.tokenizer.pad_token_id,
        device=device,
    )
    with autocast(device, config.bf16):
        logps, values, entropy = _policy_outputs(
            models.policy,
            _value_head(state),
            batch,
            config.temperature,
            with_entropy=config.entropy_coef > 0,
        )
    logps, mb_mask = batch.to_padded(logps)
    values, _ = batch.to_padded(values)
    rows_index = torch.tensor(index, device=device)
    mb_old_logps, mb_advantages, mb_old_values, mb_returns = (
        t.index_select(0, rows_index)[:, : logps.shape[1]]
        for t in (targets.old_logps, targets.advantages, targets.old_values, targets.returns)
    )
    policy_loss, stats = ppo_policy_loss(
        logps,
        mb_old_logps,
        mb_advantages,
        mb_mask,
        clip_ratio=config.clip_ratio,
        token_count=tokens,
    )
    value_loss, value_clip = clipped_value_loss(
        values,
        mb_old_values,
        mb_returns,
        mb_mask,
        clip_range=config.value_clip,
        token_count=tokens,
    )
    loss = policy_loss + config.vf_coef * value_loss
    entropy_term = 0.0
    if entropy is not None:
        entropy_padded, _ = batch.to_padded(entropy)
        entropy_mean = entropy_bonus(entropy_padded, mb_mask, token_count=tokens)
        loss = loss - config.entropy_coef * entropy_mean
        entropy_term = float(entropy_mean.detach())
    state.updates.backward(loss * weight)
    local_tokens = float(mb_mask.sum()) * weight
    return {
        "loss": float(loss.detach()) * weight,
        "policy_loss": float(policy_loss.detach()) * weight,
        "value_loss": float(value_loss.detach()) * weight,
        "entropy": entropy_term * weight,
        "clip": float(stats["clip_fraction"]) * local_tokens,
        "approx_kl": float(stats["approx_kl"]) * local_tokens,
        "value_clip": float(value_clip) * local_tokens,
    }
