"""The kind registry: one KindSpec per training kind, and every list of kinds read from it.

The model's kind choices, the recipe dispatch (``run_training``), the admin's kind picker, form
sections and presets, the services' reward-model and reference checks, the ``train`` command's
``--kind`` choices and guards, the runs list's headline columns and the README's kind table all
read ``KINDS``. Adding a kind is one ``KindSpec`` here (plus its config class and recipe).

Pure and torch-free: a spec names its recipe as a dotted path, imported on first use, so the web
process (which reads labels, choices and sections) never loads torch through this module.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from training.recipes.config import (
    ConfigError,
    DPOConfig,
    GRPOConfig,
    KTOConfig,
    ORPOConfig,
    PPOConfig,
    RewardModelConfig,
    RLOOConfig,
    SimPOConfig,
    TrainingConfig,
)

# A headline column of the runs list: (metric names, the first present is shown; column label).
Headline = tuple[tuple[str, ...], str]
REWARD_MODEL_USES = ("none", "optional", "required")


@dataclass(frozen=True)
class KindSpec:
    """One training kind.

    ``name``: the stored value (at most 8 characters: the model's column); ``label``: what people
    read; ``recipe``: ``"module:function"`` (or the function itself) taking ``(config, callback)``;
    ``reward_model``: whether a run scores with a reward-model run, "none", "optional" or
    "required"; ``reference_pass``: the recipe computes the reference's log-probs once before
    training (cached under ``reference_cache_dir``); ``rollouts``: the recipe samples from the
    policy (the train command warns about answer lengths); ``headlines``: the runs list's columns;
    ``presets``: overrides per preset name (training.recipes.presets); ``preset_base_models``: the
    registry model a preset chooses first for this kind."""

    name: str
    label: str
    config_class: type[TrainingConfig]
    recipe: str | Callable[..., Any]
    reward_model: str = "none"
    reference_pass: bool = False
    rollouts: bool = False
    headlines: tuple[Headline, ...] = ()
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    preset_base_models: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > 8:
            raise ConfigError(f"kind: a name of 1 to 8 characters, got {self.name!r}", field="kind")
        if self.reward_model not in REWARD_MODEL_USES:
            raise ConfigError(
                f"reward_model: one of {', '.join(REWARD_MODEL_USES)}, got {self.reward_model!r}",
                field="reward_model",
            )

    @property
    def takes_reward_model(self) -> bool:
        """A run of this kind may name a reward-model run."""
        return self.reward_model != "none"

    @property
    def needs_reward_model(self) -> bool:
        """A run of this kind cannot start without a reward-model run."""
        return self.reward_model == "required"

    @property
    def has_reference_pass(self) -> bool:
        return self.reference_pass

    def has_field(self, name: str) -> bool:
        """Whether this kind's config has the settable field ``name``."""
        return any(f.name == name and f.init for f in dataclasses.fields(self.config_class))

    def recipe_function(self) -> Callable[..., Any]:
        """The recipe, imported now (it loads torch)."""
        if callable(self.recipe):
            return self.recipe
        module, _, name = self.recipe.partition(":")
        return getattr(importlib.import_module(module), name)


_PAIR_HEADLINES: tuple[Headline, ...] = (
    (("rewards/accuracy",), "reward accuracy"),
    (("rewards/margin",), "margin"),
)
_ONLINE_HEADLINES: tuple[Headline, ...] = ((("reward/score_mean",), "reward"), (("kl",), "KL"))
_CPU_PAIRS = {"batch_size": 4}
_GPU_PAIRS = {"batch_size": 32, "micro_batch_size": 8}

# In the order people see them (the kind picker, selects, the README table).
KINDS: dict[str, KindSpec] = {
    spec.name: spec
    for spec in (
        KindSpec(
            name="rm",
            label="Reward model",
            config_class=RewardModelConfig,
            recipe="training.recipes.reward_model:train_reward_model",
            headlines=(
                (("eval/accuracy", "accuracy"), "eval accuracy"),
                (("eval/loss", "loss"), "loss"),
            ),
            presets={"cpu": {"batch_size": 4, "learning_rate": 1e-5}, "gpu": _GPU_PAIRS},
            # The encoder the README recommends for reward models: MiniLM (22M parameters, against
            # SmolLM2's 135M) trained the 72 demo pairs' 17 steps in 142 s on a busy 2-core
            # machine, where SmolLM2 had taken 8.7 minutes for 15.
            preset_base_models={"cpu": "all-minilm-l6-v2"},
        ),
        KindSpec(
            name="dpo",
            label="DPO",
            config_class=DPOConfig,
            recipe="training.recipes.dpo:train_dpo",
            reference_pass=True,
            headlines=_PAIR_HEADLINES,
            presets={"cpu": _CPU_PAIRS, "gpu": _GPU_PAIRS},
        ),
        KindSpec(
            name="simpo",
            label="SimPO",
            config_class=SimPOConfig,
            recipe="training.recipes.reference_free:train_simpo",
            headlines=_PAIR_HEADLINES,
            presets={"cpu": _CPU_PAIRS, "gpu": _GPU_PAIRS},
        ),
        KindSpec(
            name="orpo",
            label="ORPO",
            config_class=ORPOConfig,
            recipe="training.recipes.reference_free:train_orpo",
            headlines=_PAIR_HEADLINES,
            presets={"cpu": _CPU_PAIRS, "gpu": _GPU_PAIRS},
        ),
        KindSpec(
            name="kto",
            label="KTO",
            config_class=KTOConfig,
            recipe="training.recipes.kto:train_kto",
            reference_pass=True,
            headlines=((("rewards/margin",), "margin"), (("kl_estimate",), "KL estimate")),
            presets={"cpu": _CPU_PAIRS, "gpu": _GPU_PAIRS},
        ),
        KindSpec(
            name="ppo",
            label="PPO",
            config_class=PPOConfig,
            recipe="training.recipes.ppo:train_ppo",
            reward_model="required",
            rollouts=True,
            headlines=_ONLINE_HEADLINES,
            presets={
                "cpu": {
                    "batch_size": 2,
                    "minibatch_size": 2,
                    "ppo_epochs": 1,
                    "max_new_tokens": 32,
                    "eval_prompts": 4,
                    "eval_every": 10,
                    "value_hidden": 256,
                },
                "gpu": {"batch_size": 16, "minibatch_size": 8, "micro_batch_size": 8},
            },
        ),
        KindSpec(
            name="rloo",
            label="RLOO",
            config_class=RLOOConfig,
            recipe="training.recipes.rloo:train_rloo",
            reward_model="required",
            rollouts=True,
            headlines=_ONLINE_HEADLINES,
            presets={
                "cpu": {
                    "batch_size": 2,
                    "rloo_k": 2,
                    "max_new_tokens": 32,
                    "eval_prompts": 4,
                    "eval_every": 10,
                },
                "gpu": {"batch_size": 8, "micro_batch_size": 4},
            },
        ),
        KindSpec(
            name="grpo",
            label="GRPO",
            config_class=GRPOConfig,
            recipe="training.recipes.grpo:train_grpo",
            reward_model="optional",
            rollouts=True,
            headlines=_ONLINE_HEADLINES,
            presets={
                "cpu": {
                    "batch_size": 2,
                    "group_size": 4,
                    "max_new_tokens": 32,
                    "eval_prompts": 4,
                    "eval_every": 10,
                    # A verifiable reward, so the form saves without a reward model: answers near
                    # 60 characters score best (the bench's cheap reward).
                    "rewards": ('length_penalty {"target": 60}',),
                },
                "gpu": {"batch_size": 8, "micro_batch_size": 4},
            },
        ),
    )
}


def kind_names() -> tuple[str, ...]:
    """The kinds' names, in the registry's order (read now: a kind registered later is in it)."""
    return tuple(KINDS)


def kind_spec(name: str) -> KindSpec:
    """The spec of kind ``name``; ConfigError (field ``kind``) listing the kinds otherwise."""
    if name not in KINDS:
        raise ConfigError(f"kind: one of {', '.join(KINDS)}, got {name!r}", field="kind")
    return KINDS[name]


@contextmanager
def registered(spec: KindSpec) -> Iterator[KindSpec]:
    """``spec`` in the registry for the ``with`` block (tests add a toy kind this way)."""
    if spec.name in KINDS:
        raise ConfigError(f"kind: {spec.name!r} is registered already", field="kind")
    KINDS[spec.name] = spec
    try:
        yield spec
    finally:
        del KINDS[spec.name]
