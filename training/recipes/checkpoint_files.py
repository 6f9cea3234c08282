"""Where checkpoints lie on disk and which are complete, without torch (the web process reads them
when a run resumes).

``<output_dir>/checkpoints/step-00000100/`` is complete once its ``trainer_state.json`` exists: the
folder is written as ``.step-00000100.partial`` and renamed at the end (``CheckpointManager.save``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

STATE_FILE = "trainer_state.json"
TENSORS_FILE = "training_state.pt"


def checkpoints_root(output_dir: Path) -> Path:
    return output_dir / "checkpoints"


def checkpoint_folder(output_dir: Path, step: int) -> Path:
    return checkpoints_root(output_dir) / f"step-{step:08d}"


def partial_folder(output_dir: Path, step: int) -> Path:
    return checkpoints_root(output_dir) / f".step-{step:08d}.partial"


def complete_checkpoints(output_dir: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every complete checkpoint of a run, oldest first."""
    root = checkpoints_root(output_dir)
    if not root.is_dir():
        return []
    found = []
    for folder in root.glob("step-*"):
        step = folder.name.removeprefix("step-")
        if step.isdigit() and folder.is_dir() and (folder / STATE_FILE).is_file():
            found.append((int(step), folder))
    return sorted(found)


def read_trainer_state(folder: Path) -> dict[str, Any]:
    """The readable state saved with a checkpoint: step, data position, recipe state."""
    return json.loads((folder / STATE_FILE).read_text())
