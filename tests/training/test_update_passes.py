"""RLOO's and GRPO's updates in passes of ``micro_batch_size`` prompts: the passes' gradients add
up to the one-pass update (same weights after a step), a prompt's samples never split, and the
settings that cannot be honoured are refused instead of ignored."""

import json

import pytest
import torch

from tests.helpers.recipes import grpo_config, ppo_config, rloo_config
from training.recipes.config import ConfigError
from training.recipes.grpo import train_grpo
from training.recipes.online import update_passes
from training.recipes.rloo import train_rloo
from training.recipes.updates import PlainUpdates


def _metrics(output_dir):
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture
def gradients(monkeypatch):
    """The summed gradients each optimiser step saw, per step: [{parameter index: grad}]."""
    seen: list[dict[int, torch.Tensor]] = []
    real = PlainUpdates.step

    def step(self):
        seen.append({i: p.grad.clone() for i, p in enumerate(self.params) if p.grad is not None})
        return real(self)

    monkeypatch.setattr(PlainUpdates, "step", step)
    return seen


def _assert_same_gradients(first, second, *, rtol=1e-4, atol=1e-7):
    assert first.keys() == second.keys()
    for i in first:
        assert torch.allclose(first[i], second[i], rtol=rtol, atol=atol), i


def _assert_same_figures(rows_one, rows_passes, keys):
    for key in keys:
        assert rows_passes[0][key] == pytest.approx(rows_one[0][key], rel=1e-4, abs=1e-6), key


def test_passes_keep_each_prompts_samples_together():
    assert update_passes(12, 4, None) == [slice(0, 12)]
    assert update_passes(12, 4, 1) == [slice(0, 4), slice(4, 8), slice(8, 12)]
    assert update_passes(12, 4, 2) == [slice(0, 8), slice(8, 12)]


@pytest.mark.parametrize("loss_normalisation", ["token", "sequence"])
def test_grpo_passes_make_the_one_pass_step(
    tiny_llama_dir, prompts_file, tmp_path, gradients, loss_normalisation
):
    """4 prompts x G 4 with the KL term and two updates per batch: passes of one prompt give the
    one pass's gradients (the first update's exactly, up to float summation order; the second's
    after an AdamW step whose near-zero gradients may round either way) and figures."""
    values = {
        "batch_size": 4, "max_steps": 1, "kl_coef": 0.04, "updates_per_batch": 2,
        "loss_normalisation": loss_normalisation, "learning_rate": 1e-4,
    }  # fmt: skip
    train_grpo(grpo_config(tiny_llama_dir, prompts_file, tmp_path / "one", **values))
    train_grpo(
        grpo_config(tiny_llama_dir, prompts_file, tmp_path / "split", micro_batch_size=1, **values)
    )
    assert len(gradients) == 4  # two updates per run
    _assert_same_gradients(gradients[0], gradients[2])
    _assert_same_gradients(gradients[1], gradients[3], rtol=1e-2, atol=1e-5)
    keys = ("loss", "ratio_mean", "kl", "entropy")
    _assert_same_figures(_metrics(tmp_path / "one"), _metrics(tmp_path / "split"), keys)


def test_rloo_passes_make_the_one_pass_step(
    tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path, gradients
):
    values = {"batch_size": 4, "rloo_k": 3, "max_steps": 1}
    train_rloo(
        rloo_config(tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path / "one", **values)
    )
    train_rloo(
        rloo_config(
            tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path / "split",
            micro_batch_size=2, **values,
        )
    )  # fmt: skip
    assert len(gradients) == 2
    _assert_same_gradients(gradients[0], gradients[1])
    keys = ("loss", "kl", "reward/total_mean", "entropy", "grad_norm")
    _assert_same_figures(_metrics(tmp_path / "one"), _metrics(tmp_path / "split"), keys)


def test_settings_that_cannot_be_honoured_are_refused(tiny_llama_dir, tiny_reward_dir, tmp_path):
    """PPO's pass is its minibatch; a ZeRO engine takes one backward per step."""
    with pytest.raises(ConfigError, match="minibatch_size") as error:
        ppo_config(
            tiny_llama_dir, tiny_reward_dir, tmp_path / "p.jsonl", tmp_path,
            batch_size=4, minibatch_size=4, micro_batch_size=2,
        )  # fmt: skip
    assert error.value.field == "micro_batch_size"
    ppo_config(  # equal to the minibatch: what the GPU preset sets
        tiny_llama_dir, tiny_reward_dir, tmp_path / "p.jsonl", tmp_path,
        batch_size=4, minibatch_size=2, micro_batch_size=2,
    )  # fmt: skip
    with pytest.raises(ConfigError, match="ZeRO") as error:
        rloo_config(
            tiny_llama_dir, tiny_reward_dir, tmp_path / "p.jsonl", tmp_path,
            batch_size=4, micro_batch_size=2, deepspeed="zero2",
        )  # fmt: skip
    assert error.value.field == "micro_batch_size"
