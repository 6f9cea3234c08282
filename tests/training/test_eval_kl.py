"""The evaluation KL (training.recipes.eval_kl): the policy's KL from its reference on the held-out
prompts, from seeded draws that leave training's random state alone."""

import dataclasses

import pytest
import torch

from tests.helpers.recipes import rloo_config
from training.recipes.data import load_prompts
from training.recipes.distributed import Ranks
from training.recipes.eval_kl import evaluation_kl
from training.recipes.online import load_online_models
from training.recipes.packing import build_batch, completion_token_logprobs
from training.recipes.rloo import train_rloo

CPU = torch.device("cpu")


def _measure(config, *, repeat: int = 1):
    """The models and a measurement on the file's first 4 prompts, each ``repeat`` times in a row."""
    models = load_online_models(config, device=CPU)
    prompts = [p for p in load_prompts(config.data)[:4] for _ in range(repeat)]

    def token_logprobs(model, sequences):
        batch = build_batch(
            sequences, packed=models.packed, pad_token_id=models.tokenizer.pad_token_id,
            device=CPU, share_prompts=False,
        )  # fmt: skip
        return completion_token_logprobs(model, batch, temperature=config.temperature), batch

    def measure(which=models):
        return evaluation_kl(
            which, prompts, config, ranks=Ranks(), device=CPU, token_logprobs=token_logprobs
        )

    return models, measure


def test_zero_against_itself_positive_once_trained_and_training_untouched(
    tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path
):
    """The starting policy against itself (its own reference): 0 (k3 of equal log-probs). After
    two RLOO steps at a high learning rate, against the starting policy: above 0, the same on a
    second call (the same seeded draws), and torch's global random state is as it was. Without a
    reference there is nothing to measure: None."""
    start = rloo_config(tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path / "start")
    _, measure = _measure(start)
    assert measure() == pytest.approx(0.0, abs=1e-6)

    trained = train_rloo(
        rloo_config(
            tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path / "a", learning_rate=0.05
        )
    )
    config = rloo_config(
        trained.final_model_dir, tiny_reward_dir, prompts_file, tmp_path / "b",
        ref_model=str(tiny_llama_dir),
    )  # fmt: skip
    models, measure = _measure(config)
    torch.manual_seed(7)
    state = torch.get_rng_state()
    first = measure()
    assert torch.equal(torch.get_rng_state(), state)
    assert first is not None and first > 0
    assert measure() == first
    assert measure(dataclasses.replace(models, reference=None)) is None


def test_more_answers_per_prompt_are_the_mean_over_all_of_them(
    tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path
):
    """eval_kl_samples 3: each prompt answered 3 times in a row. Its value equals the one-answer
    measurement on the list with every prompt repeated 3 times (the same seeded draws), is
    repeatable, and 0 against itself; 0 answers per prompt is refused."""
    trained = train_rloo(
        rloo_config(
            tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path / "a", learning_rate=0.05
        )
    )
    three = rloo_config(
        trained.final_model_dir, tiny_reward_dir, prompts_file, tmp_path / "b",
        ref_model=str(tiny_llama_dir), eval_kl_samples=3,
    )  # fmt: skip
    _, measure = _measure(three)
    value = measure()
    assert value is not None and value > 0 and measure() == value
    one = dataclasses.replace(three, eval_kl_samples=1)
    _, measure_one = _measure(one, repeat=3)
    assert measure_one() == pytest.approx(value, rel=1e-6)
    itself = rloo_config(
        tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path / "c", eval_kl_samples=3
    )
    assert _measure(itself)[1]() == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="eval_kl_samples"):
        rloo_config(
            tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path / "d", eval_kl_samples=0
        )
