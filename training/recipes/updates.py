"""How the online recipes (PPO, RLOO) turn a loss into a parameter update.

``PlainUpdates``: gradients summed across ranks, clipped, one AdamW step (the optimiser lives in this
process; its state goes into the run's checkpoints). ``ZeroUpdates``: a DeepSpeed ZeRO-2 engine
(``deepspeed`` = 'zero2' or 'zero2_offload' on CUDA) shards the optimiser states and gradients
across the GPUs, optionally keeping the states in CPU memory; it reduces and clips the gradients,
and its sharded states are saved next to the run's checkpoints (``zero-states/step-N``, one file per
rank) and loaded on resume.

A recipe calls ``backward(loss)`` once per rank between two ``step()`` calls, with the same graph
on every rank (ZeRO reduces gradients in buckets as backward produces them, so a rank with no rows
of a minibatch still runs one real row with weight 0). The learning-rate schedule is the recipe's
own LambdaLR on ``optimizer``, stepped where the recipe steps it.

ZeRO-3 (parameters partitioned too) is refused: it needs every rank to generate in lockstep
(``synced_gpus``) and the fast log-probability path reads the output layer's weight directly.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch

from training.recipes.checkpoint_files import STEP_FOLDERS, checkpoint_step, step_folder_name
from training.recipes.config import OnlineRLConfig
from training.recipes.distributed import Ranks, all_reduce_gradients
from training.recipes.runtime import build_optimizer
from training.recipes.zero import require_zero_available, zero_config

ZERO_STATES = "zero-states"


class PlainUpdates:
    """Sum gradients over ranks, clip to ``max_grad_norm``, AdamW step, zero the gradients."""

    def __init__(
        self, params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer, *, config, ranks
    ) -> None:
        self.params = params
        self.optimizer = optimizer
        self.checkpoint_optimizer: Any = optimizer  # what the run's checkpoint saves and restores
        self.max_grad_norm = config.max_grad_norm
        self.ranks = ranks

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> float:
        """Returns the gradient norm before clipping."""
        all_reduce_gradients(self.params, self.ranks)
        with_grad = [p for p in self.params if p.grad is not None]
        if self.max_grad_norm is not None:
            norm = torch.nn.utils.clip_grad_norm_(with_grad, self.max_grad_norm)
        else:
            norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in with_grad]))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def save_states(self, output_dir: Path, step: int) -> None:
        """Nothing beyond the run's checkpoint."""

    def load_states(self, output_dir: Path, step: int) -> None:
        """Nothing beyond the run's checkpoint."""

    def prune_states(self, output_dir: Path, kept_steps: set[int]) -> None:
        """Nothing beyond the run's checkpoint."""


class _StatesElsewhere:
    """Stands in for the optimiser in the run's checkpoint when DeepSpeed saves the real states."""

    def state_dict(self) -> dict[str, str]:
        return {"saved_in": ZERO_STATES}

    def load_state_dict(self, state: dict[str, str]) -> None:
        return None


class ZeroUpdates:
    """A DeepSpeed ZeRO-2 engine over ``module`` (all trainable parameters of the recipe)."""

    def __init__(self, module: torch.nn.Module, config: OnlineRLConfig, *, ranks: Ranks) -> None:
        deepspeed = _import_deepspeed()
        if not torch.distributed.is_initialized():  # one GPU without a launcher
            for name, value in (
                ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29500"), ("RANK", "0"),
                ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"),
            ):  # fmt: skip
                os.environ.setdefault(name, value)
        values = zero_config(config, world_size=ranks.world)
        if ranks.main:
            Path(config.output_dir, "deepspeed.json").write_text(_json(values))
        self.engine, _, _, _ = deepspeed.initialize(
            model=module,
            model_parameters=[p for p in module.parameters() if p.requires_grad],
            config=values,
        )
        self.optimizer = self.engine.basic_optimizer  # a torch optimizer: the schedule sets its lr
        self.checkpoint_optimizer: Any = _StatesElsewhere()
        self.ranks = ranks

    def backward(self, loss: torch.Tensor) -> None:
        # The recipes' losses are each rank's share of the global mean (they add up over ranks);
        # DeepSpeed averages gradients over ranks, hence the factor.
        self.engine.backward(loss * self.ranks.world)

    def step(self) -> float:
        self.engine.step()  # reduce, clip (gradient_clipping), AdamW, zero the gradients
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else 0.0

    def save_states(self, output_dir: Path, step: int) -> None:
        """Every rank writes its shard of the optimiser states (a collective call)."""
        self.engine.save_checkpoint(str(output_dir / ZERO_STATES), tag=step_folder_name(step))

    def load_states(self, output_dir: Path, step: int) -> None:
        path, tag = output_dir / ZERO_STATES, step_folder_name(step)
        if not (path / tag).is_dir():
            raise RuntimeError(f"resuming step {step}: no DeepSpeed states at {path / tag}")
        self.engine.load_checkpoint(
            str(path), tag=tag, load_optimizer_states=True, load_lr_scheduler_states=False
        )

    def prune_states(self, output_dir: Path, kept_steps: set[int]) -> None:
        """Rank 0 drops the states of checkpoints the run no longer keeps."""
        if not self.ranks.main:
            return
        for folder in (output_dir / ZERO_STATES).glob(STEP_FOLDERS):
            if checkpoint_step(folder) not in kept_steps:
                shutil.rmtree(folder, ignore_errors=True)


def _import_deepspeed() -> Any:
    import deepspeed  # the gpu extra

    return deepspeed


def _json(values: dict[str, Any]) -> str:
    import json

    return json.dumps(values, indent=2) + "\n"


def make_updates(
    config: OnlineRLConfig,
    module: torch.nn.Module,
    *,
    ranks: Ranks,
    device: torch.device,
) -> PlainUpdates | ZeroUpdates:
    """``ZeroUpdates`` when the config asks for DeepSpeed (and it can run here), else plain AdamW
    over ``module``'s trainable parameters."""
    if config.deepspeed == "none":
        params = [p for p in module.parameters() if p.requires_grad]
        return PlainUpdates(
            params, build_optimizer(params, config, device), config=config, ranks=ranks
        )
    require_zero_available(config, device.type)
    return ZeroUpdates(module, config, ranks=ranks)
