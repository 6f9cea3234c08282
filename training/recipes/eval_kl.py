"""The policy's KL from its reference measured at each evaluation, on the held-out prompts.

The ``kl`` an online recipe logs at a step is the mean over that step's training rollouts (a batch
of a few prompts times K samples): with small batches it jumps from step to step, and the stopping
panel's peak fit, which reads reward against sqrt(KL), cannot place a peak on such an axis. The
evaluation KL is measured the same way every time: ``eval_kl_samples`` answers (default 1) per
held-out prompt, sampled at the training temperature from a fixed seed (the same draws while the
policy stays put), and the reference's and the policy's log-probs of those answers. Per answer, the
sum over its tokens of the k3 estimate ``(r - 1) - log r`` with ``r = pi_ref / pi`` (Schulman 2020:
unbiased for the KL of samples from the policy, never below zero, less variance than the plain
log-ratio); the metric is the mean over answers, in nats per answer, the unit of the training
``kl``.

The global random state is forked and restored around the sampling, so training draws exactly
what it would without the measurement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from training.algorithms import kl_estimate, segment_sum
from training.recipes.config import OnlineRLConfig
from training.recipes.data import Messages, chunks
from training.recipes.distributed import Ranks, all_gather_rows
from training.recipes.online import OnlineModels, sample_rollouts
from training.recipes.runtime import autocast

EVAL_KL_SEED = 20_261_207

# (model, sequences) -> (per-token log-probs [M], the batch with its segment_ids [M])
TokenLogprobs = Callable[[Any, list[Any]], tuple[torch.Tensor, Any]]


@torch.no_grad()
def evaluation_kl(
    models: OnlineModels,
    prompts: Sequence[Messages],
    config: OnlineRLConfig,
    *,
    ranks: Ranks,
    device: torch.device,
    token_logprobs: TokenLogprobs,
) -> float | None:
    """KL(policy || reference) in nats per answer on the held-out ``prompts`` (module docstring),
    ``config.eval_kl_samples`` answers to each; each rank answers its block of them, and the mean
    is over every rank's answers. None when the run has no reference model or no held-out
    prompt."""
    if models.reference is None or not prompts:
        return None
    prompts = [prompt for prompt in prompts for _ in range(config.eval_kl_samples)]
    per_answer: list[float] = []
    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(EVAL_KL_SEED + ranks.rank)
        for part in chunks(ranks.block(prompts), config.batch_size):
            with autocast(device, config.bf16):
                rollouts = sample_rollouts(
                    models.policy,
                    models.tokenizer,
                    models.encoder,
                    part,
                    temperature=config.temperature,
                    max_new_tokens=config.max_new_tokens,
                    engine=config.engine,
                )
                sequences = [r.sequence() for r in rollouts]
                reference, _ = token_logprobs(models.reference, sequences)
                policy, batch = token_logprobs(models.policy, sequences)
            tokens = kl_estimate(policy.float(), reference.float(), "k3")
            per_answer += segment_sum(tokens, batch.segment_ids, len(sequences)).tolist()
    local = torch.tensor(per_answer, dtype=torch.float64)
    every = all_gather_rows(local.to(device), ranks).cpu()
    return float(every.mean()) if len(every) else None
