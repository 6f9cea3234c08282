"""The GRPO recipe on a tiny Llama policy: verifiable rewards (and a tiny reward model), dynamic
sampling, the KL term's reference loaded only when kl_coef > 0, and exact resume."""

import json

import pytest
import torch

from tests.helpers.recipes import StopAfter, grpo_config
from tests.helpers.tiny_models import PAIRS, write_jsonl
from training.recipes.config import ConfigError
from training.recipes.grpo import train_grpo


def _metrics(output_dir):
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(f"{folder}/model.safetensors")


def test_the_verifiable_reward_rises_on_a_tiny_task(tiny_llama_dir, prompts_file, tmp_path):
    """Reward 1 when the answer starts with a letter a-m (about a third of the untrained model's
    samples): 10 steps of 4 prompts x 8 samples at a high learning rate move the mean reward of
    the last three steps well above the first three's (seeded: 0.28 -> 0.88 here)."""
    result = train_grpo(
        grpo_config(
            tiny_llama_dir, prompts_file, tmp_path,
            rewards=('regex_match {"pattern": "^[a-m]"}',), learning_rate=0.03,
            max_new_tokens=2, batch_size=4, group_size=8, epochs=20, max_steps=10,
        )
    )  # fmt: skip
    rows = _metrics(tmp_path)
    assert result.status == "completed" and len(rows) == 10
    first = sum(r["reward/score_mean"] for r in rows[:3]) / 3
    last = sum(r["reward/score_mean"] for r in rows[-3:]) / 3
    assert last > first + 0.3, (first, last)
    assert all(r["reward/regex_match_mean"] == r["reward/score_mean"] for r in rows)


def test_components_are_logged_and_weighted(tiny_llama_dir, tiny_reward_dir, tmp_path):
    """A reward model (weight 0.5) beside two labelled verifiable rewards (weights 1 and -2): each
    component is logged under reward/<label>_mean, and the total is their weighted sum; the
    answer-checking reward reads each prompt's ``answer`` field."""
    rows = [{"prompt": p, "answer": "4"} for p, _, _ in PAIRS]
    data = write_jsonl(tmp_path / "answers.jsonl", rows)
    train_grpo(
        grpo_config(
            tiny_llama_dir, data, tmp_path / "out", reward_model=str(tiny_reward_dir),
            reward_model_weight=0.5,
            rewards=('short=length_penalty {"target": 10}', "exact=exact_answer"),
            reward_weights=(1.0, -2.0), max_steps=1,
        )
    )  # fmt: skip
    (row,) = _metrics(tmp_path / "out")
    parts = row["reward/reward_model_mean"], row["reward/short_mean"], row["reward/exact_mean"]
    assert row["reward/score_mean"] == pytest.approx(0.5 * parts[0] + parts[1] - 2 * parts[2])
    assert 0 <= parts[2] <= 1 and -1 <= parts[1] <= 0


def test_a_reward_that_needs_answers_on_data_without_them_fails_before_loading(
    tiny_llama_dir, prompts_file, tmp_path
):
    """exact_answer on prompts without an ``answer``: a ConfigError naming ``rewards`` and the
    missing field, before the run folder is made."""
    with pytest.raises(ConfigError) as caught:
        train_grpo(
            grpo_config(tiny_llama_dir, prompts_file, tmp_path / "x", rewards=("exact_answer",))
        )
    assert caught.value.field == "rewards"
    assert "8 prompts have no 'answer' field" in str(caught.value)
    with pytest.raises(ConfigError, match="unknown reward 'nope'"):
        train_grpo(grpo_config(tiny_llama_dir, prompts_file, tmp_path / "x", rewards=("nope",)))
    assert not (tmp_path / "x").exists()


def test_kl_coef_zero_loads_no_reference(tiny_llama_dir, prompts_file, tmp_path, monkeypatch):
    """kl_coef 0: the causal-LM loader runs once (the policy), KL logs 0; kl_coef 0.04: twice,
    and the k3 KL to the reference is 0 on step 1 (policy = reference) and positive after."""
    from training.recipes import online

    loads = []
    real = online.reference_model
    monkeypatch.setattr(online, "reference_model", lambda *a, **k: loads.append(a) or real(*a, **k))
    no_ref = train_grpo(grpo_config(tiny_llama_dir, prompts_file, tmp_path / "a", max_steps=1))
    assert loads == [] and no_ref.summary["reference_model"] is False
    with_ref = train_grpo(grpo_config(tiny_llama_dir, prompts_file, tmp_path / "b", kl_coef=0.04))
    assert len(loads) == 1 and with_ref.summary["reference_model"] is True
    rows = _metrics(tmp_path / "b")
    assert rows[0]["kl"] == pytest.approx(0.0, abs=1e-6) and rows[1]["kl"] > 0


def test_dynamic_sampling_drops_flat_groups_and_counts_them(tiny_llama_dir, prompts_file, tmp_path):
    """A reward every sample gets alike (the R1 format, which the tiny model never writes): every
    group is flat; 2 rounds of fresh prompts find none with a signal, so per step 2 + 2 x 2 flat
    groups are counted, the 2 of the batch are dropped, and no update moves the weights."""
    result = train_grpo(
        grpo_config(
            tiny_llama_dir, prompts_file, tmp_path, rewards=("format",), dynamic_sampling=True,
            dynamic_sampling_rounds=2, kl_coef=0.04,
        )
    )  # fmt: skip
    rows = _metrics(tmp_path)
    assert [r["dynamic/groups_flat"] for r in rows] == [6, 6]
    assert [r["dynamic/groups_dropped"] for r in rows] == [2, 2]
    assert [r["dynamic/sampling_rounds"] for r in rows] == [2, 2]
    before, after = _weights(tiny_llama_dir), _weights(result.final_model_dir)
    assert all(torch.equal(before[name], after[name]) for name in before)


def test_dynamic_sampling_replaces_flat_groups_with_fresh_prompts(
    tiny_llama_dir, prompts_file, tmp_path
):
    """With a reward that splits samples (the answer starts with a-f), groups of 2 are often flat:
    they are replaced by fresh prompts' groups, so what is dropped is at most what was flat."""
    train_grpo(
        grpo_config(
            tiny_llama_dir, prompts_file, tmp_path, dynamic_sampling=True, batch_size=4,
            group_size=2, rewards=('regex_match {"pattern": "^[a-f]"}',), max_new_tokens=2,
        )
    )  # fmt: skip
    for row in _metrics(tmp_path):
        assert row["dynamic/groups_dropped"] <= row["dynamic/groups_flat"]
        assert row["dynamic/sampling_rounds"] <= 3


@pytest.mark.parametrize("loss_normalisation", ["token", "sequence"])
def test_cancel_and_resume_is_exact(tiny_llama_dir, prompts_file, tmp_path, loss_normalisation):
    """Cancelled after step 1 and resumed (sampling RNG, optimiser, schedule restored; fresh
    prompts of dynamic sampling drawn again from their seed): the same weights as 3
    uninterrupted steps, with the KL term, clip-higher and two updates per batch on."""
    values = {
        "kl_coef": 0.04, "dynamic_sampling": True, "updates_per_batch": 2, "clip_high": 0.28,
        "max_steps": 3, "loss_normalisation": loss_normalisation, "scale_rewards": "batch",
    }  # fmt: skip
    straight = train_grpo(grpo_config(tiny_llama_dir, prompts_file, tmp_path / "a", **values))
    config = grpo_config(tiny_llama_dir, prompts_file, tmp_path / "b", **values)
    assert train_grpo(config, StopAfter(1)).status == "cancelled"
    resumed = train_grpo(config)
    a, b = _weights(straight.final_model_dir), _weights(resumed.final_model_dir)
    for name in a:
        assert torch.equal(a[name], b[name]), name
    rows = _metrics(tmp_path / "a")
    assert {"clip_fraction", "clip_fraction_high", "entropy", "grad_norm"} <= rows[-1].keys()


def test_a_reward_registered_in_a_user_module(tiny_llama_dir, prompts_file, tmp_path):
    """``reward_modules`` names the module holding a user's ``@register`` function: it is
    imported before the rewards are looked up, and the reward is logged like a built-in one; a
    module that does not exist is a ConfigError naming the field."""
    train_grpo(
        grpo_config(
            tiny_llama_dir, prompts_file, tmp_path / "a", max_steps=1,
            reward_modules=("tests.helpers.custom_rewards",),
            rewards=('mentions_concord {"bonus": 2.0}', "length_penalty"),
        )
    )  # fmt: skip
    (row,) = _metrics(tmp_path / "a")
    assert 0.0 <= row["reward/mentions_concord_mean"] <= 2.0  # a share of samples x bonus 2
    with pytest.raises(ConfigError) as caught:
        train_grpo(
            grpo_config(
                tiny_llama_dir, prompts_file, tmp_path / "b",
                reward_modules=("no_such_module_here",), rewards=("format",),
            )
        )  # fmt: skip
    assert caught.value.field == "reward_modules"
