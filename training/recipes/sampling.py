"""Drawing the next token for rollouts: inverse-CDF sampling as a logits processor under greedy
decoding, instead of ``generate``'s ``torch.multinomial``.

``multinomial`` on the CPU draws one exponential random number per vocabulary entry for every row
at every step (49,152 per row for SmolLM2: 71 ms a step for 64 rows, 15% of a 32-token rollout,
measured). Inverse-CDF sampling needs one uniform number per row and a cumulative sum: the same
distribution, softmax(logits / temperature) restricted to the top-p nucleus, from different random
numbers. ``InverseCdfSampler`` draws the token and returns scores that are -inf everywhere else, so
``generate(do_sample=False)`` (argmax) emits exactly the drawn token.

Shapes: B rows, V vocabulary entries.
"""

from __future__ import annotations

import torch
from torch import Tensor
from transformers import LogitsProcessor


def inverse_cdf_sample(
    scores: Tensor,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    uniforms: Tensor | None = None,
) -> Tensor:
    """One token per row [B] (long) drawn from softmax(scores / temperature) [B, V], restricted to
    the smallest set of most likely tokens whose mass reaches ``top_p`` (1.0: the whole
    vocabulary), with one uniform random number per row: ``uniforms`` [B] in [0, 1) when given
    (the rollout engine's per-row streams), else drawn from torch's global generator."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    probs = torch.softmax(scores.float() / temperature, dim=-1)
    order = None
    if top_p < 1.0:
        probs, order = probs.sort(dim=-1, descending=True)
        # Keep each token whose more likely predecessors hold less than top_p (the first always).
        probs = probs * ((probs.cumsum(-1) - probs) < top_p)
    cdf = probs.cumsum(-1)
    if uniforms is None:
        uniforms = torch.rand(cdf.shape[0], device=cdf.device, dtype=cdf.dtype)
    draw = uniforms.to(device=cdf.device, dtype=cdf.dtype)[:, None] * cdf[:, -1:]
    # The first index whose cumulative mass exceeds the draw: a zero-probability token (a flat
    # step of the CDF) can never be it.
    tokens = torch.searchsorted(cdf, draw, right=True).clamp_(max=cdf.shape[-1] - 1)
    if order is not None:
        tokens = order.gather(1, tokens)
    return tokens.squeeze(1)


class InverseCdfSampler(LogitsProcessor):
    """A transformers logits processor (called with input_ids [B, T] and scores [B, V]) that
    draws each row's next token by ``inverse_cdf_sample`` and returns scores that are 0 at that
    token and -inf elsewhere: pass it to ``generate(do_sample=False, logits_processor=[...])``."""

    def __init__(self, *, temperature: float = 1.0, top_p: float = 1.0) -> None:
        self.temperature = temperature
        self.top_p = top_p

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        tokens = inverse_cdf_sample(scores, temperature=self.temperature, top_p=self.top_p)
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(1, tokens[:, None], 0.0)
