"""Data parallelism: DPO, SimPO, ORPO, KTO, PPO, RLOO and GRPO on two CPU processes (torchrun, Gloo) reach the
weights one process does."""

import json
import subprocess
import sys

import pytest
import torch

from training.recipes import config_class, run_training

pytestmark = pytest.mark.multiprocess


@pytest.mark.parametrize("kind", ["dpo", "simpo", "orpo", "kto"])
def test_two_ranks_train_like_one_process(kind, tiny_llama_dir, pairs_file, tmp_path):
    """Each rank takes half of every step's pairs and the gradients are summed before the step, so
    2 steps of 4 pairs on 2 ranks equal 2 steps of 4 pairs on 1 process (to float rounding), for
    DPO, the reference-free SimPO and ORPO, and KTO (4 examples a step; step 2's KL estimate is
    the mean over both ranks' mismatched sequences). Only rank 0 writes the run folder."""
    from safetensors.torch import load_file

    values = {
        "model": str(tiny_llama_dir),
        "data": str(pairs_file),
        "batch_size": 4,
        "max_length": 128,
        "learning_rate": 1e-3,
        "max_steps": 2,
        "checkpoint_every": 0,
        "device": "cpu",
    }
    cls = config_class(kind)
    single = run_training(cls(output_dir=str(tmp_path / "single"), **values))

    config = cls(output_dir=str(tmp_path / "ddp"), **values)
    config_path = tmp_path / "ddp-config.json"
    config.save(config_path)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         "-m", "training.launch", str(config_path)],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["status"] == "completed" and summary["world_size"] == 2

    a = load_file(f"{single.final_model_dir}/model.safetensors")
    b = load_file(str(tmp_path / "ddp" / "final" / "model.safetensors"))
    # Adam (lr 1e-3) turns float rounding of gradients summed in another order into weight
    # differences of a few 1e-6: two exactly equivalent log-prob paths in one process differ by
    # 2e-6. A wrong gradient would be off by about the learning rate.
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-5), name
    if kind == "kto":  # step 2's KL estimate: both ranks' halves, as in one process
        logged = [
            [json.loads(line)["kl_estimate"] for line in (tmp_path / d / "metrics.jsonl").open()]
            for d in ("single", "ddp")
        ]
        assert logged[0][1] != 0.0
        assert logged[1] == pytest.approx(logged[0], abs=1e-6)


def _torchrun_plan(plan: list[dict], tmp_path) -> None:
    """Make the plan's runs (tests/helpers/fixed_rollouts.py) in one 2-process torchrun group."""
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         "-m", "tests.helpers.fixed_rollouts", str(tmp_path / "plan.json")],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def _online_values(policy, reward, prompts) -> dict:
    return {
        "model": str(policy),
        "reward_model": str(reward),
        "data": str(prompts),
        "max_new_tokens": 6,
        "max_length": 128,
        "learning_rate": 1e-3,
        "checkpoint_every": 0,
        "device": "cpu",
        "eval_prompts": 1,
        "eval_every": 1,
    }


def test_two_ranks_run_ppo_and_rloo_like_one_process(
    tiny_llama_dir, tiny_tokenizer_dir, prompts_file, tmp_path
):
    """PPO and RLOO with fixed rollouts (tests/helpers/fixed_rollouts.py: sampling itself cannot
    match, each process draws its own random numbers) on 7 training prompts in steps of 4 and 3:
    the second step splits 2 + 1 across the ranks, and PPO doubles the samples of its
    high-variance prompts (threshold lowered to the tiny reward model's scale), so ranks hold
    different numbers of rollouts. Whitening, the normaliser,
    the KL controller and every metric use all ranks' rollouts, the minibatches are the same
    slices of the global order, and gradients are summed: one epoch on 2 ranks gives the weights
    and the logged numbers of 1 process (to float rounding: sums run in another order)."""
    from safetensors.torch import load_file

    from tests.helpers.fixed_rollouts import fixed_rollouts
    from tests.helpers.tiny_models import tiny_llama
    from training.recipes import GRPOConfig, PPOConfig, RLOOConfig, run_training

    reward = tiny_llama(tmp_path / "rm", tiny_tokenizer_dir, seed=1, for_classification=True)
    common = _online_values(tiny_llama_dir, reward, prompts_file)
    configs = {
        "ppo": lambda out: PPOConfig(
            output_dir=str(out), batch_size=4, minibatch_size=4, ppo_epochs=2, value_hidden=16,
            value_dropout=0.0, anchor_fraction=0.25, perturb_fraction=0.25,
            double_sample_variance=5e-6, **common,
        ),
        "rloo": lambda out: RLOOConfig(output_dir=str(out), batch_size=4, rloo_k=2, **common),
        # GRPO: the k3 KL term, a verifiable reward beside the reward model, token-level loss
        # (the divisor is every rank's tokens) and "batch" std scaling (every rank's rewards).
        "grpo": lambda out: GRPOConfig(
            output_dir=str(out), batch_size=4, group_size=2, kl_coef=0.04, updates_per_batch=2,
            scale_rewards="batch", rewards=('length_penalty {"target": 12}',), **common,
        ),
    }  # fmt: skip
    plan = []
    for kind, make in configs.items():
        with fixed_rollouts():
            run_training(make(tmp_path / f"{kind}-single"))
        make(tmp_path / f"{kind}-ddp").save(tmp_path / f"{kind}-ddp.json")
        plan.append({"config": str(tmp_path / f"{kind}-ddp.json"), "fixed_rollouts": True})
    _torchrun_plan(plan, tmp_path)

    for kind in configs:
        single, ddp = tmp_path / f"{kind}-single", tmp_path / f"{kind}-ddp"
        assert json.loads((ddp / "summary.json").read_text())["world_size"] == 2
        a = load_file(str(single / "final" / "model.safetensors"))
        b = load_file(str(ddp / "final" / "model.safetensors"))
        worst = max(float((a[name] - b[name]).abs().max()) for name in a)
        assert worst < 2e-5, f"{kind}: weights differ by up to {worst}"
        rows = [
            [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
            for run in (single, ddp)
        ]
        assert [r["step"] for r in rows[1]] == [1, 2]
        for one, two in zip(*rows, strict=True):
            for key in ("reward/score_mean", "reward/score_std", "kl", "loss", "eval_reward_mean"):
                assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), (kind, key)
            assert two["samples_per_second"] > 0
        if kind == "ppo":  # the tiny reward model's score variances are ~1e-6 to 1e-4
            doubled = [r["double_sampled_fraction"] for r in rows[0]]
            assert any(0 < share < 1 for share in doubled), doubled


def test_two_ranks_resume_ppo_and_rloo_exactly(
    tiny_llama_dir, tiny_tokenizer_dir, prompts_file, tmp_path
):
    """Real sampling on 2 ranks, each with its own random stream: a run cancelled after step 1 and
    resumed ends with the weights of an uninterrupted run, because the checkpoint keeps every
    rank's RNG state (not only rank 0's), the value head, KL controller and normaliser."""
    from safetensors.torch import load_file

    from tests.helpers.tiny_models import tiny_llama
    from training.recipes import GRPOConfig, PPOConfig, RLOOConfig

    reward = tiny_llama(tmp_path / "rm", tiny_tokenizer_dir, seed=1, for_classification=True)
    common = {**_online_values(tiny_llama_dir, reward, prompts_file), "max_steps": 2}
    common["kl_controller"] = "adaptive"
    configs = {
        "ppo": lambda out: PPOConfig(
            output_dir=str(out), batch_size=4, minibatch_size=4, ppo_epochs=1, value_hidden=16,
            anchor_fraction=0.25, perturb_fraction=0.25, **common,
        ),
        "rloo": lambda out: RLOOConfig(output_dir=str(out), batch_size=4, rloo_k=2, **common),
        "grpo": lambda out: GRPOConfig(
            output_dir=str(out), batch_size=4, group_size=2, kl_coef=0.04, dynamic_sampling=True,
            rewards=('length_penalty {"target": 12}',), **common,
        ),
    }  # fmt: skip
    plan = []
    for kind, make in configs.items():
        for run, stop_after in (("straight", None), ("resumed", 1), ("resumed", None)):
            path = tmp_path / f"{kind}-{run}.json"
            make(tmp_path / f"{kind}-{run}").save(path)
            plan.append({"config": str(path), "stop_after": stop_after})
    _torchrun_plan(plan, tmp_path)

    for kind in configs:
        summary = json.loads((tmp_path / f"{kind}-resumed" / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["world_size"] == 2
        a = load_file(str(tmp_path / f"{kind}-straight" / "final" / "model.safetensors"))
        b = load_file(str(tmp_path / f"{kind}-resumed" / "final" / "model.safetensors"))
        for name in a:
            assert torch.equal(a[name], b[name]), (kind, name)
