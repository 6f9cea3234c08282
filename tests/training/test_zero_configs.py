"""DeepSpeed ZeRO configurations generated from a run's config (no GPU or deepspeed needed)."""

import json

import pytest

from training.recipes import ConfigError, GRPOConfig, PPOConfig, RLOOConfig
from training.recipes.config import ZERO_STAGES
from training.recipes.zero import (
    ZERO_PRESETS,
    require_zero_available,
    write_zero_config,
    zero_config,
)

COMMON = {"model": "m", "reward_model": "r", "data": "d", "output_dir": "o"}


def test_config_names_match_the_presets():
    """config.py repeats the preset names so that validating a config imports nothing heavy."""
    assert ("none", *ZERO_PRESETS) == ZERO_STAGES


@pytest.mark.parametrize(
    ("preset", "stage", "offload_optimizer", "offload_param"),
    [
        ("zero2", 2, False, False),
        ("zero2_offload", 2, True, False),
        ("zero3", 3, False, False),
        ("zero3_offload", 3, True, True),
    ],
)
def test_presets_set_stage_and_cpu_offload(preset, stage, offload_optimizer, offload_param):
    """Offloaded states live in pinned CPU memory; parameters are offloaded only under ZeRO-3,
    which alone partitions them."""
    values = json.loads(
        json.dumps(zero_config(RLOOConfig(**COMMON, deepspeed=preset), world_size=8))
    )
    zero = values["zero_optimization"]
    assert zero["stage"] == stage and zero["overlap_comm"] and zero["contiguous_gradients"]
    assert ("offload_optimizer" in zero) == offload_optimizer
    assert ("offload_param" in zero) == offload_param
    for key in ("offload_optimizer", "offload_param"):
        if key in zero:
            assert zero[key] == {"device": "cpu", "pin_memory": True}
    assert ("stage3_gather_16bit_weights_on_model_save" in zero) == (stage == 3)


def test_rloo_batch_fields_follow_the_recipe():
    """RLOO steps on B x K = 8 x 4 = 32 samples; on 8 GPUs each runs 4 in one pass (no
    accumulation), and DeepSpeed's identity train_batch = micro x accumulation x GPUs holds.
    bf16, clipping, learning rate and weight decay are the run's."""
    config = RLOOConfig(
        **COMMON, deepspeed="zero2", batch_size=8, rloo_k=4, bf16=True, max_grad_norm=0.5,
        learning_rate=3e-6, weight_decay=0.01,
    )  # fmt: skip
    values = zero_config(config, world_size=8)
    assert values["train_micro_batch_size_per_gpu"] == 4
    assert values["gradient_accumulation_steps"] == 1
    assert values["train_batch_size"] == 32
    assert values["bf16"] == {"enabled": True} and values["fp16"] == {"enabled": False}
    assert values["gradient_clipping"] == 0.5
    assert values["optimizer"]["params"]["lr"] == 3e-6
    assert values["optimizer"]["params"]["weight_decay"] == 0.01
    assert values["optimizer"]["params"]["torch_adam"] is True  # states on the GPU


def test_grpo_batch_fields_follow_the_groups(tmp_path):
    """GRPO steps on B x G = 4 x 8 = 32 samples (one backward per rank per update): on 4 GPUs each
    runs 8 in one pass; the offload preset keeps the optimiser states in pinned CPU memory with
    DeepSpeed's CPU Adam; the JSON written for the launcher is the same dict. kl_coef 0 changes
    nothing here (the reference is not trained)."""
    config = GRPOConfig(
        **COMMON, deepspeed="zero2_offload", batch_size=4, group_size=8, bf16=True, kl_coef=0.0,
    )  # fmt: skip
    values = zero_config(config, world_size=4)
    assert values["train_micro_batch_size_per_gpu"] == 8
    assert values["gradient_accumulation_steps"] == 1
    assert values["train_batch_size"] == 32
    assert values["zero_optimization"]["stage"] == 2
    assert values["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert values["optimizer"]["params"]["torch_adam"] is False
    written = write_zero_config(config, tmp_path / "ds.json", world_size=4)
    assert json.loads(written.read_text()) == values
    with pytest.raises(ConfigError, match="not supported by the PPO/RLOO/GRPO loops"):
        require_zero_available(GRPOConfig(**COMMON, deepspeed="zero3"), "cuda")


def test_ppo_batch_fields_follow_the_minibatch():
    """PPO steps once per minibatch of 6 rollouts: 4 GPUs take 2 each (rounded up), so DeepSpeed's
    train batch is 8; no bf16, no clipping (max_grad_norm None -> 0)."""
    config = PPOConfig(
        **COMMON, deepspeed="zero3_offload", batch_size=8, minibatch_size=6, max_grad_norm=None,
    )  # fmt: skip
    values = zero_config(config, world_size=4)
    assert values["train_micro_batch_size_per_gpu"] == 2
    assert values["gradient_accumulation_steps"] == 1
    assert values["train_batch_size"] == 8
    assert values["bf16"] == {"enabled": False} and values["gradient_clipping"] == 0.0
    assert values["optimizer"]["params"]["torch_adam"] is False  # DeepSpeed's CPU Adam


def test_zero3_buckets_come_from_the_models_hidden_size(tiny_llama_dir, tmp_path):
    """The tiny model's hidden size is 32: reduce bucket 32^2 = 1024, prefetch 0.9 x 1024 = 921,
    parameters under 320 elements stay whole (the Trainer's "auto" rules)."""
    config = PPOConfig(**{**COMMON, "model": str(tiny_llama_dir)}, deepspeed="zero3")
    path = write_zero_config(config, tmp_path / "deepspeed.json", world_size=2)
    zero = json.loads(path.read_text())["zero_optimization"]
    assert zero["reduce_bucket_size"] == 1024
    assert zero["stage3_prefetch_bucket_size"] == 921
    assert zero["stage3_param_persistence_threshold"] == 320


def test_zero_needs_cuda_and_the_deepspeed_package(monkeypatch):
    """'none' is always fine; otherwise a CPU device, or CUDA without deepspeed installed, is an
    error naming the setting and the reason."""
    import importlib.util

    config = RLOOConfig(**COMMON, deepspeed="zero2")
    require_zero_available(RLOOConfig(**COMMON), "cpu")
    with pytest.raises(ConfigError, match=r"^deepspeed: .zero2. cannot be used: it runs on CUDA"):
        require_zero_available(config, "cpu")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"deepspeed package is not installed \(pip install"):
        require_zero_available(config, "cuda")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    require_zero_available(config, "cuda")


def test_the_online_loops_refuse_zero3_with_the_reason():
    """ZeRO-3 configs are written, but PPO and RLOO run ZeRO-2 only: asking for ZeRO-3 says why,
    wherever the run would go."""
    for device_type in ("cpu", "cuda"):
        with pytest.raises(ConfigError, match=r"^deepspeed: 'zero3_offload' is not supported"):
            require_zero_available(RLOOConfig(**COMMON, deepspeed="zero3_offload"), device_type)
