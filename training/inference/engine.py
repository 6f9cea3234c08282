"""The rollout engine's one interface: prompts (token ids and attention), sampling settings and the
current weights (the policy module) -> each row's generated token ids and their log-probabilities.

Four engines stand behind it (``make_engine``):

- ``generate``: transformers' ``generate`` with the shared-prompt prefill and the inverse-CDF
  sampler (``engine_generate``), what the recipes always used; any causal LM, LoRA included.
- ``static``: an in-process engine for Llama-family models with a preallocated KV cache and
  continuous batching (``engine_static``), CPU or any GPU, optionally ``torch.compile``d.
- ``llamacpp``: llama.cpp in-process (``engine_llamacpp``; the serve extra) for Llama-family models
  on the CPU, the policy's weights pushed as GGUF when they changed, our sampler on its logits.
- ``vllm``: colocated vLLM on CUDA (``engine_vllm``; the gpu extra), the policy's weights pushed
  before each rollout, log-probabilities recomputed by the policy.

``engine_choice`` builds them by name; ``auto`` is ``static`` for a plain Llama-family policy on the
CPU, where the benches measured it faster, else ``generate`` (bench/README.md).

Shapes: R rows, W the left-padded prompt width, T_r the tokens generated for row r.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor

from training.recipes.config import ROLLOUT_ENGINES

ENGINES = ROLLOUT_ENGINES


class EngineUnavailable(RuntimeError):
    """The engine asked for cannot run here (its package, its hardware, or the model's kind is
    missing): the message says what and what to pick instead."""


@dataclass(frozen=True)
class SamplingSettings:
    """How to draw each row's tokens.

    ``temperature`` and ``top_p`` shape softmax(logits / temperature) restricted to the top-p
    nucleus (``sampling.inverse_cdf_sample``); ``greedy`` takes the most likely token instead.
    ``eos_token_ids``: a row stops after emitting one (empty: it runs to ``max_new_tokens``).
    ``seed``: the engine's per-row random streams (same seed, same tokens); None draws one seed
    from torch's global generator, so a restored RNG state gives the same tokens again.
    ``repetition_penalty`` (1.0: off) is transformers' (CTRL's): a seen token's logit is divided by
    it when positive, multiplied when negative.
    """

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    greedy: bool = False
    eos_token_ids: tuple[int, ...] = ()
    seed: int | None = None
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not self.greedy and self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 when sampling, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")

    def resolved_seed(self) -> int:
        """``seed``, or one drawn from torch's global generator (63 bits)."""
        if self.seed is not None:
            return self.seed
        return int(torch.randint(0, 2**62, (), dtype=torch.long))


@dataclass
class RolloutOutput:
    """What an engine returns, one entry per prompt row, in order: the generated token ids (up to
    and including the first EOS), their log-probabilities (float32, log softmax(logits / temperature)
    of the logits the sampler read; temperature 1 when greedy), and whether EOS was emitted."""

    tokens: list[list[int]]
    logprobs: list[Tensor]  # [T_r] float32 each
    finished: list[bool]
    stats: dict[str, float] = field(default_factory=dict)


class RolloutEngine(Protocol):
    """prompts, sampling settings, current weights -> token ids and log-probs."""

    name: str

    def generate(
        self, policy: Any, input_ids: Tensor, attention: Tensor, settings: SamplingSettings
    ) -> RolloutOutput:
        """``input_ids``/``attention`` [R, W] left-padded prompts; ``policy`` the module whose
        current weights generate."""
        ...


def prompt_rows(input_ids: Tensor, attention: Tensor) -> list[list[int]]:
    """Each row's prompt without its padding: [R] lists of token ids."""
    if input_ids.shape != attention.shape or input_ids.dim() != 2:
        raise ValueError(
            f"input_ids and attention must both be [R, W], got {tuple(input_ids.shape)} and "
            f"{tuple(attention.shape)}"
        )
    rows = [ids[mask.bool()].tolist() for ids, mask in zip(input_ids, attention, strict=True)]
    if any(not row for row in rows):
        raise ValueError("every prompt row needs at least one token")
    return rows


@cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (Linux /proc/cpuinfo; empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes in bfloat16 natively: a CUDA device of compute capability 8+, or
    a CPU with AVX512-BF16 or AMX-BF16 (elsewhere bfloat16 is emulated and slower than float32)."""
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.get_device_capability(device)[0] >= 8
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


def unwrap_policy(policy: Any) -> tuple[Any, bool]:
    """(the transformers model under ``policy``, whether it carries adapters or a wrapper the static
    engine cannot read its weights through: a peft model, or ``lora.BaseModelView``)."""
    if hasattr(policy, "get_base_model") or not isinstance(policy, torch.nn.Module):
        return policy, True
    return policy, False


def static_supported(policy: Any) -> str | None:
    """None when the static engine can run ``policy`` (a plain Llama-family causal LM), else why
    not, in words."""
    model, wrapped = unwrap_policy(policy)
    if wrapped:
        return "the policy carries LoRA adapters (the static engine reads plain weights only)"
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) != "llama":
        kind = getattr(config, "model_type", type(model).__name__)
        return f"the static engine runs Llama-family models, this one is {kind!r}"
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "layers") or not hasattr(model, "lm_head"):
        return "the model has no decoder stack and output layer where LlamaForCausalLM keeps them"
    return None


@torch.no_grad()
def weights_fingerprint(policy: Any) -> tuple[int, ...]:
    """A checksum per parameter of ``policy``: the sum of its values' bit patterns as integers
    (int64), computed where the parameter lives. Any update an optimiser makes changes it, which
    version counters do not promise: the fused AdamW the recipes use writes parameters without
    bumping them. About 50 ms for SmolLM2-135M on 2 CPU threads."""
    sums = []
    for parameter in policy.parameters():
        data = parameter.detach().reshape(-1)
        bits = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[data.element_size()]
        sums.append(data.view(bits).sum(dtype=torch.int64))
    return tuple(torch.stack(sums).tolist()) if sums else ()


@torch.no_grad()
def policy_logprobs(
    policy: Any,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    *,
    temperature: float = 1.0,
) -> list[Tensor]:
    """Each response token's log-probability under ``policy`` [T_r] float32: log softmax(logits /
    temperature) of one teacher-forced forward pass over prompt + response (right-padded batch)."""
    device = next(policy.parameters()).device
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses, strict=True)]
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        ids[row, : lengths[row]] = torch.tensor([*prompt, *response])
        mask[row, : lengths[row]] = 1
    logits = policy(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float()
    logp = torch.log_softmax(logits / temperature, dim=-1).cpu()
    out = []
    for row, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        start = len(prompt) - 1
        picked = logp[row, start : start + len(response)]
        out.append(picked.gather(1, torch.tensor(response, dtype=torch.long)[:, None])[:, 0])
    return out


def token_logprobs(logits: Tensor, tokens: Tensor, settings: SamplingSettings) -> Tensor:
    """log softmax(logits / temperature) [B, V] at ``tokens`` [B] -> [B] float32 (temperature 1
    when greedy), without materialising the [B, V] log-softmax."""
    scaled = logits.float() if settings.greedy else logits.float() / settings.temperature
    return scaled.gather(1, tokens[:, None])[:, 0] - torch.logsumexp(scaled, dim=-1)


def trim_at_eos(tokens: Sequence[int], eos_token_ids: Sequence[int]) -> tuple[list[int], bool]:
    """(tokens up to and including the first EOS, whether there was one)."""
    stops = set(eos_token_ids)
    for i, token in enumerate(tokens):
        if token in stops:
            return list(tokens[: i + 1]), True
    return list(tokens), False
