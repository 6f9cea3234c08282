"""Online recipes hand a few generations to ``on_samples`` at their evaluation steps, and the pure
helper that picks them."""

from __future__ import annotations

import pytest

from training.recipes import PPOConfig, RLOOConfig
from training.recipes.callbacks import TrainingCallback
from training.recipes.samples import prompt_text, rollout_samples


class KeepSamples(TrainingCallback):
    def __init__(self) -> None:
        self.calls: list[tuple[int, list[dict]]] = []

    def on_samples(self, *, step, samples) -> None:
        self.calls.append((step, [dict(s) for s in samples]))


class _Rollout:
    def __init__(self, prompt, text, n_tokens, finished=True) -> None:
        self.prompt, self.text = prompt, text
        self.response_ids, self.finished = tuple(range(n_tokens)), finished


def test_one_sample_per_prompt_comes_first_and_numbers_are_kept():
    """RLOO repeats each prompt K=2 times: with limit 2 the two samples answer the two prompts
    (rollouts 0 and 2), carrying their reward, figures, length and EOS flag; NaN becomes None."""
    a, b = (("user", "A?"),), (("system", "be brief"), ("user", "B?"))
    rollouts = [_Rollout(a, "a1", 3), _Rollout(a, "a2", 4), _Rollout(b, "b1", 5, False)]
    rollouts.append(_Rollout(b, "b2", 1))
    samples = rollout_samples(
        rollouts=rollouts,
        rewards=[0.5, 0.1, float("nan"), 2.0],
        figures={"kl": [0.0, 0.1, 0.2, 0.3]},
        limit=2,
    )
    assert samples == [
        {
            "prompt": "A?",
            "response": "a1",
            "reward": 0.5,
            "kl": 0.0,
            "length": 3.0,
            "finished": 1.0,
        },
        {
            "prompt": "B?",
            "response": "b1",
            "reward": None,
            "kl": 0.2,
            "length": 5.0,
            "finished": 0.0,
        },
    ]


def test_mismatched_columns_are_refused_with_their_name():
    with pytest.raises(ValueError, match=r"figures\['kl'\]"):
        rollout_samples(
            rollouts=[_Rollout((("user", "x"),), "y", 1)], rewards=[1.0], figures={"kl": []}
        )


def test_a_conversation_shows_every_turn():
    assert prompt_text((("user", "hi"), ("assistant", "hello"), ("user", "bye"))) == (
        "user: hi\nassistant: hello\nuser: bye"
    )


def _values(policy, reward, prompts, output_dir) -> dict:
    return {
        "model": str(policy), "reward_model": str(reward), "data": str(prompts),
        "output_dir": str(output_dir), "batch_size": 2, "max_new_tokens": 4, "max_length": 128,
        "checkpoint_every": 0, "device": "cpu", "max_steps": 2, "eval_every": 2, "eval_prompts": 0,
    }  # fmt: skip


def test_rloo_keeps_samples_at_evaluation_steps(
    tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path
):
    """eval_every=2 over 2 steps: samples at step 2 only, all 4 rollouts (2 prompts x K=2, within
    SAMPLES_PER_EVAL), the two prompts first, each with text, a finite reward, the RM score and KL."""
    from training.recipes.rloo import train_rloo

    keep = KeepSamples()
    config = RLOOConfig(
        **_values(tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path), rloo_k=2
    )
    assert train_rloo(config, keep).status == "completed"
    assert [step for step, _ in keep.calls] == [2]
    samples = keep.calls[0][1]
    assert len(samples) == 4 and samples[0]["prompt"] != samples[1]["prompt"]
    for sample in samples:
        assert isinstance(sample["response"], str) and sample["prompt"]
        assert {"reward", "score", "kl", "length", "finished"} <= sample.keys()
        assert sample["reward"] is not None


def test_ppo_keeps_samples_at_evaluation_steps(
    tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path
):
    """The same for PPO: its sequence reward (shaped score) and summed KL per sample."""
    from training.recipes.ppo import train_ppo

    keep = KeepSamples()
    config = PPOConfig(
        **_values(tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path), minibatch_size=2
    )
    assert train_ppo(config, keep).status == "completed"
    assert [step for step, _ in keep.calls] == [2]
    assert len(keep.calls[0][1]) == 4  # 2 prompts x 2 samples each
    assert {"reward", "score", "kl"} <= keep.calls[0][1][0].keys()
