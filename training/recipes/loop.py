"""The parts of a training loop every recipe shares: run folder set-up, the step loop (logging,
memory, checkpoint or stop, cancel), the optimiser step, and the end of a run (final model, summary).

A recipe is a setup function, a step function and a summary; ``run_steps`` drives the step function
over the sampler's positions the same way for every recipe:

    for each step: train_step -> on_step -> on_samples (when the step returned samples) -> evaluate
                   -> log every ``log_every`` steps, at the last step and after an evaluation
                   -> checkpoint when due or when a stop was asked -> stop (status "cancelled")
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch

from training.recipes.callbacks import CallbackList, MetricsFile, TrainingCallback
from training.recipes.checkpoints import CheckpointManager, save_pretrained
from training.recipes.config import TrainingConfig
from training.recipes.data import EpochSampler
from training.recipes.distributed import (
    Ranks,
    all_reduce_gradients,
    all_reduce_sum,
    any_rank,
    barrier,
    setup_distributed,
)
from training.recipes.lora import is_lora_model, lora_merge, trainable_parameters
from training.recipes.runtime import (
    Throughput,
    TrainResult,
    freed_memory,
    memory_fraction,
    resolve_device,
    seed_everything,
)

S = TypeVar("S", bound="PairRecipeState")


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

    def restore_training_state(
        self,
        resume_from: Path | None,
        *,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        extra_modules: dict[str, torch.nn.Module] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """Every recipe's resume: when ``resume_from`` (a checkpoint folder) is given, load the
        optimiser, schedule, RNG and ``extra_modules`` states saved with it (the weights were loaded
        with the model) and return (its step, the extra state it saved); (0, {}) for a fresh run,
        which changes nothing."""
        if resume_from is None:
            return 0, {}
        restored, extra = self.checkpoints.restore(
            resume_from, optimizer=optimizer, scheduler=scheduler, extra_modules=extra_modules
        )
        return restored.step, extra

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


@dataclass(frozen=True)
class Position:
    """Where a step is: ``step`` 1-based over the run, ``batch_index`` 0-based in ``epoch``."""

    step: int
    epoch: int
    batch_index: int

    def trainer_state(self, kind: str) -> dict[str, Any]:
        """What a checkpoint records to resume after this step (see ``CheckpointManager``)."""
        return {"epoch": self.epoch, "batch_in_epoch": self.batch_index + 1, "kind": kind}


@dataclass
class StepOutcome:
    """What one step hands the loop: its metrics (averaged over the steps of a log line) and,
    when it has some to show, generated samples for ``on_samples``."""

    metrics: dict[str, float]
    samples: Sequence[Mapping[str, Any]] | None = None


@dataclass
class LoopEnd:
    """How the loop ended: status "completed" or "cancelled", the last step run, the work timed
    by the steps, and the last metrics logged (None when nothing was)."""

    status: str
    step: int
    throughput: Throughput = field(default_factory=Throughput)
    last_logged: dict[str, float] | None = None


def run_steps(
    run: Run,
    sampler: EpochSampler,
    *,
    start_step: int,
    total_steps: int,
    rate_name: str,
    train_step: Callable[[Position, Throughput], StepOutcome],
    save_checkpoint: Callable[[Position], None],
    evaluate: Callable[[int], dict[str, float]] | None = None,
) -> LoopEnd:
    """Run steps ``start_step + 1 .. total_steps`` (see the module docstring for the order).

    ``train_step`` times its own work in the ``Throughput`` it is given and counts the items and
    tokens it trained, so the rates logged as ``<rate_name>_per_second`` and ``tokens_per_second``
    leave out logging, samples, evaluation and checkpoints. ``evaluate(step)`` returns held-out
    metrics to log at once ({} when none are due)."""
    run.callback.on_start(total_steps=total_steps, config=run.config.to_dict())
    end = LoopEnd(status="completed", step=start_step)
    pending: list[dict[str, float]] = []
    for step_index, epoch, batch_index in sampler.positions(start_step, total_steps):
        at = Position(step=step_index + 1, epoch=epoch, batch_index=batch_index)
        end.step = at.step
        outcome = train_step(at, end.throughput)
        pending.append(outcome.metrics)
        run.callback.on_step(step=at.step, total_steps=total_steps)
        if outcome.samples is not None:
            run.callback.on_samples(step=at.step, samples=outcome.samples)
        evaluated = evaluate(at.step) if evaluate is not None else {}
        if at.step % run.config.log_every == 0 or at.step == total_steps or evaluated:
            logged = mean_metrics(pending)
            logged.update(
                evaluated,
                epoch=epoch + (batch_index + 1) / sampler.batches_per_epoch,
                **{f"{rate_name}_per_second": end.throughput.per_second(end.throughput.items)},
                tokens_per_second=end.throughput.per_second(end.throughput.tokens),
            )
            fraction = memory_fraction(run.device)
            if fraction is not None:
                logged["memory_fraction"] = fraction
            run.callback.on_log(step=at.step, metrics=logged)
            pending, end.last_logged = [], logged
        stop = run.stop_requested()
        if run.checkpoints.due(at.step) or (stop and at.step < total_steps):
            save_checkpoint(at)
        if stop and at.step < total_steps:
            end.status = "cancelled"
            break
    return end


@dataclass
class PairRecipeState:
    """What a recipe trained on preference pairs (DPO, the reward model) holds between steps,
    beside its own fields: the model and its optimiser, the sampler and where the run starts."""

    run: Run
    config: TrainingConfig
    tokenizer: Any
    model: Any
    sampler: EpochSampler
    total_steps: int
    start_step: int
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler

    @property
    def micro_batch_size(self) -> int:
        return self.config.micro_batch_size or self.config.batch_size

    @property
    def extra_modules(self) -> dict[str, torch.nn.Module] | None:
        """The modules trained beside the model (saved in checkpoints); None: the model alone."""
        return None


def run_pair_steps(
    state: S,
    kind: str,
    train_step: Callable[[S, Position, Throughput], StepOutcome],
    rate_name: str = "pairs",
) -> LoopEnd:
    """``run_steps`` for a recipe trained on preference pairs: rates in pairs (KTO: "examples",
    its labelled completions), checkpoints of the model, the modules trained beside it, the
    optimiser and the schedule."""
    run = state.run
    return run_steps(
        run,
        state.sampler,
        start_step=state.start_step,
        total_steps=state.total_steps,
        rate_name=rate_name,
        train_step=lambda at, throughput: train_step(state, at, throughput),
        save_checkpoint=lambda at: run.save_checkpoint(
            step=at.step,
            model=state.model,
            tokenizer=state.tokenizer,
            optimizer=state.optimizer,
            scheduler=state.scheduler,
            trainer_state=at.trainer_state(kind),
            extra_modules=state.extra_modules,
        ),
    )


def train_pair_recipe(
    config: TrainingConfig,
    callback: TrainingCallback | None,
    *,
    kind: str,
    setup: Callable[[Run, Any], S],
    step: Callable[[S, Position, Throughput], StepOutcome],
    summary: Callable[[S, LoopEnd], dict[str, Any]],
    rate_name: str = "pairs",
) -> TrainResult:
    """A pair recipe with nothing to do after its last step (DPO, SimPO, ORPO, KTO): start the
    run, ``setup`` its state, run ``step`` over the pairs (or KTO's examples, ``rate_name``), then
    save the final model with ``summary``."""
    run = start_run(config, callback)
    state = setup(run, config)
    end = run_pair_steps(state, kind, step, rate_name)
    return finish_run(
        run,
        status=end.status,
        step=end.step,
        model=state.model,
        tokenizer=state.tokenizer,
        summary=summary(state, end),
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


def reduce_and_step(
    state: PairRecipeState,
    sums: dict[str, float],
    *,
    tokens: float,
    items: int,
    throughput: Throughput,
    params: Iterable[torch.nn.Parameter] | None = None,
) -> StepOutcome:
    """The end of a reward-model step: sum the step's metric ``sums`` and ``tokens`` over the ranks,
    take the optimiser step on ``params`` (default: the model's), count ``items`` and the tokens in
    ``throughput``, and return the metrics per item with the gradient norm and learning rate."""
    run = state.run
    sums = all_reduce_sum({**sums, "tokens": tokens}, run.ranks, run.device)
    throughput.tokens += int(sums.pop("tokens"))
    grad_norm = optimizer_step(
        state.model.parameters() if params is None else params,
        state.optimizer,
        state.scheduler,
        state.config.max_grad_norm,
        run.ranks,
    )
    throughput.items += items
    metrics = {name: value / items for name, value in sums.items()}
    metrics.update(grad_norm=grad_norm, learning_rate=state.scheduler.get_last_lr()[0])
    return StepOutcome(metrics)


def mean_metrics(rows: list[Mapping[str, float]]) -> dict[str, float]:
    """Each key's mean over ``rows`` (the keys of the first row; {} for no rows)."""
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
    """Save the final model (completed runs only, rank 0) and the summary; tell the callbacks.

    With LoRA, ``final/`` holds the adapters (peft's format, on the base ``config.model``) and,
    when ``merge_lora``, ``final/merged/`` the full weights with the adapters merged in.
    ``model`` None: the recipe wrote ``final/`` itself (an independent reward ensemble)."""
    final_dir = merged_dir = None
    lora = model is not None and is_lora_model(model)
    if lora:
        summary = {**summary, "lora_trainable_parameters": trainable_parameters(model)[0]}
    if status == "completed" and not run.ranks.main:
        final_dir = str(run.output_dir / "final")
    elif status == "completed":
        final = run.output_dir / "final"
        if model is not None:
            save_model_folder(final, model, tokenizer, extra_files)
        final_dir = str(final)
        if lora and run.config.merge_lora:  # last use of the model: merged in place
            save_model_folder(final / "merged", lora_merge(model), tokenizer, extra_files)
            merged_dir = str(final / "merged")
    summary = {
        "steps": step,
        "final_model_dir": final_dir,
        "world_size": run.ranks.world,
        **({"merged_model_dir": merged_dir} if lora else {}),
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


def save_model_folder(
    folder: Path, model: Any, tokenizer: Any, extra_files: Mapping[str, Any] | None = None
) -> None:
    """``model`` (full weights, or a LoRA model's adapters), its tokenizer and ``extra_files``
    (name -> JSON payload) in ``folder``, created if needed."""
    folder.mkdir(parents=True, exist_ok=True)
    save_pretrained(model, folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(str(folder))
    for name, payload in (extra_files or {}).items():
        (folder / name).write_text(json.dumps(payload, indent=2))
