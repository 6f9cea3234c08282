"""Training loops (torch + transformers, no Django): configs, recipes and the callback protocol.

Each recipe is a function ``train_<kind>(config, callback=None) -> TrainResult``.
"""

from training.recipes.callbacks import CallbackList, JsonLinesReporter, TrainingCallback
from training.recipes.config import (
    ConfigError,
    DPOConfig,
    PPOConfig,
    RewardModelConfig,
    RLOOConfig,
    TrainingConfig,
    config_class,
    config_from_dict,
    config_help,
)
from training.recipes.dpo import train_dpo
from training.recipes.ppo import train_ppo
from training.recipes.reward_model import train_reward_model
from training.recipes.rloo import train_rloo
from training.recipes.runtime import TrainResult


def run_training(
    config: TrainingConfig, callbacks: list[TrainingCallback] | None = None
) -> TrainResult:
    """Run the recipe of ``config.kind`` with the given callbacks."""
    recipes = {"dpo": train_dpo, "ppo": train_ppo, "rloo": train_rloo, "rm": train_reward_model}
    if config.kind not in recipes:
        raise ConfigError(f"kind: no recipe for {config.kind!r} (have {sorted(recipes)})")
    callback = CallbackList(callbacks) if callbacks else None
    return recipes[config.kind](config, callback)  # type: ignore[operator]


__all__ = [
    "CallbackList",
    "ConfigError",
    "DPOConfig",
    "JsonLinesReporter",
    "PPOConfig",
    "RLOOConfig",
    "RewardModelConfig",
    "TrainResult",
    "TrainingCallback",
    "TrainingConfig",
    "config_class",
    "config_from_dict",
    "config_help",
    "run_training",
    "train_dpo",
    "train_ppo",
    "train_reward_model",
    "train_rloo",
]
