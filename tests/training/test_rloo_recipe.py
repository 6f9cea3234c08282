"""The RLOO recipe on a tiny Llama policy with a tiny Llama reward model."""

import json

import pytest
import torch

from training.recipes import RLOOConfig
from training.recipes.rloo import train_rloo


def _config(policy, reward, prompts, output_dir, **overrides) -> RLOOConfig:
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


def _metrics(output_dir):
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]


def test_rloo_steps_change_the_policy_and_log_health_metrics(
    tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path
):
    """Two steps of 2 prompts x 2 samples: finite loss, KL 0 on the first step (policy = reference),
    the metrics PIPELINE.md monitors, and weights that moved."""
    from safetensors.torch import load_file

    result = train_rloo(
        _config(tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path, kl_controller="adaptive")
    )
    rows = _metrics(tmp_path)
    assert result.status == "completed" and [r["step"] for r in rows] == [1, 2]
    assert rows[0]["kl"] == pytest.approx(0.0, abs=1e-5)
    for key in ("loss", "reward/score_mean", "reward/score_std", "kl_coef", "eos_rate"):
        assert key in rows[0]
    assert 0 < rows[0]["entropy"] < 10  # nats per token; the untrained tiny model is near uniform
    assert result.summary["samples_per_second"] > 0
    before = load_file(str(tiny_llama_dir / "model.safetensors"))
    after = load_file(f"{result.final_model_dir}/model.safetensors")
    assert any(not torch.equal(before[name], after[name]) for name in before)


def test_rloo_cancel_and_resume_is_exact(tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path):
    """Cancelled after step 1 and resumed (sampling RNG, KL controller and normaliser restored):
    the same weights as 2 uninterrupted steps."""
    from safetensors.torch import load_file

    from tests.training.test_dpo_recipe import StopAfter

    straight = train_rloo(
        _config(
            tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path / "a", kl_controller="variance"
        )
    )
    config = _config(
        tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path / "b", kl_controller="variance"
    )
    assert train_rloo(config, StopAfter(1)).status == "cancelled"
    resumed = train_rloo(config)
    a = load_file(f"{straight.final_model_dir}/model.safetensors")
    b = load_file(f"{resumed.final_model_dir}/model.safetensors")
    for name in a:
        assert torch.equal(a[name], b[name]), name
