"""The ``generate`` rollout engine: transformers' ``generate`` from the shared-prompt prefill
(``prefill.shared_prompt_cache``), drawing with the inverse-CDF sampler (``sampling``) inside a
logits processor that also records each drawn token's log-probability (``engine.RolloutEngine``).

It runs any causal LM transformers can generate with, LoRA-wrapped ones and ``lora.BaseModelView``
included, and draws its random numbers from torch's global generator exactly as the recipes did
before the engines existed.

Shapes: R rows, W the left-padded prompt width, N the steps generate ran, V the vocabulary.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from transformers import LogitsProcessor

from training.inference.engine import (
    RolloutOutput,
    SamplingSettings,
    token_logprobs,
    trim_at_eos,
)
from training.recipes.prefill import shared_prompt_cache
from training.recipes.sampling import inverse_cdf_sample


class RecordingSampler(LogitsProcessor):
    """Draws each row's next token (inverse CDF, or the most likely under ``greedy``) from the
    scores [R, V] and returns scores that are 0 at it and -inf elsewhere, so greedy ``generate``
    emits it; keeps its log-probability, log softmax(scores / temperature) (temperature 1 when
    greedy), float32, in ``logprobs`` (one [R] tensor per step)."""

    def __init__(self, settings: SamplingSettings) -> None:
        self.settings = settings
        self.logprobs: list[Tensor] = []

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        settings = self.settings
        scores = scores.float()
        if settings.greedy:
            tokens = scores.argmax(dim=-1)
        else:
            tokens = inverse_cdf_sample(
                scores, temperature=settings.temperature, top_p=settings.top_p
            )
        self.logprobs.append(token_logprobs(scores, tokens, settings).cpu())
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(1, tokens[:, None], 0.0)


class GenerateEngine:
    """``generate(policy, input_ids, attention, settings)`` through ``policy.generate``.
    ``settings.seed`` given: torch's global generator is seeded with it first; None: the global
    generator's current state draws, as before the engines."""

    name = "generate"

    @torch.no_grad()
    def generate(
        self, policy: Any, input_ids: Tensor, attention: Tensor, settings: SamplingSettings
    ) -> RolloutOutput:
        """Every row's tokens and log-probs (``engine.RolloutOutput``), rows in order."""
        device = next(policy.parameters()).device
        if settings.seed is not None and not settings.greedy:
            torch.manual_seed(settings.seed)
        sampler = RecordingSampler(settings)
        eos = list(settings.eos_token_ids)
        pad = eos[0] if eos else int(input_ids[0, 0])
        extra: dict[str, Any] = {}
        if settings.repetition_penalty != 1.0:
            extra["repetition_penalty"] = settings.repetition_penalty
        was_training = policy.training
        policy.eval()
        try:
            output = policy.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention.to(device),
                **shared_prompt_cache(policy, input_ids, attention),
                do_sample=False,
                logits_processor=[sampler],
                max_new_tokens=settings.max_new_tokens,
                pad_token_id=pad,
                eos_token_id=eos or None,
                use_cache=True,
                **extra,
            )
        finally:
            policy.train(was_training)
        responses = output[:, input_ids.shape[1] :].cpu()
        logprobs = torch.stack(sampler.logprobs, dim=1) if sampler.logprobs else None
        tokens, finished, lps = [], [], []
        for row in range(responses.shape[0]):
            kept, done = trim_at_eos(responses[row].tolist(), eos)
            tokens.append(kept)
            finished.append(done)
            lps.append(logprobs[row, : len(kept)].clone() if logprobs is not None else None)
        return RolloutOutput(tokens=tokens, logprobs=lps, finished=finished)
