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
from training.recipes.reward_model import train_reward_model
from training.recipes.runtime import TrainResult

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
    "train_dpo",
    "train_reward_model",
]
