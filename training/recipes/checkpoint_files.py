"""Where checkpoints lie on disk and which are complete, without torch (the web process reads them
when a run resumes).

``<output_dir>/checkpoints/step-00000100/`` is complete once its ``trainer_state.json`` exists: the
folder is written as ``.step-00000100.partial`` and renamed at the end (``CheckpointManager.save``).
The one place that names checkpoint folders and reads a step back from a name: ``checkpoint_folder``,
``step_folder_name``, ``checkpoint_step`` and ``STEP_FOLDERS`` (the glob that finds them, also for
ZeRO's states).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

STATE_FILE = "trainer_state.json"
TENSORS_FILE = "training_state.pt"
STEP_PREFIX = "step-"
STEP_FOLDERS = f"{STEP_PREFIX}*"  # glob of step folders (a partial one starts with a dot)


def checkpoints_root(output_dir: Path) -> Path:
    return output_dir / "checkpoints"


def step_folder_name(step: int) -> str:
    """The name of step ``step``'s folder: ``step-00000100``."""
    return f"{STEP_PREFIX}{step:08d}"


def checkpoint_folder(output_dir: Path, step: int) -> Path:
    return checkpoints_root(output_dir) / step_folder_name(step)


def partial_folder(output_dir: Path, step: int) -> Path:
    return checkpoints_root(output_dir) / f".{step_folder_name(step)}.partial"


def checkpoint_step(folder: Path) -> int | None:
    """The step a checkpoint folder is named for (``step-00000100`` -> 100); None for a name that
    is not a step folder's (a partial one, anything else)."""
    step = folder.name.removeprefix(STEP_PREFIX)
    return int(step) if folder.name.startswith(STEP_PREFIX) and step.isdigit() else None


def complete_checkpoints(output_dir: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every complete checkpoint of a run, oldest first."""
    root = checkpoints_root(output_dir)
    if not root.is_dir():
        return []
    found = []
    for folder in root.glob(STEP_FOLDERS):
        step = checkpoint_step(folder)
        if step is not None and folder.is_dir() and (folder / STATE_FILE).is_file():
            found.append((step, folder))
    return sorted(found)


def read_trainer_state(folder: Path) -> dict[str, Any]:
    """The readable state saved with a checkpoint: step, data position, recipe state."""
    return json.loads((folder / STATE_FILE).read_text())
