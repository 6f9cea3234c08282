"""The parts of a training loop every recipe shares: run folder set-up, the optimiser step, and the
end of a run (final model, summary)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from training.recipes.callbacks import CallbackList, MetricsFile, TrainingCallback
from training.recipes.checkpoints import CheckpointManager, save_pretrained
from training.recipes.config import TrainingConfig
from training.recipes.distributed import (
    Ranks,
    all_reduce_gradients,
    any_rank,
    barrier,
    setup_distributed,
)
from training.recipes.runtime import TrainResult, freed_memory, resolve_device, seed_everything


@dataclass
class Run:
    """One run's fixed surroundings."""

    config: TrainingConfig
    device: torch.device
    output_dir: Path
    callback: CallbackList
    checkpoints: CheckpointManager
    ranks: Ranks
    keeps_freed_memory: bool = False  # counted in ``runtime.freed_memory`` until ``finish_run``

    @property
    def resume_from(self) -> Path | None:
        return self.checkpoints.latest() if self.config.resume else None

    def stop_requested(self) -> bool:
        """The callbacks' cancel, agreed by every rank."""
        return any_rank(self.callback.should_stop(), self.ranks, self.device)

    def save_checkpoint(self, *, step: int, **state: Any) -> None:
        """Rank 0 writes the checkpoint (see ``CheckpointManager.save``); every rank waits for it."""
        if self.ranks.main:
            path = self.checkpoints.save(step=step, **state)
            self.callback.on_checkpoint(step=step, path=path)
        barrier(self.ranks)


def start_run(config: TrainingConfig, callback: TrainingCallback | None) -> Run:
    """Create the run folder, write the resolved config, seed everything; join the process group
    when launched by torchrun (only rank 0 writes the folder). On CPU, freed memory stays in the
    heap until ``finish_run`` (``runtime.FreedMemoryPolicy``)."""
    ranks, device = setup_distributed(resolve_device(config.device))
    output_dir = Path(config.output_dir)
    callbacks: list[TrainingCallback] = []
    if ranks.main:
        output_dir.mkdir(parents=True, exist_ok=True)
        config.save(output_dir / "config.json")
        callbacks.append(MetricsFile(output_dir / "metrics.jsonl"))
    barrier(ranks)
    seed_everything(config.seed)
    if callback is not None:
        callbacks.append(callback)
    return Run(
        config=config,
        device=device,
        output_dir=output_dir,
        callback=CallbackList(callbacks),
        checkpoints=CheckpointManager(
            output_dir, every=config.checkpoint_every, keep=config.keep_checkpoints
        ),
        ranks=ranks,
        keeps_freed_memory=freed_memory.enter(device),
    )


def optimizer_step(
    params: Iterable[torch.nn.Parameter],
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    max_grad_norm: float | None,
    ranks: Ranks | None = None,
) -> float:
    """Sum gradients across ranks, clip, step, schedule, zero; returns the gradient norm before
    clipping."""
    params = list(params)
    if ranks is not None:
        all_reduce_gradients(params, ranks)
    params = [p for p in params if p.grad is not None]
    if max_grad_norm is not None:
        norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    else:
        norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params]))
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return float(norm)


def mean_metrics(rows: list[Mapping[str, float]]) -> dict[str, float]:
    keys = rows[0].keys() if rows else ()
    return {k: sum(r[k] for r in rows) / len(rows) for k in keys}


def finish_run(
    run: Run,
    *,
    status: str,
    step: int,
    model: Any,
    tokenizer: Any,
    summary: dict[str, Any],
    extra_files: Mapping[str, Any] | None = None,
) -> TrainResult:
    """Save the final model (completed runs only, rank 0) and the summary; tell the callbacks."""
    final_dir = None
    if status == "completed" and not run.ranks.main:
        final_dir = str(run.output_dir / "final")
    elif status == "completed":
        final = run.output_dir / "final"
        final.mkdir(exist_ok=True)
        save_pretrained(model, final)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(final))
        for name, payload in (extra_files or {}).items():
            (final / name).write_text(json.dumps(payload, indent=2))
        final_dir = str(final)
    summary = {
        "steps": step,
        "final_model_dir": final_dir,
        "world_size": run.ranks.world,
        **summary,
    }
    if run.ranks.main:
        (run.output_dir / "summary.json").write_text(
            json.dumps({"status": status, **summary}, indent=2)
        )
    barrier(run.ranks)
    if run.keeps_freed_memory:
        run.keeps_freed_memory = False
        freed_memory.leave()
    run.callback.on_end(status=status, summary=summary)
    return TrainResult(
        status=status,
        steps=step,
        output_dir=str(run.output_dir),
        final_model_dir=final_dir,
        summary=summary,
    )
