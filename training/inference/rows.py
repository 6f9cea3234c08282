"""What every in-process rollout engine keeps per row during one call, whatever holds its keys and
values (the static engine's preallocated cache, llama.cpp's sequences): each row's random stream,
its tokens and log-probabilities so far, whether it emitted EOS, and, under a repetition penalty,
which tokens the row's slot has seen.

Row r's t-th token is drawn with the t-th of its own uniform numbers (a table drawn up front from
the call's seed), so what a row samples does not depend on which rows share its steps, and a seed
gives the same tokens run to run.

Shapes: R rows, S slots (the rows decoded together), V vocabulary entries.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from training.inference.engine import RolloutOutput, SamplingSettings, token_logprobs
from training.recipes.sampling import inverse_cdf_sample


class RowStreams:
    """The ``rows`` (R) of one engine call: ``draw`` their next tokens from logits, ``record``
    them, and ``output`` the call's ``RolloutOutput``. ``slots``: how many rows decode at once (the
    repetition penalty's seen-token table is per slot); ``vocab``: V."""

    def __init__(
        self,
        rows: int,
        settings: SamplingSettings,
        seed: int,
        *,
        slots: int,
        vocab: int,
        device: torch.device,
    ) -> None:
        self.settings = settings
        generator = torch.Generator().manual_seed(seed)
        self.uniforms = torch.rand(rows, settings.max_new_tokens, generator=generator).to(device)
        self.seen: Tensor | None = None  # [S, V] bool, only under a repetition penalty
        if settings.repetition_penalty != 1.0:
            self.seen = torch.zeros(slots, vocab, dtype=torch.bool, device=device)
        self.eos = set(settings.eos_token_ids)
        self.tokens: list[list[int]] = [[] for _ in range(rows)]
        self.logprobs: list[list[float]] = [[] for _ in range(rows)]
        self.finished = [False] * rows

    def draw(
        self, logits: Tensor, rows: Sequence[int], slots: slice | Sequence[int]
    ) -> tuple[list[int], list[float]]:
        """Each row's next token and its log-prob from ``logits`` [n, V] (float32), row
        ``rows[i]`` decoding in slot ``slots[i]`` (the repetition penalty applied first)."""
        logits = self._penalise(logits, slots)
        settings = self.settings
        steps = torch.tensor([len(self.tokens[r]) for r in rows], device=logits.device)
        if settings.greedy:
            tokens = logits.argmax(dim=-1)
        else:
            index = torch.tensor(list(rows), device=logits.device)
            tokens = inverse_cdf_sample(
                logits, temperature=settings.temperature, top_p=settings.top_p,
                uniforms=self.uniforms[index, steps],
            )  # fmt: skip
        return tokens.tolist(), token_logprobs(logits, tokens, settings).tolist()

    def _penalise(self, logits: Tensor, slots: slice | Sequence[int]) -> Tensor:
        if self.seen is None:
            return logits
        index = slots if isinstance(slots, slice) else torch.tensor(list(slots))
        seen, penalty = self.seen[index], self.settings.repetition_penalty
        scaled = torch.where(logits < 0, logits * penalty, logits / penalty)
        return torch.where(seen, scaled, logits)

    def start(self, slot: int, prompt: Sequence[int]) -> None:
        """A row holding ``prompt`` takes ``slot``: its seen tokens are the prompt's."""
        if self.seen is not None:
            self.seen[slot] = False
            self.seen[slot, torch.tensor(list(prompt), device=self.seen.device)] = True

    def move(self, source: int, target: int) -> None:
        """The row in slot ``source`` now decodes in slot ``target``."""
        if self.seen is not None:
            self.seen[target] = self.seen[source]

    def record(self, slot: int, row: int, token: int, logprob: float) -> bool:
        """Append the row's token; True while it goes on generating."""
        self.tokens[row].append(token)
        self.logprobs[row].append(logprob)
        if self.seen is not None:
            self.seen[slot, token] = True
        if token in self.eos:
            self.finished[row] = True
            return False
        return len(self.tokens[row]) < self.settings.max_new_tokens

    def output(self, stats: dict[str, float]) -> RolloutOutput:
        """The call's result, rows in order; ``stats`` gains the generated tokens' count."""
        stats["tokens"] = float(sum(len(t) for t in self.tokens))
        return RolloutOutput(
            tokens=self.tokens,
            logprobs=[torch.tensor(lp, dtype=torch.float32) for lp in self.logprobs],
            finished=self.finished,
            stats=stats,
        )
