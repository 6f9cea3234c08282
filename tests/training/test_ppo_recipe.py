"""The PPO recipe on a tiny Llama policy with a tiny Llama reward model."""

import json

import torch

from tests.helpers.recipes import ppo_config
from training.recipes.ppo import assign_rollout_sources, train_ppo


def test_rollout_shares_follow_theppo_config():
    """10 prompts at 70/20/10: 2 anchor (SFT reference), 1 perturbed, 7 from the policy."""
    config = ppo_config(
        "m", "r", "d", "o", batch_size=10, anchor_fraction=0.2, perturb_fraction=0.1
    )
    sources = assign_rollout_sources(10, config)
    assert sources.count("anchor") == 2 and sources.count("perturb") == 1
    assert sources.count("policy") == 7


def test_ppo_steps_log_the_monitored_metrics_and_change_the_policy(
    tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path
):
    """Two rollout batches of 4 prompts (1 anchor, 1 perturbed, 2 policy; 2 samples each, more for
    high-variance prompts), 2 epochs of minibatches of 2: the loop finishes with finite losses, the
    metrics of PIPELINE.md's alert table, and the held-out evaluation at the last step."""
    from safetensors.torch import load_file

    result = train_ppo(ppo_config(tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path))
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert result.status == "completed" and [r["step"] for r in rows] == [1, 2]
    for key in ("kl", "reward/score_std", "clip_fraction", "entropy", "value_loss", "approx_kl"):
        assert key in rows[0] and rows[0][key] == rows[0][key]  # present, not NaN
    assert 1 <= rows[0]["ppo_epochs_run"] <= 2
    assert 0 <= rows[0]["double_sampled_fraction"] <= 1
    assert "eval_reward_mean" in rows[-1] and "eval_reward_std" in rows[-1]  # the last step
    before = load_file(str(tiny_llama_dir / "model.safetensors"))
    after = load_file(f"{result.final_model_dir}/model.safetensors")
    assert any(not torch.equal(before[name], after[name]) for name in before)


def test_ppo_cancel_and_resume_is_exact(tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path):
    """Value head, KL controller, normaliser, optimiser and RNG come back from the checkpoint."""
    from safetensors.torch import load_file

    from tests.helpers.recipes import StopAfter

    straight = train_ppo(
        ppo_config(
            tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path / "a", kl_controller="adaptive"
        )
    )
    config = ppo_config(
        tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path / "b", kl_controller="adaptive"
    )
    assert train_ppo(config, StopAfter(1)).status == "cancelled"
    resumed = train_ppo(config)
    a = load_file(f"{straight.final_model_dir}/model.safetensors")
    b = load_file(f"{resumed.final_model_dir}/model.safetensors")
    for name in a:
        assert torch.equal(a[name], b[name]), name
