"""Training loops (torch + transformers, no Django): configs, recipes and the callback protocol.

Each recipe is a function ``train_<kind>(config, callback=None) -> TrainResult``, named by its kind's
spec in training.recipes.kinds (the registry of kinds); callers outside
(the worker, monitoring) use ``run_training`` and ``reward_scores`` from here.

The configs and callbacks import no torch, so the web process (the admin's run form) can validate
settings through this package; the recipes, which need torch, load on first use (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from training.recipes.callbacks import CallbackList, JsonLinesReporter, TrainingCallback
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
    config_help,
)
from training.recipes.kinds import config_class, config_from_dict

if TYPE_CHECKING:
    from training.recipes.dpo import train_dpo
    from training.recipes.grpo import train_grpo
    from training.recipes.kto import train_kto
    from training.recipes.ppo import train_ppo
    from training.recipes.reference_free import train_orpo, train_simpo
    from training.recipes.reward_model import train_reward_model
    from training.recipes.rloo import train_rloo
    from training.recipes.runtime import TrainResult
    from training.recipes.scoring import reward_scores

# name -> module that defines it (imported on first access: these need torch).
_LAZY = {
    "train_dpo": "training.recipes.dpo",
    "train_kto": "training.recipes.kto",
    "train_grpo": "training.recipes.grpo",
    "train_ppo": "training.recipes.ppo",
    "train_simpo": "training.recipes.reference_free",
    "train_orpo": "training.recipes.reference_free",
    "train_reward_model": "training.recipes.reward_model",
    "train_rloo": "training.recipes.rloo",
    "TrainResult": "training.recipes.runtime",
    "reward_scores": "training.recipes.scoring",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run_training(
    config: TrainingConfig, callbacks: list[TrainingCallback] | None = None
) -> TrainResult:
    """Run the recipe of ``config.kind`` with the given callbacks."""
    from training.recipes.kinds import KINDS  # the registry imports config, imported above

    if config.kind not in KINDS:
        raise ConfigError(f"kind: no recipe for {config.kind!r} (have {sorted(KINDS)})")
    recipe = KINDS[config.kind].recipe_function()
    callback = CallbackList(callbacks) if callbacks else None
    from training.recipes.runtime import freed_memory

    try:
        return recipe(config, callback)
    finally:
        freed_memory.reset()  # a run that raised never reached finish_run, which releases it


__all__ = [
    "CallbackList",
    "ConfigError",
    "DPOConfig",
    "GRPOConfig",
    "JsonLinesReporter",
    "KTOConfig",
    "ORPOConfig",
    "PPOConfig",
    "RLOOConfig",
    "RewardModelConfig",
    "SimPOConfig",
    "TrainResult",
    "TrainingCallback",
    "TrainingConfig",
    "config_class",
    "config_from_dict",
    "config_help",
    "reward_scores",
    "run_training",
    "train_dpo",
    "train_grpo",
    "train_kto",
    "train_orpo",
    "train_ppo",
    "train_reward_model",
    "train_rloo",
    "train_simpo",
]
