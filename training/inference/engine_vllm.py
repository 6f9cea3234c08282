"""The vLLM rollout engine (the gpu extra): vLLM colocated in the training process on the policy's
CUDA device, as TRL's ``vllm_mode="colocate"`` and OpenRLHF run it (``engine.RolloutEngine``).

- The policy's current weights are pushed into vLLM's copy of the model (its ``load_weights``,
  with transformers' parameter names) whenever they changed since the last push: after each
  optimiser step, in practice, since a recipe samples once per step.
- Sampling settings map one to one onto ``vllm.SamplingParams`` (temperature, top_p, max_tokens,
  stop_token_ids, seed, repetition_penalty; greedy is temperature 0; no stop tokens: ignore_eos).
- vLLM's own log-probabilities are not used: each row's are recomputed by the policy in float32
  (``engine.policy_logprobs``), so the losses' maths stays ours whatever kernels vLLM ran.

Refused with ``EngineUnavailable`` (and what to use instead) where vLLM or CUDA is missing, or the
policy carries LoRA adapters. Not exercised in CI (no GPU there): bench/gpu_check.py runs it.

Shapes: R rows, W the left-padded prompt width.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch
from torch import Tensor

from training.inference.engine import (
    EngineUnavailable,
    RolloutOutput,
    SamplingSettings,
    policy_logprobs,
    prompt_rows,
    trim_at_eos,
    unwrap_policy,
    weights_fingerprint,
)

# Where vLLM keeps the in-process model across its versions (V0's driver worker, V1's in-process
# engine core); the first that resolves takes the pushed weights.
_MODEL_PATHS = (
    ("llm_engine", "model_executor", "driver_worker", "model_runner", "model"),
    ("llm_engine", "model_executor", "driver_worker", "worker", "model_runner", "model"),
)


def vllm_missing_reason(device: torch.device) -> str | None:
    """None when the vLLM engine can run on ``device``, else why not."""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (pip install -e '.[gpu]' on a CUDA machine)"
    if device.type != "cuda" or not torch.cuda.is_available():
        return f"vLLM needs a CUDA device, the policy is on {device.type}"
    return None


def sampling_params(settings: SamplingSettings, seed: int) -> Any:
    """``settings`` as vLLM's SamplingParams, field for field."""
    from vllm import SamplingParams

    return SamplingParams(
        n=1,
        temperature=0.0 if settings.greedy else settings.temperature,
        top_p=settings.top_p,
        max_tokens=settings.max_new_tokens,
        stop_token_ids=list(settings.eos_token_ids),
        ignore_eos=not settings.eos_token_ids,
        repetition_penalty=settings.repetition_penalty,
        seed=seed,
        detokenize=False,
    )


class VLLMEngine:
    """Colocated vLLM for ``policy`` (its config's folder is what vLLM loads first; the current
    weights replace them before each rollout). ``gpu_memory_utilization``: vLLM's share of the
    device (the rest stays for training); ``max_model_len``: the longest prompt + response."""

    name = "vllm"

    def __init__(
        self,
        policy: Any,
        *,
        gpu_memory_utilization: float = 0.3,
        max_model_len: int | None = None,
        model_path: str | None = None,
    ) -> None:
        device = next(policy.parameters()).device
        reason = vllm_missing_reason(device)
        if reason is None and unwrap_policy(policy)[1]:
            reason = "the policy carries LoRA adapters (merge them or use engine 'generate')"
        if reason is not None:
            raise EngineUnavailable(
                f"engine 'vllm' cannot run here: {reason}; use engine 'static' or 'generate'"
            )
        from vllm import LLM

        path = model_path or getattr(policy.config, "_name_or_path", None)
        if not path:
            raise EngineUnavailable("engine 'vllm' needs the policy's model folder to start from")
        dtype = next(policy.parameters()).dtype
        self.llm = LLM(
            model=str(path),
            dtype="bfloat16" if dtype == torch.bfloat16 else "auto",
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            enable_prefix_caching=True,  # G samples of one prompt share its prefill
        )
        self._pushed: tuple[int, ...] | None = None

    def _inner_model(self) -> Any:
        for path in _MODEL_PATHS:
            found: Any = self.llm
            for name in path:
                found = getattr(found, name, None)
                if found is None:
                    break
            if found is not None:
                return found
        return None

    def push_weights(self, policy: Any) -> None:
        """Copy the policy's current weights into vLLM's model (skipped when unchanged)."""
        version = weights_fingerprint(policy)
        if version == self._pushed:
            return
        weights = [(name, t.detach()) for name, t in policy.state_dict().items()]
        model = self._inner_model()
        if model is not None:
            model.load_weights(weights)
        else:  # vLLM >= 0.10: run the load inside its worker
            self.llm.apply_model(lambda m: m.load_weights(weights))
        if hasattr(self.llm, "reset_prefix_cache"):
            self.llm.reset_prefix_cache()  # cached prefixes hold the old weights' keys
        self._pushed = version

    @torch.no_grad()
    def generate(
        self, policy: Any, input_ids: Tensor, attention: Tensor, settings: SamplingSettings
    ) -> RolloutOutput:
        """Every row's tokens (vLLM) and log-probs (the policy's), rows in order."""
        prompts = prompt_rows(input_ids, attention)
        self.push_weights(policy)
        params = sampling_params(settings, settings.resolved_seed())
        outputs = self.llm.generate(
            [{"prompt_token_ids": ids} for ids in prompts], params, use_tqdm=False
        )
        tokens, finished = [], []
        for output in outputs:
            kept, done = trim_at_eos(list(output.outputs[0].token_ids), settings.eos_token_ids)
            tokens.append(kept)
            finished.append(done)
        temperature = 1.0 if settings.greedy else settings.temperature
        logprobs = policy_logprobs(policy, prompts, tokens, temperature=temperature)
        return RolloutOutput(tokens=tokens, logprobs=logprobs, finished=finished)
