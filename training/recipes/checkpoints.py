"""Checkpoints that a crashed or cancelled run resumes from exactly.

``<output_dir>/checkpoints/step-00000100/`` holds the model (safetensors, loadable with
``from_pretrained``), the tokenizer, ``training_state.pt`` (optimiser, scheduler, RNG states and recipe
state such as the KL controller) and ``trainer_state.json`` (step, data position, metrics, readable).
A checkpoint is written under a temporary name and renamed when complete, so a crash mid-write
never leaves a folder that looks resumable. Only the newest ``keep`` survive.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from training.recipes.checkpoint_files import (
    STATE_FILE,
    TENSORS_FILE,
    checkpoint_folder,
    complete_checkpoints,
    partial_folder,
    read_trainer_state,
)
from training.recipes.runtime import rng_state, set_rng_state


@dataclass
class ResumeState:
    step: int
    trainer_state: dict[str, Any]
    path: Path


class CheckpointManager:
    def __init__(self, output_dir: Path, *, every: int, keep: int) -> None:
        self.output_dir = output_dir
        self.every = every
        self.keep = keep

    def due(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0

    def checkpoints(self) -> list[Path]:
        """Complete checkpoints, oldest first."""
        return [folder for _, folder in complete_checkpoints(self.output_dir)]

    def latest(self) -> Path | None:
        found = self.checkpoints()
        return found[-1] if found else None

    def save(
        self,
        *,
        step: int,
        model: Any,
        tokenizer: Any,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        trainer_state: dict[str, Any],
        extra_modules: dict[str, torch.nn.Module] | None = None,
        extra_state: dict[str, Any] | None = None,
    ) -> Path:
        """Write step ``step`` atomically and prune old checkpoints; returns the folder."""
        final = checkpoint_folder(self.output_dir, step)
        partial = partial_folder(self.output_dir, step)
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        save_pretrained(model, partial)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(partial))
        torch.save(
            {
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "rng": rng_state(),
                "modules": {k: m.state_dict() for k, m in (extra_modules or {}).items()},
                "extra": extra_state or {},
            },
            partial / TENSORS_FILE,
        )
        (partial / STATE_FILE).write_text(json.dumps({"step": step, **trainer_state}, indent=2))
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
        for old in self.checkpoints()[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def restore(
        self,
        path: Path,
        *,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        extra_modules: dict[str, torch.nn.Module] | None = None,
    ) -> tuple[ResumeState, dict[str, Any]]:
        """Load optimiser, scheduler, RNG and extra module states from ``path`` (the model weights are
        loaded by the recipe with ``from_pretrained(path)``). Returns (state, extra_state)."""
        saved = torch.load(path / TENSORS_FILE, map_location="cpu", weights_only=False)
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        for name, module in (extra_modules or {}).items():
            module.load_state_dict(saved["modules"][name])
        set_rng_state(saved["rng"])
        state = read_trainer_state(path)
        return ResumeState(state["step"], state, path), saved["extra"]


def save_pretrained(model: Any, folder: Path) -> None:
    """Save weights as safetensors with a config any transformers install can load: the packed
    attention's registered name is an in-process detail, so the saved config says ``sdpa``."""
    config = model.config
    implementation = getattr(config, "_attn_implementation", None)
    try:
        if implementation not in (None, "eager", "sdpa", "flash_attention_2"):
            config._attn_implementation = "sdpa"
        model.save_pretrained(str(folder), safe_serialization=True)
    finally:
        if implementation is not None:
            config._attn_implementation = implementation
