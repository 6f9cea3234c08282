"""What the recipes that train a policy on preference pairs share (DPO, SimPO, ORPO): the pairs
fitted to the models' limits, one packed forward of a micro-batch's chosen and rejected sequences,
the metric sums every one of them logs, and the fields of their state up to the optimiser.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from training.algorithms.logprobs import segment_sum
from training.recipes.checkpoint_files import checkpoint_step
from training.recipes.config import TrainingConfig
from training.recipes.data import ChatEncoder, EpochSampler, FitLog, load_preference_pairs
from training.recipes.loop import Run
from training.recipes.models import input_limit, load_policy, load_tokenizer
from training.recipes.packing import (
    TokenizedSequence,
    build_batch,
    can_share_prompts,
    completion_token_logprobs,
)
from training.recipes.runtime import build_optimizer, build_scheduler, total_steps_for

PairTokens = tuple[TokenizedSequence, TokenizedSequence]
METRIC_SUMS = (
    "loss",
    "rewards/chosen",
    "rewards/rejected",
    "rewards/accuracy",
    "rewards/margin",
    "logps/chosen",
    "logps/rejected",
    "tokens",
)


def forward_pairs(
    model: Any, pairs: list[PairTokens], *, packed: bool, pad_token_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """One concatenated forward: [chosen_1..m, rejected_1..m] -> (summed log-probs [2m], completion
    token counts [2m], tokens in the sequences). Packed, each pair's prompt runs once for both."""
    sequences = [c for c, _ in pairs] + [r for _, r in pairs]
    return forward_sequences(
        model, sequences, packed=packed, pad_token_id=pad_token_id, device=device
    )


def forward_sequences(
    model: Any,
    sequences: list[TokenizedSequence],
    *,
    packed: bool,
    pad_token_id: int,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """One forward of S sequences -> (summed completion log-probs [S] float32, completion token
    counts [S], tokens in the sequences). Packed, sequences with the same prompt tokens hold that
    prompt once (a pair's two answers, KTO's example and its mismatched KL sequence)."""
    batch = build_batch(
        sequences,
        packed=packed,
        pad_token_id=pad_token_id,
        device=device,
        share_prompts=packed and can_share_prompts(model),
    )
    per_token = completion_token_logprobs(model, batch)
    totals = segment_sum(per_token, batch.segment_ids, batch.n_sequences)
    # Throughput counts the pairs' tokens (each prompt once per response), not the fewer tokens the
    # shared layout runs, so rates compare with tools that do not share prompts.
    return totals, batch.completion_lengths, sum(len(s.input_ids) for s in sequences)


def pair_metric_sums(
    losses: torch.Tensor,
    chosen_rewards: torch.Tensor,
    rejected_rewards: torch.Tensor,
    totals: torch.Tensor,
    n_tokens: int,
) -> dict[str, float]:
    """A micro-batch's metric sums, keys as METRIC_SUMS: losses and rewards [m], summed
    log-probs ``totals`` [2m] (chosen, then rejected), ``n_tokens`` in its sequences."""
    m = losses.shape[0]
    return {
        "loss": float(losses.detach().sum()),
        "rewards/chosen": float(chosen_rewards.sum()),
        "rewards/rejected": float(rejected_rewards.sum()),
        "rewards/accuracy": float((chosen_rewards > rejected_rewards).float().sum()),
        "rewards/margin": float((chosen_rewards - rejected_rewards).sum()),
        "logps/chosen": float(totals[:m].detach().sum()),
        "logps/rejected": float(totals[m:].detach().sum()),
        "tokens": float(n_tokens),
    }


def policy_encoder(config: TrainingConfig, tokenizer: Any, *, unit: str) -> ChatEncoder:
    """The chat encoder of an offline policy recipe (DPO's family, KTO): sequences fit both the
    policy's and the reference's position limits (a config without ``ref_model`` has no reference
    but the policy), the prompt takes at most half of them, and ``unit`` names what the fit log
    counts ("pairs", "examples")."""
    reference = getattr(config, "ref_model", None)
    limit = min(
        input_limit(config.model, max_length=config.max_length, tokenizer=tokenizer),
        input_limit(Path(reference or config.model), max_length=config.max_length),
    )
    return ChatEncoder(
        tokenizer,
        max_length=limit,
        prompt_budget=min(config.prompt_budget, limit // 2),
        prompt_cap=config.max_prompt_length,
        fit=FitLog(unit),
    )


def fit_dpo_pairs(config: TrainingConfig, tokenizer: Any) -> tuple[ChatEncoder, list[PairTokens]]:
    """The data file's pairs fitted to the policy's and the reference's limits (see the module
    docstring; a config without ``ref_model``, e.g. SimPO's, has no reference but the policy);
    raises ValueError when none is left."""
    encoder = policy_encoder(config, tokenizer, unit="pairs")
    fitted = [
        encoder.encode_pair(p.prompt, p.chosen, p.rejected)
        for p in load_preference_pairs(config.data)
    ]
    pairs = [pair for pair in fitted if pair is not None]
    if not pairs:
        raise ValueError(f"{config.data}: every pair was dropped when fitted to the model")
    return encoder, pairs


def policy_pair_fields(
    run: Run,
    config: TrainingConfig,
    before_optimizer: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The fields of a recipe state that trains a policy on pairs (DPO's, SimPO's, ORPO's):
    tokenizer, fitted pairs, policy (from the checkpoint when resuming), sampler, optimiser and
    schedule restored to where the run stopped. ``before_optimizer(fields)`` adds the recipe's
    own fields (DPO: the reference pass, from ``start_step`` on) before the optimiser exists."""
    tokenizer = load_tokenizer(config.model)
    encoder, pairs = fit_dpo_pairs(config, tokenizer)
    resume_from = run.resume_from
    policy, packed = load_policy(resume_from or config.model, config, run.device)
    sampler = EpochSampler(len(pairs), config.batch_size, config.seed)
    fields: dict[str, Any] = {
        "run": run,
        "config": config,
        "tokenizer": tokenizer,
        "encoder": encoder,
        "pairs": pairs,
        "model": policy,
        "packed": packed,
        "sampler": sampler,
        "total_steps": total_steps_for(config, sampler.batches_per_epoch),
        "start_step": checkpoint_step(resume_from) if resume_from is not None else 0,
    }
    if before_optimizer is not None:
        fields.update(before_optimizer(fields))
    optimizer = build_optimizer(policy.parameters(), config, run.device)
    scheduler = build_scheduler(optimizer, config, fields["total_steps"])
    if resume_from is not None:
        fields["start_step"], _ = run.restore_training_state(
            resume_from, optimizer=optimizer, scheduler=scheduler
        )
    return {**fields, "optimizer": optimizer, "scheduler": scheduler}
