"""Named starting points for a run's settings, per kind: what the admin's launch form offers first.

A preset is a few overrides of the recipe's dataclass defaults; every field it does not name keeps
its default. tests/training/test_launch_config.py builds every preset of every kind, so a preset that
the dataclass would refuse fails there, not in a user's form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from training.recipes.config import ConfigError


@dataclass(frozen=True)
class Preset:
    """``common``: overrides for every kind; each kind's own overrides for this preset, and the
    base model it chooses first (absent: the installation's default policy model), are in that
    kind's spec (training.recipes.kinds: ``presets[name]``, ``preset_base_models[name]``)."""

    name: str
    label: str
    description: str
    common: dict[str, Any] = field(default_factory=dict)

    def for_kind(self, kind: str) -> dict[str, Any]:
        from training.recipes.kinds import kind_spec  # the registry imports config, as this does

        return {**self.common, **kind_spec(kind).presets.get(self.name, {})}

    def base_model(self, kind: str) -> str | None:
        """The registry model this preset chooses first for ``kind`` (None: the default)."""
        from training.recipes.kinds import kind_spec

        return kind_spec(kind).preset_base_models.get(self.name)


PRESETS: tuple[Preset, ...] = (
    Preset(
        name="cpu",
        label="Quick look on CPU",
        description=(
            "A few dozen steps on short sequences, on the CPU: checks the data, the model and the "
            "charts in minutes, not a useful model."
        ),
        common={
            "device": "cpu",
            "max_steps": 20,
            "max_length": 256,
            "log_every": 1,
            "checkpoint_every": 10,
            "keep_checkpoints": 2,
        },
    ),
    Preset(
        name="standard",
        label="Standard",
        description=(
            "The recipe's defaults (PIPELINE.md): full epochs, cuda when there is one, else the CPU."
        ),
    ),
    Preset(
        name="gpu",
        label="GPU, bf16 + flash-attn",
        description=(
            "One CUDA GPU: bfloat16 autocast, padding-free packed batches (flash-attn's varlen "
            "kernel when the flash-attn package is installed, else SDPA), gradient checkpointing "
            "and gradient accumulation for larger batches."
        ),
        common={
            "device": "cuda",
            "bf16": True,
            "packing": True,
            "gradient_checkpointing": True,
            "max_length": 1024,
        },
    ),
)
DEFAULT_PRESET = "standard"


def preset_get(name: str) -> Preset:
    """The preset called ``name``; ConfigError (field ``preset``) listing the names otherwise."""
    for preset in PRESETS:
        if preset.name == name:
            return preset
    names = ", ".join(p.name for p in PRESETS)
    raise ConfigError(f"preset: one of {names}, got {name!r}", field="preset")


def preset_values(name: str, kind: str) -> dict[str, Any]:
    """The overrides preset ``name`` sets for ``kind`` (a name of training.recipes.kinds.KINDS;
    ConfigError, field ``kind``, otherwise)."""
    return preset_get(name).for_kind(kind)
