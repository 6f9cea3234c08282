"""Named starting points for a run's settings, per kind: what the admin's launch form offers first.

A preset is a few overrides of the recipe's dataclass defaults; every field it does not name keeps
its default. tests/training/test_launch_config.py builds every preset of every kind, so a preset that
the dataclass would refuse fails there, not in a user's form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from training.recipes.config import KINDS, ConfigError


@dataclass(frozen=True)
class Preset:
    """``values[kind]``: that kind's overrides; ``common``: overrides for every kind;
    ``base_models[kind]``: the registry name of the base model the form chooses first for that
    kind (absent: the installation's default policy model)."""

    name: str
    label: str
    description: str
    common: dict[str, Any] = field(default_factory=dict)
    values: dict[str, dict[str, Any]] = field(default_factory=dict)
    base_models: dict[str, str] = field(default_factory=dict)

    def for_kind(self, kind: str) -> dict[str, Any]:
        return {**self.common, **self.values.get(kind, {})}


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
        values={
            "rm": {"batch_size": 4, "learning_rate": 1e-5},
            "dpo": {"batch_size": 4},
            "simpo": {"batch_size": 4},
            "orpo": {"batch_size": 4},
            "kto": {"batch_size": 4},
            "ppo": {
                "batch_size": 2,
                "minibatch_size": 2,
                "ppo_epochs": 1,
                "max_new_tokens": 32,
                "eval_prompts": 4,
                "eval_every": 10,
                "value_hidden": 256,
            },
            "rloo": {
                "batch_size": 2,
                "rloo_k": 2,
                "max_new_tokens": 32,
                "eval_prompts": 4,
                "eval_every": 10,
            },
            "grpo": {
                "batch_size": 2,
                "group_size": 4,
                "max_new_tokens": 32,
                "eval_prompts": 4,
                "eval_every": 10,
                # A verifiable reward, so the form saves without a reward model: answers near 60
                # characters score best (the bench's cheap reward).
                "rewards": ('length_penalty {"target": 60}',),
            },
        },
        # The encoder the README recommends for reward models: MiniLM (22M parameters, against
        # SmolLM2's 135M) trained the 72 demo pairs' 17 steps in 142 s on a busy 2-core machine,
        # where SmolLM2 had taken 8.7 minutes for 15.
        base_models={"rm": "all-minilm-l6-v2"},
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
        values={
            "rm": {"batch_size": 32, "micro_batch_size": 8},
            "dpo": {"batch_size": 32, "micro_batch_size": 8},
            "simpo": {"batch_size": 32, "micro_batch_size": 8},
            "orpo": {"batch_size": 32, "micro_batch_size": 8},
            "kto": {"batch_size": 32, "micro_batch_size": 8},
            "ppo": {"batch_size": 16, "minibatch_size": 8, "micro_batch_size": 8},
            "rloo": {"batch_size": 8, "micro_batch_size": 4},
            "grpo": {"batch_size": 8, "micro_batch_size": 4},
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
    """The overrides preset ``name`` sets for ``kind`` (a recipe name of config.KINDS)."""
    if kind not in KINDS:
        raise ConfigError(f"kind: one of {KINDS}, got {kind!r}", field="kind")
    return preset_get(name).for_kind(kind)
