"""What every training loop needs around the maths: device and precision, seeding, the optimiser and
its schedule, throughput counters, and the result a recipe returns."""

from __future__ import annotations

import contextlib
import ctypes
import math
import platform
import random
import threading
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


# glibc's mallopt parameters (malloc.h) and the defaults they return to after a run.
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_DEFAULT_TRIM_THRESHOLD, _DEFAULT_MMAP_MAX = 128 * 1024, 65536
_KEPT_HEAP_BYTES = 2**31 - 1  # the largest trim threshold mallopt takes (a C int)


class FreedMemoryPolicy:
    """Keep freed CPU memory in the process's heap while a CPU run trains (glibc only).

    Under glibc's defaults a block over 32 MiB (MiniLM's word-embedding gradient is 30,522 x 384
    float32 = 47 MB, made fresh by every backward) is a new mmap each time and is page-faulted in
    again on every step: 20 ms for those 47 MB on the 2-core machine of bench/README.md, against
    1.5 ms when the memory is reused. While any run is active, ``mallopt`` sends every block through
    the heap and keeps up to 2 GiB of freed memory there; when the last run ends, glibc's default
    limits come back and ``malloc_trim`` returns the kept memory to the system. Nested runs (the
    annotator-aware reward model trains a plain baseline inside its own run) count in and out.
    Elsewhere (musl, macOS, CUDA runs) nothing changes.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._libc: Any = None
        if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
            try:
                self._libc = ctypes.CDLL("libc.so.6")
            except OSError:  # pragma: no cover - glibc without the usual soname
                self._libc = None

    @property
    def active(self) -> int:
        return self._active

    def enter(self, device: torch.device) -> bool:
        """Start keeping freed memory for a run on ``device``; True when this run counts (pass it
        to ``leave``)."""
        if self._libc is None or device.type != "cpu":
            return False
        with self._lock:
            if self._active == 0:
                self._libc.mallopt(_M_MMAP_MAX, 0)
                self._libc.mallopt(_M_TRIM_THRESHOLD, _KEPT_HEAP_BYTES)
            self._active += 1
        return True

    def leave(self) -> None:
        """One counted run has ended; the last one restores glibc's limits and trims the heap."""
        with self._lock:
            if self._active == 0:
                return
            self._active -= 1
            if self._active == 0:
                self._restore()

    def reset(self) -> None:
        """Forget every counted run (one that raised never reached ``leave``) and restore."""
        with self._lock:
            if self._active:
                self._active = 0
                self._restore()

    def _restore(self) -> None:
        self._libc.mallopt(_M_MMAP_MAX, _DEFAULT_MMAP_MAX)
        self._libc.mallopt(_M_TRIM_THRESHOLD, _DEFAULT_TRIM_THRESHOLD)
        self._libc.malloc_trim(0)


freed_memory = FreedMemoryPolicy()


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
