"""What PPO and RLOO share: sampling responses with the chat template, EOS handling, reward-model
scoring, reward shaping, and the KL controller named in the config.

Shapes: R rollouts (prompts x samples), T response tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from training.algorithms import (
    AdaptiveKLController,
    FixedKLController,
    KLController,
    LinearKLSchedule,
    RewardNormalizer,
    VarianceKLScheduler,
    length_penalty,
    mask_after_first_eos,
    missing_eos_penalty,
)
from training.recipes.config import OnlineRLConfig
from training.recipes.data import ChatEncoder, Messages
from training.recipes.packing import TokenizedSequence
from training.recipes.reward_model import RewardScorer


@dataclass
class Rollout:
    """One sampled response to one prompt."""

    prompt: Messages
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]  # up to and including the first EOS
    finished: bool  # emitted EOS
    text: str  # the response without special tokens, for the reward model

    def sequence(self) -> TokenizedSequence:
        return TokenizedSequence(self.prompt_ids + self.response_ids, len(self.prompt_ids))


@torch.no_grad()
def sample_rollouts(
    model: Any,
    tokenizer: Any,
    encoder: ChatEncoder,
    prompts: Sequence[Messages],
    *,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
) -> list[Rollout]:
    """One sampled response per prompt, in order (repeat a prompt to sample it several times).

    Prompts are rendered with the chat template and left-padded so generation starts right after
    each; everything after a response's first EOS is dropped, and ``finished`` records whether the
    response emitted EOS at all (PIPELINE.md: mask after the first EOS, penalise when missing).
    """
    device = next(model.parameters()).device
    encoded = [encoder.encode_prompt(p) for p in prompts]
    width = max(len(ids) for ids in encoded)
    pad = tokenizer.pad_token_id
    input_ids = torch.full((len(encoded), width), pad, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    for row, ids in enumerate(encoded):
        input_ids[row, width - len(ids) :] = torch.tensor(ids)
        attention[row, width - len(ids) :] = 1
    was_training = model.training
    model.eval()
    output = model.generate(
        input_ids=input_ids.to(device),
        attention_mask=attention.to(device),
        do_sample=True,
        temperature=temperature,
        top_p=top_p,
        top_k=0,
        max_new_tokens=max_new_tokens,
        pad_token_id=pad,
        eos_token_id=tokenizer.eos_token_id,
        use_cache=True,
    )
    model.train(was_training)
    responses = output[:, width:].cpu()
    mask = torch.ones_like(responses)
    mask, finished = mask_after_first_eos(responses, mask, tokenizer.eos_token_id)
    rollouts = []
    for row, prompt in enumerate(prompts):
        kept = responses[row][mask[row].bool()].tolist()
        text = tokenizer.decode(kept, skip_special_tokens=True).strip()
        rollouts.append(
            Rollout(prompt, tuple(encoded[row]), tuple(kept), bool(finished[row]), text)
        )
    return rollouts


@torch.no_grad()
def score_rollouts(
    scorer: RewardScorer, rollouts: Sequence[Rollout], batch_size: int
) -> torch.Tensor:
    """Reward-model scores [R] float32 (the reward model reads text, so its tokenizer may differ)."""
    scores = []
    for start in range(0, len(rollouts), batch_size):
        part = rollouts[start : start + batch_size]
        scores.append(scorer.score([scorer.encode(r.prompt, r.text) for r in part]).cpu())
    return torch.cat(scores)


def shape_rewards(
    scores: torch.Tensor,
    rollouts: Sequence[Rollout],
    config: OnlineRLConfig,
    normalizer: RewardNormalizer | None,
) -> torch.Tensor:
    """Normalised score, minus the length and missing-EOS penalties: [R] float32."""
    rewards = normalizer(scores) if normalizer is not None else scores.float()
    lengths = torch.tensor([len(r.response_ids) for r in rollouts])
    if config.length_penalty_coef:
        rewards = length_penalty(
            rewards,
            lengths,
            coef=config.length_penalty_coef,
            base_length=config.length_penalty_base,
        )
    if config.missing_eos_penalty:
        finished = torch.tensor([r.finished for r in rollouts])
        rewards = missing_eos_penalty(rewards, finished, penalty=config.missing_eos_penalty)
    return rewards


def repetition_rate(rollouts: Sequence[Rollout], n: int = 3) -> float:
    """Mean share of each response's token n-grams that already appeared earlier in the same
    response (0: no repeats; PIPELINE.md alerts above 0.10 as mode collapse)."""
    rates = []
    for rollout in rollouts:
        ids = rollout.response_ids
        grams = [ids[i : i + n] for i in range(len(ids) - n + 1)]
        if grams:
            rates.append(1 - len(set(grams)) / len(grams))
    return sum(rates) / len(rates) if rates else 0.0


def make_kl_controller(config: OnlineRLConfig, total_updates: int) -> KLController:
    """The controller named by ``config.kl_controller`` with the config's numbers."""
    if config.kl_controller == "adaptive":
        return AdaptiveKLController(config.kl_coef, config.kl_target, config.kl_horizon)
    if config.kl_controller == "variance":
        return VarianceKLScheduler(config.kl_coef)
    if config.kl_controller == "linear":
        return LinearKLSchedule(config.kl_linear_start, config.kl_linear_end, max(1, total_updates))
    return FixedKLController(config.kl_coef)


def fit_normalizer(config: OnlineRLConfig, scores: torch.Tensor) -> RewardNormalizer | None:
    """Min-max normaliser fitted on the first batch's raw scores (the reference set); None when
    normalisation is off or the batch has a single distinct score."""
    if config.reward_range is None or float(scores.max()) <= float(scores.min()):
        return None
    low, high = config.reward_range
    return RewardNormalizer.fit(scores, low=low, high=high)
