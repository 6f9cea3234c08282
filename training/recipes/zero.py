"""DeepSpeed ZeRO configurations for the online recipes (PPO, RLOO), generated from the run's config.

``deepspeed`` in the config picks a preset: ZeRO-2 shards optimizer states and gradients across the
GPUs (enough for small policies), ZeRO-3 shards the parameters too (PIPELINE.md: a 7B policy plus
reference needs about 120 GB across 8 GPUs under ZeRO-3); the ``_offload`` presets keep optimizer
states (and under ZeRO-3 the parameters) in pinned CPU memory. The JSON follows DeepSpeed's ZeRO-3
example with concrete numbers instead of the Hugging Face Trainer's "auto" (DeepSpeed itself does not
resolve "auto"):

- batch: the online recipes run one forward and backward per optimiser step on each rank (RLOO: the
  step's B x K samples; PPO: a minibatch of ``minibatch_size`` rollouts), so a rank's micro-batch is
  its share of those rows and there is no accumulation: ``train_batch_size`` =
  ``train_micro_batch_size_per_gpu`` x ``gradient_accumulation_steps`` (1) x world size, as DeepSpeed
  requires;
- precision: ``bf16.enabled`` is the run's ``bf16``; fp16 is off (no loss scaling needed);
- ``gradient_clipping`` is ``max_grad_norm`` (0: none); the optimizer is AdamW with the run's
  learning rate and weight decay (DeepSpeed's CPU Adam when its states are offloaded);
- ZeRO-3 bucket sizes from the model's hidden size h as the Trainer's "auto" would set them:
  reduce bucket h^2, prefetch 0.9 h^2, parameters under 10 h elements stay unpartitioned.

This module only builds and checks configurations; it imports neither torch nor deepspeed at module
level, so the admin can show what a run would use.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.recipes.config import (
    ConfigError,
    GRPOConfig,
    OnlineRLConfig,
    PPOConfig,
    RLOOConfig,
)

BUCKET_ELEMENTS = 500_000_000  # ZeRO-2 all-gather / reduce buckets, DeepSpeed's documented default


@dataclass(frozen=True)
class ZeroPreset:
    stage: int
    offload_optimizer: bool
    offload_params: bool


ZERO_PRESETS = {
    "zero2": ZeroPreset(stage=2, offload_optimizer=False, offload_params=False),
    "zero2_offload": ZeroPreset(stage=2, offload_optimizer=True, offload_params=False),
    "zero3": ZeroPreset(stage=3, offload_optimizer=False, offload_params=False),
    "zero3_offload": ZeroPreset(stage=3, offload_optimizer=True, offload_params=True),
}


def rows_per_optimizer_step(config: OnlineRLConfig) -> int:
    """Sequences whose gradients make one optimiser step, over every rank."""
    if isinstance(config, RLOOConfig):
        return config.batch_size * config.rloo_k
    if isinstance(config, GRPOConfig):
        return config.batch_size * config.group_size
    if isinstance(config, PPOConfig):
        return config.minibatch_size
    return config.batch_size


def model_hidden_size(model_dir: str | Path) -> int | None:
    """``hidden_size`` from a Hugging Face folder's config.json (None when absent)."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        return None
    values = json.loads(path.read_text())
    size = values.get("hidden_size") or values.get("text_config", {}).get("hidden_size")
    return int(size) if size else None


def zero_config(
    config: OnlineRLConfig, *, world_size: int, hidden_size: int | None = None
) -> dict[str, Any]:
    """The DeepSpeed configuration for ``config.deepspeed`` on ``world_size`` GPUs."""
    if config.deepspeed not in ZERO_PRESETS:
        raise ConfigError(f"deepspeed: no ZeRO preset for {config.deepspeed!r}")
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    preset = ZERO_PRESETS[config.deepspeed]
    micro = -(-rows_per_optimizer_step(config) // world_size)
    accumulation = 1
    zero: dict[str, Any] = {
        "stage": preset.stage,
        "overlap_comm": True,
        "contiguous_gradients": True,
    }
    if preset.stage == 2:
        zero.update(
            allgather_partitions=True,
            allgather_bucket_size=BUCKET_ELEMENTS,
            reduce_scatter=True,
            reduce_bucket_size=BUCKET_ELEMENTS,
            round_robin_gradients=preset.offload_optimizer,
        )
    else:
        h = hidden_size or 4096
        zero.update(
            reduce_bucket_size=h * h,
            stage3_prefetch_bucket_size=int(0.9 * h * h),
            stage3_param_persistence_threshold=10 * h,
            sub_group_size=1_000_000_000,
            stage3_max_live_parameters=1_000_000_000,
            stage3_max_reuse_distance=1_000_000_000,
            stage3_gather_16bit_weights_on_model_save=True,
        )
    if preset.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if preset.offload_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_batch_size": micro * accumulation * world_size,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": accumulation,
        "gradient_clipping": config.max_grad_norm or 0.0,
        "bf16": {"enabled": config.bf16},
        "fp16": {"enabled": False},
        "optimizer": {
            "type": "AdamW",
            "params": {
                "lr": config.learning_rate,
                "betas": [0.9, 0.999],
                "eps": 1e-8,
                "weight_decay": config.weight_decay,
                # torch's AdamW on GPU states; DeepSpeed's CPU Adam for offloaded states
                "torch_adam": not preset.offload_optimizer,
            },
        },
        "zero_optimization": zero,
        "steps_per_print": 1_000_000,  # the recipe logs its own metrics
        "wall_clock_breakdown": False,
    }


def write_zero_config(config: OnlineRLConfig, path: Path, *, world_size: int) -> Path:
    """Write the run's DeepSpeed JSON (the hidden size read from the policy's folder)."""
    values = zero_config(config, world_size=world_size, hidden_size=model_hidden_size(config.model))
    path.write_text(json.dumps(values, indent=2) + "\n")
    return path


def zero_unavailable_reason(device_type: str) -> str | None:
    """Why ZeRO cannot run here (None when it can): it needs CUDA and the deepspeed package."""
    if device_type != "cuda":
        return f"it runs on CUDA GPUs and this run's device is {device_type!r}"
    if importlib.util.find_spec("deepspeed") is None:
        return "the deepspeed package is not installed (pip install -e '.[gpu]')"
    return None


def require_zero_available(config: OnlineRLConfig, device_type: str) -> None:
    """A clear error, naming the field, when ``config.deepspeed`` asks for what the online loops
    cannot use (ZeRO-3) or what is not here (CUDA, the deepspeed package)."""
    if config.deepspeed == "none":
        return
    if ZERO_PRESETS[config.deepspeed].stage == 3:
        raise ConfigError(
            f"deepspeed: {config.deepspeed!r} is not supported by the PPO/RLOO/GRPO loops yet (ZeRO-3 "
            "partitions the parameters: every rank would have to generate in lockstep, and the "
            "log-probability path reads the output layer's weight directly); use 'zero2' or "
            "'zero2_offload' (zero_config still writes ZeRO-3 configurations)"
        )
    reason = zero_unavailable_reason(device_type)
    if reason is not None:
        raise ConfigError(f"deepspeed: {config.deepspeed!r} cannot be used: {reason}")
