"""What every training loop needs around the maths: device and precision, seeding, the optimiser and
its schedule, throughput counters, and the result a recipe returns."""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from training.recipes.config import TrainingConfig


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def autocast(device: torch.device, enabled: bool) -> contextlib.AbstractContextManager[None]:
    """bfloat16 autocast on this device, or nothing. Master weights and optimiser state stay float32;
    log-softmax and losses run in float32 either way."""
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def build_optimizer(
    params: Any,
    config: TrainingConfig,
    device: torch.device,
    *,
    extra_groups: list[dict[str, Any]] | None = None,
) -> torch.optim.Optimizer:
    """AdamW over the trainable ``params`` (plus ``extra_groups`` with their own settings); the fused
    kernel where this torch has one for the device (CPU and CUDA in torch >= 2.4)."""
    groups: list[dict[str, Any]] = [{"params": [p for p in params if p.requires_grad]}]
    groups += extra_groups or []
    kwargs: dict[str, Any] = {"lr": config.learning_rate, "weight_decay": config.weight_decay}
    try:
        return torch.optim.AdamW(groups, fused=True, **kwargs)
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(groups, **kwargs)


def build_scheduler(
    optimizer: torch.optim.Optimizer, config: TrainingConfig, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over ``warmup_ratio`` of the steps, then linear decay to 0, cosine, or constant."""
    warmup = math.ceil(config.warmup_ratio * total_steps)
    kind = config.lr_scheduler

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        if kind == "constant":
            return 1.0
        progress = (step - warmup) / max(1, total_steps - warmup)
        if kind == "cosine":
            return 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
        return max(0.0, 1 - progress)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def total_steps_for(config: TrainingConfig, batches_per_epoch: int) -> int:
    steps = config.epochs * batches_per_epoch
    return min(steps, config.max_steps) if config.max_steps else steps


@dataclass
class Throughput:
    """Work done and the wall time spent on it (only what runs inside ``timing()`` counts, so
    checkpoint writing and evaluation stay out of the rates)."""

    items: int = 0
    tokens: int = 0
    seconds: float = 0.0

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - start

    def per_second(self, count: int) -> float:
        return count / self.seconds if self.seconds > 0 else 0.0


@dataclass
class TrainResult:
    """What a recipe returns: where the model is, how it ended, and its numbers."""

    status: str  # "completed" or "cancelled"
    steps: int
    output_dir: str
    final_model_dir: str | None
    summary: dict[str, Any]


def peak_memory_bytes(device: torch.device) -> int | None:
    """Peak accelerator memory; on CPU the process's peak resident set size (ru_maxrss)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    except ImportError:  # pragma: no cover - not POSIX
        return None


def memory_fraction(device: torch.device) -> float | None:
    """Share of the accelerator's memory in use at the peak so far (PIPELINE.md alerts above 0.95);
    None on CPU."""
    if device.type != "cuda":
        return None
    total = torch.cuda.get_device_properties(device).total_memory
    return float(torch.cuda.max_memory_reserved(device)) / total
