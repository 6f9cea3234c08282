"""The online loops' DeepSpeed path, on CPU with a stand-in for the deepspeed package.

DeepSpeed needs CUDA, so here ``deepspeed.initialize`` returns an engine that does what ZeRO-2 does
on one process (backward, clip to gradient_clipping, AdamW step, zero the gradients; states saved
per tag). This checks the recipes' side of the contract: which calls they make and when, that the
schedule and checkpoints still work, and that one process reaches the weights of the plain path.
"""

import json
import types

import pytest
import torch

from training.recipes import PPOConfig, RLOOConfig
from training.recipes.ppo import train_ppo
from training.recipes.rloo import train_rloo


class FakeEngine:
    calls: list[str] = []

    def __init__(self, model, model_parameters, config):
        self.module = model
        self.config = config
        params = config["optimizer"]["params"]
        self.basic_optimizer = torch.optim.AdamW(
            model_parameters, lr=params["lr"], weight_decay=params["weight_decay"], fused=True
        )
        self.norm = None

    def backward(self, loss):
        FakeEngine.calls.append("backward")
        loss.backward()

    def step(self):
        FakeEngine.calls.append("step")
        params = [p for group in self.basic_optimizer.param_groups for p in group["params"]]
        params = [p for p in params if p.grad is not None]
        self.norm = torch.nn.utils.clip_grad_norm_(params, self.config["gradient_clipping"])
        self.basic_optimizer.step()
        self.basic_optimizer.zero_grad(set_to_none=True)

    def get_global_grad_norm(self):
        return self.norm

    def save_checkpoint(self, save_dir, tag):
        FakeEngine.calls.append(f"save {tag}")
        folder = f"{save_dir}/{tag}"
        import os

        os.makedirs(folder, exist_ok=True)
        torch.save(self.basic_optimizer.state_dict(), f"{folder}/optim_states.pt")

    def load_checkpoint(self, load_dir, tag, load_optimizer_states, load_lr_scheduler_states):
        FakeEngine.calls.append(f"load {tag}")
        assert load_optimizer_states and not load_lr_scheduler_states
        self.basic_optimizer.load_state_dict(torch.load(f"{load_dir}/{tag}/optim_states.pt"))


@pytest.fixture
def fake_deepspeed(monkeypatch):
    from training.recipes import updates, zero

    def initialize(model, model_parameters, config):
        return FakeEngine(model, model_parameters, config), None, None, None

    stand_in = types.SimpleNamespace(initialize=initialize)
    monkeypatch.setattr(updates, "_import_deepspeed", lambda: stand_in)
    monkeypatch.setattr(zero, "zero_unavailable_reason", lambda device_type: None)
    FakeEngine.calls = []
    return FakeEngine


def _weights(result):
    from safetensors.torch import load_file

    return load_file(f"{result.final_model_dir}/model.safetensors")


def _common(policy, reward, prompts):
    return {
        "model": str(policy), "reward_model": str(reward), "data": str(prompts),
        "max_new_tokens": 6, "max_length": 128, "learning_rate": 1e-3, "device": "cpu",
        "max_steps": 2, "eval_prompts": 0, "max_grad_norm": 0.5,
    }  # fmt: skip


def test_rloo_under_the_engine_trains_checkpoints_and_resumes_like_plain(
    fake_deepspeed, tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path
):
    """One backward and one engine step per RLOO step; the engine's states are saved beside each
    checkpoint (only the kept ones stay) and loaded on resume; the run folder has the DeepSpeed
    config it used. Cancelled after step 1 and resumed, it ends where the plain path does."""
    from tests.helpers.recipes import StopAfter

    common = _common(tiny_llama_dir, tiny_reward_dir, prompts_file)
    rloo = {"batch_size": 2, "rloo_k": 2, "checkpoint_every": 1, "keep_checkpoints": 1}
    plain = train_rloo(RLOOConfig(output_dir=str(tmp_path / "plain"), **common, **rloo))
    config = RLOOConfig(output_dir=str(tmp_path / "zero"), deepspeed="zero2", **common, **rloo)
    assert train_rloo(config, StopAfter(1)).status == "cancelled"
    assert fake_deepspeed.calls == ["backward", "step", "save step-00000001"]
    resumed = train_rloo(config)
    assert fake_deepspeed.calls[3:] == [
        "load step-00000001", "backward", "step", "save step-00000002",
    ]  # fmt: skip
    states = sorted(p.name for p in (tmp_path / "zero" / "zero-states").iterdir())
    assert states == ["step-00000002"]
    written = json.loads((tmp_path / "zero" / "deepspeed.json").read_text())
    assert written["zero_optimization"]["stage"] == 2 and written["gradient_clipping"] == 0.5
    a, b = _weights(plain), _weights(resumed)
    assert all(torch.equal(a[name], b[name]) for name in a)


def test_ppo_under_the_engine_steps_once_per_minibatch_like_plain(
    fake_deepspeed, tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path
):
    """PPO's policy and value head train in one engine: a backward and a step per minibatch
    (2 prompts x 2 samples = 4 rollouts in minibatches of 2, 2 epochs: 4 per rollout batch), and
    the same weights as the plain path."""
    common = _common(tiny_llama_dir, tiny_reward_dir, prompts_file)
    ppo = {
        "batch_size": 2, "minibatch_size": 2, "ppo_epochs": 2, "value_hidden": 16,
        "value_dropout": 0.0, "anchor_fraction": 0.0, "perturb_fraction": 0.0,
        "double_sample_variance": None, "target_kl_stop": None, "checkpoint_every": 0,
    }  # fmt: skip
    plain = train_ppo(PPOConfig(output_dir=str(tmp_path / "plain"), **common, **ppo))
    zero = train_ppo(
        PPOConfig(output_dir=str(tmp_path / "zero"), deepspeed="zero2_offload", **common, **ppo)
    )
    assert fake_deepspeed.calls == ["backward", "step"] * 8
    a, b = _weights(plain), _weights(zero)
    assert all(torch.equal(a[name], b[name]) for name in a)
