"""GRPO recipe (Shao et al. 2024; DAPO, Yu et al. 2025): G sampled responses per prompt, advantages
relative to the group, the clipped ratio objective with a k3 KL term to the reference.

Per step: sample G responses for each of B prompts (the policy's chat template, temperature T);
score them with the reward model and/or the verifiable rewards (``training.algorithms.rewards``,
each component kept for the logs); with dynamic sampling, set aside the groups whose rewards are all
equal and sample fresh prompts in their place (at most ``dynamic_sampling_rounds`` rounds; what
stays flat is left out of the update); take group advantages (mean-centred, divided by the group's
std when ``scale_rewards`` = "group"); then ``updates_per_batch`` optimiser updates of ``grpo_loss``
on those samples, the ratio taken against the log-probabilities of the first update (the sampling
policy), normalised per token of the batch (DAPO) or per sequence.

With ``kl_coef`` 0 no reference model is loaded at all. Under torchrun each rank samples for its
contiguous block of the B prompts (a group never spans ranks, so group statistics are local), the
loss divisor (tokens, sequences) is the global one and the gradients are summed before the step:
the single-process step on the same samples. "batch" std scaling reads every rank's rewards.
Fresh prompts for dynamic sampling are drawn by a generator seeded by (seed, step, round, rank), so a
resumed run draws the same ones.
"""

from __future__ import annotations

import importlib
import warnings
from dataclasses import dataclass, field

import torch

from training.algorithms import dynamic_sampling, group_advantages, grpo_loss, segment_sum
from training.algorithms.kl import kl_k3
from training.algorithms.rewards import RewardComponent, combine
from training.recipes.callbacks import TrainingCallback
from training.recipes.config import ConfigError, GRPOConfig
from training.recipes.data import Messages, load_prompt_answers, load_prompts
from training.recipes.distributed import all_gather_rows, all_reduce_sum
from training.recipes.loop import Position, StepOutcome, start_run
from training.recipes.online import (
    Rollout,
    rollout_metrics,
    sample_rollouts,
    score_rollouts,
    shape_rewards,
    update_passes,
)
from training.recipes.online_run import OnlineState, fitted_normalizer, run_online, setup_online
from training.recipes.runtime import Throughput, TrainResult, autocast
from training.recipes.samples import rollout_samples


@dataclass
class Scored:
    """Rewards of R samples: ``total`` [R] (weighted sum, shaped) and each component's raw
    values [R] by key (``reward_model`` for the reward model's raw score under the ensemble
    objective; with an ensemble, ``ensemble/disagreement_std`` and ``ensemble/member_mean``)."""

    total: torch.Tensor
    components: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class GRPORewards:
    """How a GRPO run scores its samples: the verifiable rewards with their weights, and the
    reference answer of each prompt that has one."""

    components: list[RewardComponent]
    weights: list[float]
    answers: dict[Messages, str]

    def score(self, state: OnlineState, rollouts: list[Rollout], *, fit: bool) -> Scored:
        """The reward model's score (normalised when configured; ``fit``: fit the normaliser on
        these scores if not yet fitted, a call every rank makes) times its weight, plus the
        weighted verifiable rewards, then the configured length and missing-EOS penalties."""
        config, scorer = state.config, state.models.scorer
        total = torch.zeros(len(rollouts))
        components: dict[str, torch.Tensor] = {}
        if scorer is not None:
            with autocast(state.run.device, config.bf16):
                scored = score_rollouts(scorer, rollouts, len(rollouts), config)
            raw = scored.reward.float()
            normalizer = fitted_normalizer(state, raw) if fit else state.normalizer
            total += config.reward_model_weight * (normalizer(raw) if normalizer else raw)
            components["reward_model"] = raw
            components.update(scored.columns)
        if self.components:
            combined = combine(
                self.components,
                self.weights,
                [r.text for r in rollouts],
                answers=[self.answers.get(r.prompt) for r in rollouts],
            )
            total += torch.tensor(combined.total, dtype=torch.float32)
            components.update(
                {k: torch.tensor(v, dtype=torch.float32) for k, v in combined.components.items()}
            )
        return Scored(shape_rewards(total, rollouts, config, None), components)


def grpo_rewards(config: GRPOConfig) -> GRPORewards:
    """The run's verifiable rewards, checked against the registry and against the data (a reward
    that needs each prompt's answer, on data without one) before any model loads: ConfigError
    naming ``rewards`` otherwise. ``reward_modules`` are imported first (they register theirs)."""
    for module in config.reward_modules:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise ConfigError(f"reward_modules: {error}", field="reward_modules") from None
    components = [
        RewardComponent(spec.name, spec.options, spec.label) for spec in config.reward_specs()
    ]
    rewards = GRPORewards(components, config.verifiable_weights(), {})
    if not components:
        return rewards
    rewards.answers = load_prompt_answers(config.data)
    prompts = load_prompts(config.data)
    try:
        combine(
            components,
            rewards.weights,
            [""] * len(prompts),
            answers=[rewards.answers.get(p) for p in prompts],
        )
    except ValueError as error:
        # Distinct prompts: an export has one row per comparison, so a prompt can recur.
        distinct = set(prompts)
        unanswered = len(distinct - rewards.answers.keys())
        hint = (
            f" ({unanswered} of the data's {len(distinct)} prompts have no 'answer' field)"
            if unanswered
            else ""
        )
        raise ConfigError(f"rewards: {error}{hint}", field="rewards") from None
    return rewards


def train_grpo(config: GRPOConfig, callback: TrainingCallback | None = None) -> TrainResult:
    """Run GRPO as configured; resumes from the newest checkpoint in ``output_dir`` when allowed."""
    rewards = grpo_rewards(config)
    run = start_run(config, callback)
    state = setup_online(run, config)
    state.eval_score = lambda rollouts: rewards.score(state, rollouts, fit=False).total
    return run_online(state, "grpo", lambda s, at, t: grpo_step(s, rewards, at, t))


@dataclass
class Draw:
    """One step's samples on this rank: G per prompt, group after group, their rewards, which
    samples go into the update, and the dynamic-sampling counts."""

    rollouts: list[Rollout]
    scored: Scored
    keep: torch.Tensor  # [R] bool
    groups_flat: int  # groups whose rewards were all equal, over every round
    rounds: int  # rounds of fresh prompts drawn


def sample_groups(
    state: OnlineState, rewards: GRPORewards, prompts: list[Messages], *, fit: bool
) -> tuple[list[Rollout], Scored]:
    """``group_size`` responses to each prompt, scored."""
    config, models = state.config, state.models
    with autocast(state.run.device, config.bf16):
        rollouts = sample_rollouts(
            models.policy,
            models.tokenizer,
            models.encoder,
            [p for p in prompts for _ in range(config.group_size)],
            temperature=config.temperature,
            top_p=config.top_p,
            max_new_tokens=config.max_new_tokens,
            engine=config.engine,
        )
    return rollouts, rewards.score(state, rollouts, fit=fit)


def fresh_prompts(state: OnlineState, count: int, step: int, round_: int) -> list[Messages]:
    """``count`` training prompts drawn at random for dynamic sampling, the same ones for the same
    (seed, step, round, rank) whatever happened before (so resuming draws them again)."""
    key = ((state.config.seed * 1_000_003 + step) * 1009 + round_) * 4099 + state.run.ranks.rank
    generator = torch.Generator().manual_seed(key % (2**63))
    picks = torch.randint(len(state.prompts), (count,), generator=generator).tolist()
    return [state.prompts[i] for i in picks]


def draw_groups(
    state: OnlineState, rewards: GRPORewards, prompts: list[Messages], at: Position
) -> Draw:
    """Sample and score the groups of ``prompts``; with dynamic sampling, replace flat groups by
    groups of fresh prompts that carry a signal, round after round, and leave out what stays flat."""
    g = state.config.group_size
    rollouts, scored = sample_groups(state, rewards, prompts, fit=True)
    flat = ~dynamic_sampling(scored.total, g).keep_groups
    groups_flat, rounds = int(flat.sum()), 0
    if not state.config.dynamic_sampling:
        return Draw(rollouts, scored, torch.ones(len(rollouts), dtype=torch.bool), groups_flat, 0)
    while flat.any() and rounds < state.config.dynamic_sampling_rounds:
        rounds += 1
        slots = flat.nonzero().flatten().tolist()
        fresh = fresh_prompts(state, len(slots), at.step, rounds)
        new_rollouts, new_scored = sample_groups(state, rewards, fresh, fit=False)
        signal = dynamic_sampling(new_scored.total, g).keep_groups
        groups_flat += int((~signal).sum())
        for slot, group in zip(slots, signal.nonzero().flatten().tolist(), strict=False):
            mine, theirs = slice(slot * g, (slot + 1) * g), slice(group * g, (group + 1) * g)
            rollouts[mine] = new_rollouts[theirs]
            scored.total[mine] = new_scored.total[theirs]
            for key, column in scored.components.items():
                column[mine] = new_scored.components[key][theirs]
            flat[slot] = False
    return Draw(rollouts, scored, (~flat).repeat_interleave(g), groups_flat, rounds)


def advantages_for(state: OnlineState, total: torch.Tensor) -> torch.Tensor:
    """Group advantages [R] of this rank's rewards; "batch" scaling divides by the std of every
    rank's rewards, as one process holding them all would."""
    g, scale = state.config.group_size, state.config.scale_rewards
    if scale != "batch" or not state.run.ranks.distributed:
        return group_advantages(total, g, scale=scale)  # type: ignore[arg-type]
    every = all_gather_rows(total.to(state.run.device), state.run.ranks).cpu()
    return group_advantages(total, g, scale="none") / (every.std() + 1e-4)


def grpo_step(
    state: OnlineState, rewards: GRPORewards, at: Position, throughput: Throughput
) -> StepOutcome:
    """One GRPO step on the prompts of the sampler's batch at ``at`` (this rank's block): sample G
    each (dynamic sampling when on), group advantages, ``updates_per_batch`` clipped updates."""
    config, run = state.config, state.run
    index = state.sampler.batch(at.epoch, at.batch_index)
    with throughput.timing():
        draw = draw_groups(state, rewards, [state.prompts[i] for i in run.ranks.block(index)], at)
        advantages = advantages_for(state, draw.scored.total).to(run.device)
        sequences = [r.sequence() for r in draw.rollouts]
        update = policy_updates(state, sequences, advantages, draw.keep.to(run.device))
        with warnings.catch_warnings():  # a step with every group dropped made no optimiser step
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step")
            state.scheduler.step()
    metrics, n_all, tokens = rollout_metrics(
        draw.rollouts,
        scores=draw.scored.total,
        shaped=draw.scored.total,
        kl=update.pop("kl"),
        ranks=run.ranks,
        device=run.device,
        missing_eos_penalty=config.missing_eos_penalty,
        negative_logp=update.pop("negative_logp"),
        # a component's mean as reward/<name>_mean; the ensemble's columns keep their own names
        **{
            key if key.startswith("ensemble/") else f"reward/{key}_mean": column
            for key, column in draw.scored.components.items()
        },
    )
    metrics["entropy"] = metrics.pop("negative_logp") / max(metrics["response_length"], 1e-9)
    kl_coef = state.count(throughput, metrics, n_all, tokens)
    counts = all_reduce_sum(
        {
            "groups_flat": draw.groups_flat,
            "groups_dropped": int((~draw.keep).sum()) / config.group_size,
            "sampling_rounds": draw.rounds,
        },
        run.ranks,
        run.device,
    )
    samples = None
    if state.samples_due(at.step):
        samples = rollout_samples(
            rollouts=draw.rollouts,
            rewards=draw.scored.total.tolist(),
            figures={k: v.tolist() for k, v in draw.scored.components.items()},
        )
    return StepOutcome(
        {
            **update,
            **metrics,
            "dynamic/groups_flat": counts["groups_flat"],
            "dynamic/groups_dropped": counts["groups_dropped"],
            "dynamic/sampling_rounds": counts["sampling_rounds"],
            "kl_coef": kl_coef,
            "learning_rate": state.scheduler.get_last_lr()[0],
        },
        samples=samples,
    )


def policy_updates(
    state: OnlineState, sequences: list, advantages: torch.Tensor, keep: torch.Tensor
) -> dict:
    """``updates_per_batch`` optimiser updates of ``grpo_loss`` on this rank's R samples (those in
    ``keep`` [R]), each update in passes of ``micro_batch_size`` prompts (``online.update_passes``)
    whose gradients add up; the loss divisor is every rank's. Returns the logged figures (the first
    update's loss and ratio statistics, the last's gradient norm, clip fractions averaged over
    updates) and, per sample [R], the summed k3 KL to the reference (``kl``, zero without one) and
    -log pi (``negative_logp``)."""
    config, models, run = state.config, state.models, state.run
    passes = update_passes(len(sequences), config.group_size, config.micro_batch_size)
    lengths = torch.tensor([len(s.input_ids) - s.scored_from for s in sequences], device=run.device)
    denominator = loss_divisor(state, lengths, keep)
    old: list[torch.Tensor] = []  # per pass: the sampling policy's log-probs [r, T], update 0's
    ref: list[torch.Tensor | None] = []
    per_sample = {
        "kl": torch.zeros(len(sequences), device=run.device),
        "negative_logp": torch.zeros(len(sequences), device=run.device),
    }
    figures: dict[str, float] = {"loss": 0.0, "ratio_mean": 1.0, "grad_norm": 0.0}
    clip = {"clip_fraction": 0.0, "clip_fraction_low": 0.0, "clip_fraction_high": 0.0}
    for update in range(config.updates_per_batch):
        sums = dict.fromkeys(("tokens", "loss", "ratio", *clip), 0.0)
        for index, part in enumerate(passes):
            chunk = sequences[part]
            if update == 0:
                ref_logps = None
                if models.reference is not None:
                    with torch.no_grad(), autocast(run.device, config.bf16):
                        ref_logps, _ = state.token_logprobs(models.reference, chunk)
            with torch.set_grad_enabled(denominator > 0), autocast(run.device, config.bf16):
                logps, batch = state.token_logprobs(models.policy, chunk)
            padded, mask = batch.to_padded(logps)
            mask = mask & keep[part, None]
            if update == 0:
                old.append(padded.detach())
                ref.append(None if ref_logps is None else batch.to_padded(ref_logps)[0])
                if ref_logps is not None:
                    kl_tokens = kl_k3(logps.detach(), ref_logps)
                    per_sample["kl"][part] = segment_sum(kl_tokens, batch.segment_ids, len(chunk))
                per_sample["negative_logp"][part] = -segment_sum(
                    logps.detach(), batch.segment_ids, len(chunk)
                )
            if denominator == 0:
                continue  # every group of every rank was flat and dropped: nothing to learn
            loss, stats = grpo_loss(
                padded,
                old[index],
                advantages[part],
                mask,
                eps_low=config.clip_low,
                eps_high=config.clip_high,
                ref_logprobs=ref[index],
                kl_coef=config.kl_coef if ref[index] is not None else 0.0,
                loss_norm=config.loss_normalisation,  # type: ignore[arg-type]
                max_len=config.max_new_tokens,
                denominator=denominator,
            )
            state.updates.backward(loss)
            kept = float(mask.sum())  # stats are means over kept tokens: weigh by them
            sums["tokens"] += kept
            sums["loss"] += float(loss.detach())
            sums["ratio"] += float(stats["ratio_mean"]) * kept
            for key in clip:
                sums[key] += float(stats[key]) * kept
        if denominator == 0:
            break
        figures["grad_norm"] = state.updates.step()
        reduced = all_reduce_sum(
            {k: sums[k] for k in ("tokens", "loss", *clip)}, run.ranks, run.device
        )
        for key in clip:
            clip[key] += reduced[key] / max(reduced["tokens"], 1.0) / config.updates_per_batch
        if update == 0:  # the loss on the samples as drawn (each rank's share, summed)
            figures["loss"] = reduced["loss"]
            figures["ratio_mean"] = sums["ratio"] / sums["tokens"] if sums["tokens"] else 1.0
    return {**figures, **clip, **per_sample}


def loss_divisor(state: OnlineState, lengths: torch.Tensor, keep: torch.Tensor) -> float:
    """The global divisor of the loss normalisation, from this rank's completion ``lengths`` [R]
    and ``keep`` [R]: kept completion tokens ("token"), kept non-empty sequences ("sequence") or
    kept sequences x max_new_tokens ("constant"), over every rank."""
    kept = keep & (lengths > 0)
    token = state.config.loss_normalisation == "token"
    local = float(lengths[kept].sum()) if token else float(kept.sum())
    total = all_reduce_sum({"n": local}, state.run.ranks, state.run.device)["n"]
    if state.config.loss_normalisation == "constant":
        total *= state.config.max_new_tokens
    return total
