"""The llama.cpp rollout engine: the policy's current weights pushed into llama.cpp (in-process,
through llama-cpp-python's C API: the ``serve`` extra), its forward passes, and our own sampler and
log-probabilities (``engine.RolloutEngine``), for plain Llama-family policies on the CPU.

How a call runs:

- **Weights.** The policy's weights are written as a GGUF file (``gguf_export``, in /dev/shm when
  there is one) and loaded by llama.cpp, the file unlinked once mapped. This happens again only
  when a parameter changed since the last call (``weights_fingerprint``), so an eval round's calls
  share one push.
- **Precision.** ``f32`` for a float32 policy, ``bf16`` under a bfloat16 autocast (the recipes'
  ``bf16``), ``f16`` for a float16 policy, unless ``precision`` says otherwise. In ``f32`` the keys
  and values are kept in float32 and flash attention is off, so the log-probabilities agree with a
  policy forward pass within 1e-4 (2.5e-5 on SmolLM2); otherwise they are kept in float16 with
  flash attention on.
- **Decoding.** Every row decodes in a llama.cpp sequence of its own (one KV stream per slot,
  ``max_batch`` slots). Each step is one ``llama_decode`` of the live rows' next tokens, plus the
  prompts of rows admitted into slots that freed up (continuous batching: a finished row's slot is
  refilled at once, and no step computes a row that is done). A prompt shared by rows admitted
  together is prefilled once and its keys and values copied to the others' sequences.
- **Sampling.** llama.cpp returns each row's logits (float32); the rows' next tokens, their
  log-probabilities and the repetition penalty are ``rows.RowStreams``'s, as in the static engine:
  the inverse-CDF sampler with per-row uniform streams, so a seed gives the same tokens.

Shapes: R rows, S slots, V vocabulary entries.
"""

from __future__ import annotations

import ctypes
import logging
import os
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from training.inference.engine import (
    EngineUnavailable,
    RolloutOutput,
    SamplingSettings,
    prompt_rows,
    static_supported,
    weights_fingerprint,
)
from training.inference.gguf_export import PRECISIONS, export_gguf
from training.inference.rows import RowStreams

logger = logging.getLogger(__name__)

# Positions per sequence are allocated in multiples of this (llama.cpp pads contexts to it).
CONTEXT_BLOCK = 256
# llama.cpp's limit on sequences in one context (llama_max_parallel_sequences).
MAX_SEQUENCES = 256
# Tokens one llama_decode takes (prompts and the live rows' tokens), and per pass inside it.
MIN_BATCH_TOKENS, MAX_BATCH_TOKENS, MAX_UBATCH_TOKENS = 512, 8192, 2048
_GGML_TYPE_F32, _GGML_TYPE_F16 = 0, 1
_FLASH_ATTN_DISABLED, _FLASH_ATTN_ENABLED = 0, 1  # llama_flash_attn_type
_LOG_ERROR = 4  # ggml_log_level: GGML_LOG_LEVEL_ERROR


def llama_cpp_missing() -> str | None:
    """None when llama-cpp-python is importable, else what to install."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return "llama-cpp-python is not installed (pip install -e '.[serve]')"
    return None


_LIBRARY: dict[str, Any] = {}


def _library() -> Any:
    """llama_cpp with its backend initialised once and its log lines routed to this module's
    logger (errors as warnings, the rest dropped)."""
    if "module" not in _LIBRARY:
        import llama_cpp

        def forward(level: int, text: bytes, _data: Any) -> None:
            if level == _LOG_ERROR and text:
                logger.warning("llama.cpp: %s", text.decode(errors="replace").rstrip())

        _LIBRARY["log"] = llama_cpp.llama_log_callback(forward)  # kept alive: C holds it
        llama_cpp.llama_log_set(_LIBRARY["log"], ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _LIBRARY["module"] = llama_cpp
    return _LIBRARY["module"]


def _gguf_folder() -> str | None:
    # mkstemp makes the file there: a unique name, mode 0600
    shm = Path("/dev/shm")  # noqa: S108  # nosec B108
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


class _Loaded:
    """One push of the weights: llama.cpp's model, and a context big enough for the last call."""

    def __init__(self, policy: Any, precision: str, fingerprint: tuple[int, ...]) -> None:
        """``fingerprint``: ``weights_fingerprint(policy)``, which the caller has just computed."""
        lib = _library()
        self.lib, self.precision, self.fingerprint = lib, precision, fingerprint
        handle, name = tempfile.mkstemp(
            prefix="concord-rollout-", suffix=".gguf", dir=_gguf_folder()
        )
        os.close(handle)
        try:
            export_gguf(policy, Path(name), precision)
            params = lib.llama_model_default_params()
            params.use_mmap = True
            self.model = lib.llama_model_load_from_file(name.encode(), params)
        finally:
            os.unlink(name)  # the mapping keeps the pages while the model lives
        if not self.model:
            raise EngineUnavailable("llama.cpp could not load the policy's weights (see the log)")
        self.vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self.model))
        self.context: Any = None
        self.slots = self.per_slot = self.batch_tokens = self.threads = 0

    def context_for(self, slots: int, capacity: int, batch_tokens: int, threads: int) -> Any:
        """A context of at least ``slots`` sequences of ``capacity`` positions each and
        ``batch_tokens`` tokens per decode on ``threads`` threads; its memory emptied."""
        lib = self.lib
        fits = (
            self.context
            and self.slots >= slots
            and self.per_slot >= capacity
            and self.batch_tokens >= batch_tokens
            and self.threads == threads
        )
        if not fits:
            self.free_context()
            per_slot = -(-capacity // CONTEXT_BLOCK) * CONTEXT_BLOCK
            params = lib.llama_context_default_params()
            params.n_ctx = slots * per_slot
            params.n_batch = batch_tokens
            params.n_ubatch = min(batch_tokens, MAX_UBATCH_TOKENS)
            params.n_seq_max = slots
            params.n_threads = params.n_threads_batch = threads
            params.kv_unified = False  # one stream per sequence: a row attends to its own keys only
            exact = self.precision == "f32"
            params.type_k = params.type_v = _GGML_TYPE_F32 if exact else _GGML_TYPE_F16
            # llama.cpp's CPU flash attention rounds the queries to float16: off in float32 (the
            # log-probs then agree with the policy's within 1e-4), on otherwise, where it was
            # 1.1-1.3x faster (bench/README.md)
            params.flash_attn_type = _FLASH_ATTN_DISABLED if exact else _FLASH_ATTN_ENABLED
            params.no_perf = True
            self.context = lib.llama_init_from_model(self.model, params)
            if not self.context:
                raise EngineUnavailable(
                    f"llama.cpp could not allocate a context of {slots} x {per_slot} positions"
                )
            self.slots, self.per_slot = slots, per_slot
            self.batch_tokens, self.threads = batch_tokens, threads
        lib.llama_memory_clear(lib.llama_get_memory(self.context), True)
        return self.context

    def free_context(self) -> None:
        if self.context:
            self.lib.llama_free(self.context)
        self.context = None

    def close(self) -> None:
        self.free_context()
        if self.model:
            self.lib.llama_model_free(self.model)
        self.model = None

    def __del__(self) -> None:
        # No contextlib here: at interpreter shutdown module globals (and the library) may be gone.
        try:  # noqa: SIM105
            self.close()
        except Exception:  # noqa: S110  # nosec B110
            pass


class LlamaCppEngine:
    """``generate(policy, input_ids, attention, settings)`` on llama.cpp with ``max_batch`` slots;
    ``precision`` ('f32', 'bf16' or 'f16') overrides the one the policy and autocast imply;
    ``threads``: llama.cpp's threads (None: torch's intra-op thread count)."""

    name = "llamacpp"

    def __init__(
        self, *, max_batch: int = 64, precision: str | None = None, threads: int | None = None
    ) -> None:
        missing = llama_cpp_missing()
        if missing is not None:
            raise EngineUnavailable(f"engine 'llamacpp' cannot run here: {missing}")
        if not 1 <= max_batch <= MAX_SEQUENCES:
            raise ValueError(f"max_batch must be in 1..{MAX_SEQUENCES}, got {max_batch}")
        if precision is not None and precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.max_batch, self.precision, self.threads = max_batch, precision, threads
        self._loaded: _Loaded | None = None
        self.precision_used: str | None = None  # the last call's
        self.pushes = 0  # how many times the weights were written to llama.cpp

    def _precision(self, policy: Any) -> str:
        if self.precision is not None:
            return self.precision
        if torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16:
            return "bf16"
        dtype = next(policy.parameters()).dtype
        return {torch.bfloat16: "bf16", torch.float16: "f16"}.get(dtype, "f32")

    def _weights(self, policy: Any, precision: str) -> _Loaded:
        loaded, fingerprint = self._loaded, weights_fingerprint(policy)
        if loaded is None or loaded.precision != precision or loaded.fingerprint != fingerprint:
            if loaded is not None:
                loaded.close()
            self._loaded = None  # stays None when the new push fails
            self._loaded = loaded = _Loaded(policy, precision, fingerprint)
            self.pushes += 1
        return loaded

    @torch.no_grad()
    def generate(
        self, policy: Any, input_ids: Tensor, attention: Tensor, settings: SamplingSettings
    ) -> RolloutOutput:
        """Every row's tokens and log-probs (``engine.RolloutOutput``), rows in order."""
        reason = static_supported(policy)
        if reason is not None:
            raise EngineUnavailable(
                f"engine 'llamacpp' cannot run this policy: {reason}; use engine 'generate'"
            )
        device = next(policy.parameters()).device
        if device.type != "cpu":
            raise EngineUnavailable(
                f"engine 'llamacpp' runs on the CPU, the policy is on {device.type}; use engine "
                "'vllm' or 'static' there"
            )
        prompts = prompt_rows(input_ids, attention)
        started = time.perf_counter()
        self.precision_used = self._precision(policy)
        loaded = self._weights(policy, self.precision_used)
        pushed = time.perf_counter() - started
        seed = 0 if settings.greedy else settings.resolved_seed()  # greedy draws nothing
        slots = min(len(prompts), self.max_batch)
        longest = max(len(p) for p in prompts)
        # Room in one decode for every distinct prompt of the first rows (they all start on the
        # first step, so none lags the others to the end), at least for a prompt beside every slot.
        first = sum(len(p) for p in {tuple(p): p for p in prompts[:slots]}.values())
        room = max(MIN_BATCH_TOKENS, slots + longest, min(first + slots, MAX_BATCH_TOKENS))
        context = loaded.context_for(
            slots, longest + settings.max_new_tokens, room, self.threads or torch.get_num_threads()
        )
        run = _Run(loaded, context, prompts, settings, seed, slots)
        output = run.loop()
        output.stats["push_seconds"] = pushed
        return output

    def close(self) -> None:
        """Free llama.cpp's model and context now (they are freed with the engine otherwise)."""
        if self._loaded is not None:
            self._loaded.close()
        self._loaded = None


class _Run:
    """One ``generate`` call's sequences, waiting rows and outputs."""

    def __init__(
        self,
        loaded: _Loaded,
        context: Any,
        prompts: list[list[int]],
        settings: SamplingSettings,
        seed: int,
        slots: int,
    ) -> None:
        self.lib, self.context, self.prompts = loaded.lib, context, prompts
        self.memory = self.lib.llama_get_memory(context)
        self.vocab, self.room = loaded.vocab, loaded.batch_tokens
        self.streams = RowStreams(
            len(prompts),
            settings,
            seed,
            slots=slots,
            vocab=loaded.vocab,
            device=torch.device("cpu"),
        )
        self.batch = self.lib.llama_batch_init(loaded.batch_tokens, 0, 1)
        self.waiting = deque(range(len(prompts)))
        self.free = list(range(slots - 1, -1, -1))  # popped from the end: slot 0 first
        self.live: list[int] = []  # slots holding a row that is still generating
        self.slot_row = [-1] * slots
        self.position = [0] * slots  # where the slot's next input token goes
        self.next_token = [0] * slots
        self.stats = {"prefills": 0.0, "decode_steps": 0.0, "copies": 0.0}

    def _add(self, token: int, position: int, slot: int, wants_logits: bool) -> None:
        batch, i = self.batch, self.batch.n_tokens
        batch.token[i], batch.pos[i] = token, position
        batch.n_seq_id[i], batch.seq_id[i][0] = 1, slot
        batch.logits[i] = wants_logits
        batch.n_tokens = i + 1

    def _admit(self, outputs: list[tuple[int, int]], copies: list[tuple[int, int]]) -> None:
        """Move waiting rows into free slots while the batch has room: a prompt not yet in this
        batch is added whole (logits for its last token), a repeated one is copied after the
        decode from the slot that prefills it. ``outputs`` gains (slot, batch index) pairs."""
        sources: dict[tuple[int, ...], tuple[int, int]] = {}  # prompt -> (slot, batch index)
        while self.free and self.waiting:
            row = self.waiting[0]
            prompt = self.prompts[row]
            key = tuple(prompt)
            if key not in sources and self.batch.n_tokens + len(prompt) > self.room:
                break
            self.waiting.popleft()
            slot = self.free.pop()
            self.lib.llama_memory_seq_rm(self.memory, slot, -1, -1)
            if key in sources:
                source, index = sources[key]
                copies.append((source, slot))
            else:
                for position, token in enumerate(prompt):
                    self._add(token, position, slot, position == len(prompt) - 1)
                index = self.batch.n_tokens - 1
                sources[key] = (slot, index)
                self.stats["prefills"] += 1
            self.slot_row[slot], self.position[slot] = row, len(prompt)
            self.streams.start(slot, prompt)
            outputs.append((slot, index))

    def _logits(self, indices: list[int]) -> Tensor:
        """The float32 logits [n, V] llama.cpp computed at these batch indices."""
        out = torch.empty(len(indices), self.vocab, dtype=torch.float32)
        row_bytes = self.vocab * 4
        base = out.data_ptr()
        for k, index in enumerate(indices):
            source = self.lib.llama_get_logits_ith(self.context, index)
            ctypes.memmove(base + k * row_bytes, source, row_bytes)
        return out

    def loop(self) -> RolloutOutput:
        started = time.perf_counter()
        try:
            while self.live or self.waiting:
                self._step()
        finally:
            self.lib.llama_batch_free(self.batch)
        self.stats["seconds"] = time.perf_counter() - started
        return self.streams.output(self.stats)

    def _step(self) -> None:
        """One decode: the live rows' next tokens and the admitted rows' prompts, then a token
        drawn for each."""
        self.batch.n_tokens = 0
        outputs: list[tuple[int, int]] = []
        for slot in self.live:
            self._add(self.next_token[slot], self.position[slot], slot, True)
            outputs.append((slot, self.batch.n_tokens - 1))
            self.position[slot] += 1
        copies: list[tuple[int, int]] = []
        self._admit(outputs, copies)
        status = self.lib.llama_decode(self.context, self.batch)
        if status != 0:
            raise RuntimeError(f"llama_decode failed with status {status}")
        self.stats["decode_steps"] += 1
        for source, target in copies:
            self.lib.llama_memory_seq_cp(self.memory, source, target, -1, -1)
        self.stats["copies"] += len(copies)
        slots = [slot for slot, _ in outputs]
        rows = [self.slot_row[slot] for slot in slots]
        logits = self._logits([index for _, index in outputs])
        tokens, logps = self.streams.draw(logits, rows, slots)
        live = []
        for slot, row, token, logp in zip(slots, rows, tokens, logps, strict=True):
            if self.streams.record(slot, row, token, logp):
                self.next_token[slot] = token
                live.append(slot)
            else:
                self.free.append(slot)
        self.live = live
