"""Recipe helpers shared by the training tests: a callback that asks to stop after a step (cancel,
then resume), the settings of a quick run on the tiny model, and tiny PPO, RLOO and GRPO configs."""

from training.recipes import GRPOConfig, PPOConfig, RLOOConfig, TrainingCallback


class StopAfter(TrainingCallback):
    """Asks the loop to stop once step ``step`` has run (what a cancel does)."""

    def __init__(self, step: int) -> None:
        self.stop_at, self.step = step, 0

    def on_step(self, *, step: int, total_steps: int) -> None:
        self.step = step

    def should_stop(self) -> bool:
        return self.step >= self.stop_at


def ppo_config(policy, reward, prompts, output_dir, **overrides) -> PPOConfig:
    """A 2-step PPO config on CPU (batch 4 in minibatches of 2, 2 PPO epochs, 6 new tokens, a
    16-unit value head, a quarter each of anchor and perturbed rollouts) for the tiny models."""
    values = {
        "model": str(policy),
        "reward_model": str(reward),
        "data": str(prompts),
        "output_dir": str(output_dir),
        "batch_size": 4,
        "minibatch_size": 2,
        "ppo_epochs": 2,
        "max_new_tokens": 6,
        "max_length": 128,
        "learning_rate": 1e-4,
        "checkpoint_every": 0,
        "device": "cpu",
        "max_steps": 2,
        "anchor_fraction": 0.25,
        "perturb_fraction": 0.25,
        "value_hidden": 16,
    }
    values.update(overrides)
    return PPOConfig(**values)


def rloo_config(policy, reward, prompts, output_dir, **overrides) -> RLOOConfig:
    """A 2-step RLOO config on CPU (batch 2, K = 2, 6 new tokens) for the tiny models."""
    values = {
        "model": str(policy),
        "reward_model": str(reward),
        "data": str(prompts),
        "output_dir": str(output_dir),
        "batch_size": 2,
        "rloo_k": 2,
        "max_new_tokens": 6,
        "max_length": 128,
        "learning_rate": 1e-3,
        "checkpoint_every": 0,
        "device": "cpu",
        "max_steps": 2,
    }
    values.update(overrides)
    return RLOOConfig(**values)


def tiny_pair_values(model_dir, data_file, output_dir, **overrides) -> dict:
    """Settings of a quick pair-recipe run (DPO, SimPO, ORPO) on the tiny model, on the CPU."""
    values = {
        "model": str(model_dir),
        "data": str(data_file),
        "output_dir": str(output_dir),
        "batch_size": 4,
        "max_length": 128,
        "learning_rate": 1e-3,
        "checkpoint_every": 0,
        "device": "cpu",
    }
    return {**values, **overrides}


def grpo_config(policy, prompts, output_dir, **overrides) -> GRPOConfig:
    """A 2-step GRPO config on CPU (batch 2, G = 4, 6 new tokens) for the tiny model, scored by a
    verifiable length reward (no reward model) and without a reference (kl_coef 0)."""
    values = {
        "model": str(policy),
        "data": str(prompts),
        "output_dir": str(output_dir),
        "rewards": ('length_penalty {"target": 12}',),
        "batch_size": 2,
        "group_size": 4,
        "max_new_tokens": 6,
        "max_length": 128,
        "learning_rate": 1e-3,
        "kl_coef": 0.0,
        "checkpoint_every": 0,
        "eval_prompts": 0,
        "device": "cpu",
        "max_steps": 2,
    }
    values.update(overrides)
    return GRPOConfig(**values)
