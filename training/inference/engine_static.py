"""The static rollout engine: a preallocated KV cache, continuous batching and an optionally compiled
decode step, for plain Llama-family policies on the CPU or any GPU (``engine.RolloutEngine``).

How a call runs:

- Each distinct prompt is prefilled once (``engine_llama.prefill``: up to ``max_batch`` distinct
  prompts per forward pass, right-padded, so no prompt sees padding), and its keys and values are
  copied into the slot of every row that holds it (G samples of one prompt share one prefill);
  its last logits give each such row's first token.
- The cache holds ``max_batch`` slots (fewer when there are fewer rows). Every step decodes the
  live slots, which are always the first B: a finished row's slot is refilled at once from the
  waiting rows, or, when none wait, the last live slot moves into it and the batch shrinks, so
  no step computes a row that is done.
- Row r's t-th token is drawn with the t-th of its own uniform numbers (``rows.RowStreams``), so
  what a row samples does not depend on which rows share its steps, and a seed gives the same
  tokens run to run.
- The weights are a snapshot of the policy's current ones in the engine's dtype: bfloat16 when
  the caller runs under bfloat16 autocast (the recipes' ``bf16``), else the policy's own.

Shapes: R rows, S slots, V vocabulary entries.
"""

from __future__ import annotations

import time
import warnings
from collections import deque
from typing import Any

import torch
from torch import Tensor

from training.inference.engine import RolloutOutput, SamplingSettings, prompt_rows
from training.inference.engine_llama import LlamaWeights, decode_step, prefill
from training.inference.rows import RowStreams

# Positions a decode step reads are rounded up to a multiple of this (fewer shapes to compile).
LENGTH_BUCKET = 32


def engine_dtype(policy: Any, device: torch.device) -> torch.dtype:
    """bfloat16 under a bfloat16 autocast on ``device``, else the policy's parameter dtype."""
    autocast = torch.is_autocast_enabled(device.type)
    if autocast and torch.get_autocast_dtype(device.type) == torch.bfloat16:
        return torch.bfloat16
    return next(policy.parameters()).dtype


class StaticEngine:
    """``generate(policy, input_ids, attention, settings)`` with a preallocated cache of
    ``max_batch`` slots; ``compile``: run the decode step through ``torch.compile`` (falls back to
    eager with a warning when compiling fails); ``dtype`` overrides ``engine_dtype``; ``threads``:
    torch's intra-op threads during a call (None: as set; 1 measured 3-7x faster decode steps than
    2 on 2 cores shared with other work, where every parallel operation waits for its slowest
    thread; bench/README.md)."""

    name = "static"

    def __init__(
        self,
        *,
        max_batch: int = 64,
        compile: bool = False,
        dtype: torch.dtype | None = None,
        threads: int | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.threads = threads
        self.max_batch = max_batch
        self.dtype = dtype
        self.compile = compile
        self._step: Any = decode_step
        self._compiled = False

    def _decode(self, *args: Any) -> Tensor:
        if self.compile and not self._compiled:
            self._compiled = True
            try:
                compiled = torch.compile(decode_step, dynamic=True)
                out = compiled(*args)
            except Exception as error:
                warnings.warn(
                    f"torch.compile of the decode step failed ({type(error).__name__}: "
                    f"{str(error)[:200]}); decoding eagerly",
                    RuntimeWarning,
                    stacklevel=3,
                )
                return decode_step(*args)
            self._step = compiled
            return out
        return self._step(*args)

    @torch.no_grad()
    def generate(
        self, policy: Any, input_ids: Tensor, attention: Tensor, settings: SamplingSettings
    ) -> RolloutOutput:
        """Every row's tokens and log-probs (``engine.RolloutOutput``), rows in order."""
        prompts = prompt_rows(input_ids, attention)
        device = next(policy.parameters()).device
        dtype = self.dtype or engine_dtype(policy, device)
        seed = 0 if settings.greedy else settings.resolved_seed()  # greedy draws nothing
        was_training, threads = policy.training, torch.get_num_threads()
        policy.eval()
        try:
            if self.threads is not None:
                torch.set_num_threads(self.threads)
            with torch.autocast(device.type, enabled=False):
                weights = LlamaWeights.snapshot(policy, dtype)
                run = _Run(self, weights, prompts, settings, seed)
                return run.loop()
        finally:
            torch.set_num_threads(threads)
            policy.train(was_training)


class _Run:
    """One ``generate`` call's slots, waiting rows and outputs."""

    def __init__(
        self,
        engine: StaticEngine,
        weights: LlamaWeights,
        prompts: list[list[int]],
        settings: SamplingSettings,
        seed: int,
    ) -> None:
        self.engine, self.w, self.prompts, self.settings = engine, weights, prompts, settings
        device = weights.device
        rows = len(prompts)
        self.slots = min(rows, engine.max_batch)
        self.capacity = max(len(p) for p in prompts) + settings.max_new_tokens
        self.cos, self.sin = weights.rope_tables(self.capacity)
        shape = (self.slots, weights.kv_heads, self.capacity, weights.head_dim)
        self.keys = [torch.zeros(shape, dtype=weights.dtype, device=device) for _ in weights.layers]
        self.values = [torch.zeros_like(k) for k in self.keys]
        self.streams = RowStreams(
            rows, settings, seed, slots=self.slots, vocab=weights.embed.shape[0], device=device
        )
        self.waiting = deque(range(rows))
        self.remaining: dict[tuple[int, ...], int] = {}
        for prompt in prompts:
            key = tuple(prompt)
            self.remaining[key] = self.remaining.get(key, 0) + 1
        self.distinct = list(self.remaining)  # in order of first occurrence
        self.prefixes: dict[tuple[int, ...], tuple[list[Tensor], list[Tensor], Tensor]] = {}
        self.slot_row = [-1] * self.slots
        self.position = [0] * self.slots  # where the slot's next input token goes
        self.next_token = [0] * self.slots
        self.stats = {"prefills": 0.0, "decode_steps": 0.0, "slot_moves": 0.0}  # prefill passes

    def _prefix(self, prompt: list[int]) -> tuple[list[Tensor], list[Tensor], Tensor]:
        """The prompt's keys and values per layer [K, P, D] and last logits [V]; prefilled with
        the next distinct prompts still to come (up to ``max_batch`` in one forward pass) when
        it is not ready yet, and forgotten once every row holding it has its copy."""
        key = tuple(prompt)
        if key not in self.prefixes:
            chunk = [p for p in self.distinct if p not in self.prefixes and self.remaining[p]]
            chunk = chunk[chunk.index(key) : chunk.index(key) + self.engine.max_batch]
            keys, values, logits = prefill(self.w, [list(p) for p in chunk], self.cos, self.sin)
            for u, p in enumerate(chunk):
                n = len(p)
                self.prefixes[p] = (
                    [k[u, :, :n] for k in keys],
                    [v[u, :, :n] for v in values],
                    logits[u],
                )
            self.stats["prefills"] += 1
        found = self.prefixes[key]
        self.remaining[key] -= 1
        if self.remaining[key] == 0:
            del self.prefixes[key]  # every row of this prompt has its copy
        return found

    def _admit(self, slot: int) -> bool:
        """Put waiting rows into ``slot`` until one is still generating after its first token;
        False when the waiting rows ran out first."""
        while self.waiting:
            row = self.waiting.popleft()
            prompt = self.prompts[row]
            keys, values, logits = self._prefix(prompt)
            n = len(prompt)
            for cache_k, cache_v, k, v in zip(self.keys, self.values, keys, values, strict=True):
                cache_k[slot, :, :n] = k
                cache_v[slot, :, :n] = v
            self.streams.start(slot, prompt)
            tokens, logps = self.streams.draw(logits[None], [row], [slot])
            if self.streams.record(slot, row, tokens[0], logps[0]):
                self.slot_row[slot], self.position[slot] = row, n
                self.next_token[slot] = tokens[0]
                return True
        return False

    def _move(self, source: int, target: int) -> None:
        for cache in (*self.keys, *self.values):
            cache[target].copy_(cache[source])
        self.streams.move(source, target)
        for state in (self.slot_row, self.position, self.next_token):
            state[target] = state[source]
        self.stats["slot_moves"] += 1

    def loop(self) -> RolloutOutput:
        started = time.perf_counter()
        live = 0
        while live < self.slots and self._admit(live):
            live += 1
        device = self.w.device
        while live:
            positions = self.position[:live]
            length = min(self.capacity, -(-(max(positions) + 1) // LENGTH_BUCKET) * LENGTH_BUCKET)
            logits = self.engine._decode(
                self.w,
                torch.tensor(self.next_token[:live], device=device),
                torch.tensor(positions, device=device),
                self.cos, self.sin, self.keys, self.values, length,
            )  # fmt: skip
            self.stats["decode_steps"] += 1
            rows = self.slot_row[:live]
            tokens, logps = self.streams.draw(logits, rows, slice(0, live))
            done = []
            for slot, (row, token, logp) in enumerate(zip(rows, tokens, logps, strict=True)):
                self.position[slot] += 1
                self.next_token[slot] = token
                if not self.streams.record(slot, row, token, logp):
                    done.append(slot)
            for slot in reversed(done):  # later slots first: those above are live
                if self._admit(slot):
                    continue
                live -= 1
                if slot != live:
                    self._move(live, slot)
        self.stats["seconds"] = time.perf_counter() - started
        return self.streams.output(self.stats)
