"""SimPO and ORPO recipes: preference pairs -> a policy, with no reference model and no reference pass.

They share DPO's data path (the same fitted pairs, one packed forward of chosen and rejected per
micro-batch, logits only at completion positions) and its step loop, checkpoints and exact resume
(``loop.run_pair_steps``). Both losses read *average* completion log-probabilities (summed log-probs
/ completion tokens, float32):

- SimPO (``training.algorithms.simpo_loss``): -log sigmoid(beta * (avg_w - avg_l) - gamma);
- ORPO (``training.algorithms.orpo_loss``): -avg_w (the chosen NLL, per pair) + lambda * the
  odds-ratio term -log sigmoid(log odds(y_w) - log odds(y_l)).

Per step the per-pair losses are summed and divided by the step's pair count, so gradient
accumulation is exact. Metrics are named as DPO's (``rewards/chosen``, ``rewards/rejected``,
``rewards/accuracy``, ``rewards/margin``, ``logps/*``: summed log-probs), rewards being beta * avg
(SimPO) or lambda * avg (ORPO, TRL's convention); ORPO adds ``nll``, ``odds_ratio_loss`` and
``log_odds``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from training.algorithms.reference_free import orpo_loss, simpo_loss
from training.recipes.callbacks import TrainingCallback
from training.recipes.config import ORPOConfig, SimPOConfig
from training.recipes.data import ChatEncoder, chunks
from training.recipes.distributed import all_reduce_sum
from training.recipes.loop import (
    LoopEnd,
    PairRecipeState,
    Position,
    Run,
    StepOutcome,
    optimizer_step,
    train_pair_recipe,
)
from training.recipes.pair_policy import (
    METRIC_SUMS,
    PairTokens,
    forward_pairs,
    pair_metric_sums,
    policy_pair_fields,
)
from training.recipes.runtime import (
    Throughput,
    TrainResult,
    autocast,
    peak_memory_bytes,
)

ReferenceFreeConfig = SimPOConfig | ORPOConfig
ORPO_METRIC_SUMS = ("nll", "odds_ratio_loss", "log_odds")


@dataclass
class ReferenceFreeState(PairRecipeState):
    """What a SimPO or ORPO run holds between steps, beside ``PairRecipeState``'s: the fitted
    pairs and whether batches are packed."""

    config: ReferenceFreeConfig
    encoder: ChatEncoder
    pairs: list[PairTokens]
    packed: bool


def train_simpo(config: SimPOConfig, callback: TrainingCallback | None = None) -> TrainResult:
    """Run SimPO as configured; resumes from the newest checkpoint in ``output_dir`` when allowed."""
    return _train_reference_free(config, callback)


def train_orpo(config: ORPOConfig, callback: TrainingCallback | None = None) -> TrainResult:
    """Run ORPO as configured; resumes from the newest checkpoint in ``output_dir`` when allowed."""
    return _train_reference_free(config, callback)


def _train_reference_free(
    config: ReferenceFreeConfig, callback: TrainingCallback | None
) -> TrainResult:
    return train_pair_recipe(
        config,
        callback,
        kind=config.kind,
        setup=setup_reference_free,
        step=reference_free_step,
        summary=reference_free_summary,
    )


def setup_reference_free(run: Run, config: ReferenceFreeConfig) -> ReferenceFreeState:
    """Tokenizer, fitted pairs, policy (from the checkpoint when resuming), optimiser and schedule,
    restored to where the run stopped. No reference model is loaded."""
    return ReferenceFreeState(**policy_pair_fields(run, config))


def reference_free_micro_batch(
    state: ReferenceFreeState, index: list[int], *, step_pairs: int
) -> dict[str, float]:
    """Forward and backward for the pairs ``index``; returns their metric sums (METRIC_SUMS, and
    ORPO_METRIC_SUMS for ORPO), to be divided by the step's pair count ``step_pairs``."""
    config, device = state.config, state.run.device
    with autocast(device, config.bf16):
        totals, lengths, n_tokens = forward_pairs(
            state.model,
            [state.pairs[i] for i in index],
            packed=state.packed,
            pad_token_id=state.tokenizer.pad_token_id,
            device=device,
        )
    m = len(index)
    average = totals.float() / lengths.to(totals.device).clamp(min=1)
    extra: dict[str, float] = {}
    if isinstance(config, SimPOConfig):
        losses, chosen_rewards, rejected_rewards = simpo_loss(
            average[:m],
            average[m:],
            beta=config.beta,
            gamma=config.gamma,
            label_smoothing=config.label_smoothing,
        )
    else:
        out = orpo_loss(average[:m], average[m:], lam=config.orpo_lambda)
        losses, chosen_rewards, rejected_rewards = (
            out.losses,
            out.chosen_rewards,
            out.rejected_rewards,
        )
        extra = {
            "nll": float(-average[:m].detach().sum()),
            "odds_ratio_loss": float(out.odds_ratio_losses.detach().sum()),
            "log_odds": float(out.log_odds.sum()),
        }
    (losses.sum() / step_pairs).backward()
    return {
        **pair_metric_sums(losses, chosen_rewards, rejected_rewards, totals, n_tokens),
        **extra,
    }


def reference_free_step(
    state: ReferenceFreeState, at: Position, throughput: Throughput
) -> StepOutcome:
    """One optimiser step on the sampler's batch at ``at``: this rank's micro-batches forward and
    backward, metric sums over every rank, one clipped step."""
    run = state.run
    index = state.sampler.batch(at.epoch, at.batch_index)
    names = METRIC_SUMS + (ORPO_METRIC_SUMS if isinstance(state.config, ORPOConfig) else ())
    with throughput.timing():
        sums = dict.fromkeys(names, 0.0)
        for group in chunks(run.ranks.shard(index), state.micro_batch_size):
            part = reference_free_micro_batch(state, list(group), step_pairs=len(index))
            sums = {k: sums[k] + part[k] for k in names}
        sums = all_reduce_sum(sums, run.ranks, run.device)
        grad_norm = optimizer_step(
            state.model.parameters(), state.optimizer, state.scheduler,
            state.config.max_grad_norm, run.ranks,
        )  # fmt: skip
    throughput.items += len(index)
    throughput.tokens += int(sums["tokens"])
    metrics = {k: v / len(index) for k, v in sums.items() if k != "tokens"}
    metrics.update(grad_norm=grad_norm, learning_rate=state.scheduler.get_last_lr()[0])
    return StepOutcome(metrics)


def reference_free_summary(state: ReferenceFreeState, end: LoopEnd) -> dict[str, Any]:
    """The run's summary: data, rates (no reference pass to count) and the last metrics."""
    throughput = end.throughput
    pairs_per_second = throughput.per_second(throughput.items)
    tokens_per_second = throughput.per_second(throughput.tokens)
    return {
        "kind": state.config.kind,
        "pairs": len(state.pairs),
        "pairs_trained": throughput.items,
        "tokens_trained": throughput.tokens,
        "train_seconds": throughput.seconds,
        "reference_model": None,
        **state.encoder.fit.summary(),
        "pairs_per_second": pairs_per_second,
        "tokens_per_second": tokens_per_second,
        "train_pairs_per_second": pairs_per_second,
        "train_tokens_per_second": tokens_per_second,
        "packed": state.packed,
        "bf16": state.config.bf16,
        "peak_memory_bytes": peak_memory_bytes(state.run.device),
        "last_metrics": end.last_logged,
    }
