"""What PPO and RLOO share: model loading, the held-out evaluation, PPO's double samples for
high-variance prompts, and how prompts are shared between processes."""

import dataclasses
import json

import pytest
import torch

from tests.helpers.recipes import rloo_config
from training.recipes import ConfigError, PPOConfig
from training.recipes.data import load_prompts
from training.recipes.distributed import Ranks
from training.recipes.online import (
    evaluate_policy,
    load_online_models,
    require_prompts_per_rank,
    split_eval_prompts,
)
from training.recipes.ppo import (
    assign_rollout_sources,
    collect_rollouts,
    high_variance_prompts,
    rollout_prompts,
)
from training.recipes.rloo import train_rloo

CPU = torch.device("cpu")


def _metrics(output_dir):
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]


def test_held_out_prompts_are_a_fixed_tenth_at_most():
    """40 prompts, 32 asked: 4 held out (a tenth), the same 4 every time, never trained on, both
    lists in file order; 8 prompts: 1; 1 prompt or 0 asked: none."""
    prompts = [((("user", f"q{i}"),)) for i in range(40)]
    train, held = split_eval_prompts(prompts, 32)
    assert len(held) == 4 and len(train) == 36
    assert split_eval_prompts(prompts, 32) == (train, held)
    assert not set(train) & set(held)
    assert held == sorted(held, key=prompts.index) and train == sorted(train, key=prompts.index)
    assert len(split_eval_prompts(prompts[:8], 32)[1]) == 1
    assert split_eval_prompts(prompts[:1], 32) == (prompts[:1], [])
    assert split_eval_prompts(prompts, 0) == (prompts, [])


def test_high_variance_prompts_hand_values():
    """Unbiased variance of two scores is (a - b)^2 / 2: (0, 1) -> 0.5 and (0.2, 0.8) -> 0.18 pass
    PIPELINE.md's 0.15; (0.2, 0.4) -> 0.02 and (3, 3) -> 0 do not. Three samples (0, 0.5, 1):
    variance 0.25."""
    scores = torch.tensor([[0.0, 1.0], [0.2, 0.4], [3.0, 3.0], [0.2, 0.8]])
    assert high_variance_prompts(scores, 0.15).tolist() == [True, False, False, True]
    assert high_variance_prompts(torch.tensor([[0.0, 0.5, 1.0]]), 0.24).tolist() == [True]


class SpreadByPrompt:
    """A stand-in reward model: responses to prompts mentioning 'spread' alternate 0, 2, 0, 2, ...
    (variance 2 for any two of them); every other response scores 0.5 (variance 0)."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def encode(self, prompt, response):
        return prompt

    def clusters_for(self, prompts):
        return None  # not cluster-conditioned

    def score_members(self, prompts, clusters=None):
        return self.score(prompts)[None]

    def score(self, prompts, clusters=None):
        values = []
        for prompt in prompts:
            text = prompt[-1][1]
            count = self.calls.get(text, 0)
            self.calls[text] = count + 1
            values.append(2.0 * (count % 2) if "spread" in text else 0.5)
        return torch.tensor(values)


def test_high_variance_prompts_get_twice_the_samples(
    tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path
):
    """4 prompts at 2 samples each, the 2 'spread' prompts above the 0.15 threshold: they get 2
    more samples (4), from their own source (one is the SFT anchor's, one perturbed by an
    instruction), the others keep 2; rollouts come prompt by prompt. The same seed samples the same
    responses again."""
    config = PPOConfig(
        model=str(tiny_llama_dir), reward_model=str(tiny_reward_dir), data=str(prompts_file),
        output_dir=str(tmp_path), batch_size=4, minibatch_size=2, max_new_tokens=5,
        max_length=128, anchor_fraction=0.25, perturb_fraction=0.25, device="cpu",
    )  # fmt: skip
    models = load_online_models(config, device=CPU)
    prompts = [
        (("user", "spread: name a colour"),),
        (("user", "spread: pick a number"),),
        (("user", "What is the capital of France?"),),
        (("user", "Add 2 and 3."),),
    ]
    sources = assign_rollout_sources(4, config)
    assert sources == ["anchor", "perturb", "policy", "policy"]
    asked = rollout_prompts(prompts, sources, config, step=1)
    assert asked[1][-1][1].startswith("spread: pick a number\n\n")

    def collect():
        torch.manual_seed(0)
        return collect_rollouts(
            dataclasses.replace(models, scorer=SpreadByPrompt()), asked, sources, config, CPU
        )

    rollouts, members, doubled = collect()
    assert members.shape == (1, 12)
    scores = members[0]
    assert doubled == [True, True, False, False]
    counts = [sum(r.prompt == p for r in rollouts) for p in asked]
    assert counts == [4, 4, 2, 2]
    assert [r.prompt for r in rollouts] == [
        p for p, n in zip(asked, counts, strict=True) for _ in range(n)
    ]
    assert scores.tolist() == [0, 2, 0, 2] * 2 + [0.5] * 4
    again, _, _ = collect()
    assert [r.response_ids for r in again] == [r.response_ids for r in rollouts]


def test_rloo_evaluates_greedily_on_held_out_prompts_without_changing_training(
    tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path
):
    """8 prompts: 1 held out. Evaluating every step logs eval_reward_mean/std and the evaluation
    KL (eval_kl, >= 0) at steps 1 and 2; evaluating only at the last step logs them at step 2
    alone, with the same values, and both runs end with the same weights (greedy answers draw no
    randomness, and the KL's seeded draws leave the random state as it was). The logged value is
    the reward model's mean score of the final policy's greedy answers to the held-out prompt."""
    from safetensors.torch import load_file

    every = train_rloo(
        rloo_config(tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path / "a", eval_every=1)
    )
    last = train_rloo(
        rloo_config(tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path / "b", eval_every=50)
    )
    rows_every, rows_last = _metrics(tmp_path / "a"), _metrics(tmp_path / "b")
    assert all("eval_reward_mean" in r and "eval_reward_std" in r for r in rows_every)
    assert "eval_reward_mean" not in rows_last[0]
    assert rows_last[1]["eval_reward_mean"] == rows_every[1]["eval_reward_mean"]
    assert [r["step"] for r in rows_every if "eval_kl" in r] == [1, 2]
    assert all(r["eval_kl"] >= 0 for r in rows_every) and "eval_kl" not in rows_last[0]
    assert rows_last[1]["eval_kl"] == pytest.approx(rows_every[1]["eval_kl"], abs=1e-9)
    assert every.summary["eval_prompts"] == 1 and every.summary["prompts"] == 7
    a = load_file(f"{every.final_model_dir}/model.safetensors")
    b = load_file(f"{last.final_model_dir}/model.safetensors")
    assert all(torch.equal(a[name], b[name]) for name in a)

    config = rloo_config(every.final_model_dir, tiny_reward_dir, prompts_file, tmp_path / "c")
    _, held_out = split_eval_prompts(load_prompts(prompts_file), config.eval_prompts)
    again = evaluate_policy(
        load_online_models(config, device=CPU), held_out, config, ranks=Ranks(), device=CPU
    )
    assert again["eval_reward_mean"] == pytest.approx(rows_every[1]["eval_reward_mean"], abs=1e-6)
    assert again["eval_reward_std"] == 0.0  # one held-out prompt


def test_ranks_take_contiguous_blocks_that_concatenate_to_the_batch():
    """7 rows on 3 ranks: 3, 2, 2 rows; in rank order they are the batch again."""
    rows = list(range(7))
    blocks = [Ranks(rank, 3).block(rows) for rank in range(3)]
    assert blocks == [[0, 1, 2], [3, 4], [5, 6]]


def test_every_rank_needs_a_prompt_in_every_step():
    """7 prompts in batches of 4 leave a last batch of 3: fine on 2 or 3 ranks, an error on 4."""
    require_prompts_per_rank(7, 4, Ranks(0, 3))
    with pytest.raises(ConfigError, match="batch_size: each of the 4 processes"):
        require_prompts_per_rank(7, 4, Ranks(0, 4))


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"samples_per_prompt": 1}, "double_sample_variance"),
        ({"samples_per_prompt": 0, "double_sample_variance": None}, "samples_per_prompt"),
        ({"double_sample_variance": -0.1}, "double_sample_variance"),
        ({"eval_every": 0}, "eval_every"),
        ({"eval_prompts": -1}, "eval_prompts"),
        ({"deepspeed": "zero4"}, "deepspeed"),
    ],
)
def test_online_settings_are_validated(overrides, field):
    values = {"model": "m", "reward_model": "r", "data": "d", "output_dir": "o"}
    with pytest.raises(ConfigError, match=f"^{field}:"):
        PPOConfig(**values, **overrides)


def test_double_samples_can_be_turned_off_for_one_sample_per_prompt():
    config = PPOConfig(
        model="m", reward_model="r", data="d", output_dir="o",
        samples_per_prompt=1, double_sample_variance=None,
    )  # fmt: skip
    assert config.samples_per_prompt == 1


def test_each_rank_samples_with_its_own_stream_and_resumes_it():
    """Rank 0 keeps the single-process stream, rank 1 gets its own (seed + 7919); a checkpoint
    keeps every rank's state, and on resume each rank takes back its own (same world size only)."""
    from training.recipes.distributed import seed_rank_streams
    from training.recipes.online import rank_rng_states, restore_rank_rng
    from training.recipes.runtime import rng_state

    torch.manual_seed(5)
    seed_rank_streams(5, Ranks(0, 2))
    rank0 = torch.rand(3)
    seed_rank_streams(5, Ranks(1, 2))
    rank1 = torch.rand(3)
    torch.manual_seed(5)
    assert torch.equal(torch.rand(3), rank0)
    torch.manual_seed(5 + 7919)
    assert torch.equal(torch.rand(3), rank1)

    assert rank_rng_states(Ranks()) is None  # one process: the checkpoint's RNG state suffices
    torch.manual_seed(1)
    saved = [rng_state(), None]
    torch.manual_seed(2)
    saved[1] = rng_state()
    expected = torch.rand(3)
    torch.manual_seed(3)
    restore_rank_rng(saved, Ranks(1, 3))  # another world size: left alone
    assert not torch.equal(torch.rand(3), expected)
    restore_rank_rng(saved, Ranks(1, 2))
    assert torch.equal(torch.rand(3), expected)
