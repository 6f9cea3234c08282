"""Reward models from ranked lists (Plackett-Luce) and rated responses (multi-aspect regression) on
the tiny Llama: they train, the loss falls, the aspect model's weighted sum is the reward the
scorers, RLOO and GRPO read."""

import json
import random

import pytest
import torch

from tests.helpers.recipes import StopAfter, grpo_config, rloo_config, tiny_pair_values
from tests.helpers.tiny_models import PAIRS, write_jsonl
from training.recipes import RewardModelConfig
from training.recipes.aspect_head import ASPECTS_FILE, AspectHead, parse_aspect_weights
from training.recipes.config import ConfigError, RLOOConfig
from training.recipes.data import DataError, FitLog
from training.recipes.grpo import train_grpo
from training.recipes.models import load_tokenizer
from training.recipes.ranked_data import load_ranked_lists, load_rated_responses
from training.recipes.reward_model import train_reward_model
from training.recipes.rloo import train_rloo
from training.recipes.scoring import (
    RewardScorer,
    load_member_scorer,
    load_sequence_classifier,
    reward_scores,
)

WEIGHTS = "helpfulness=0.5, correctness=0.5, verbosity=-1"


def _metrics(output_dir):
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]


def _config(model_dir, data, output_dir, **overrides) -> RewardModelConfig:
    """The reward-model recipe tests' quick run: batch 3, 8 epochs, a quarter held out."""
    values = {"batch_size": 3, "epochs": 8, "max_length": 64, "learning_rate": 3e-3}
    return RewardModelConfig(
        **tiny_pair_values(
            model_dir, data, output_dir, eval_fraction=0.25, **{**values, **overrides}
        )
    )


def _lists_file(path):
    """Each tiny pair as a list of three, shuffled: the chosen answer 1st, a dodge 2nd, the
    rejected answer 3rd; one list ties the dodge with the rejected answer, and one all-tied list
    (skipped: no order)."""
    shuffle = random.Random(0).shuffle
    rows = []
    for number, (prompt, chosen, rejected) in enumerate(PAIRS):
        ranked = [(chosen, 1), ("I would rather not say.", 2), (rejected, 2 if number == 3 else 3)]
        shuffle(ranked)
        rows.append(
            {"prompt": prompt, "responses": [r for r, _ in ranked], "ranks": [k for _, k in ranked]}
        )
    rows.append({"prompt": "Tied?", "responses": ["Yes.", "No."], "ranks": [1, 1]})
    return write_jsonl(path, rows)


def _ratings_file(path):
    """Two rated rows per tiny pair on a 1-5 scale: the chosen answer helpful and correct, the
    rejected one not; verbosity rated on half the rows only."""
    rows = []
    for number, (prompt, chosen, rejected) in enumerate(PAIRS):
        verbose = {"verbosity": 2} if number % 2 else {"verbosity": None}
        rows.append(
            {
                "prompt": prompt,
                "response": chosen,
                "scale": [1, 5],
                "aspects": {"helpfulness": 5, "correctness": 5, **verbose},
            }
        )
        rows.append({"prompt": prompt, "response": rejected, "scale": [1, 5],
                     "aspects": {"helpfulness": 1, "correctness": 2, **verbose}})  # fmt: skip
    return write_jsonl(path, rows)


@pytest.fixture(scope="module")
def aspect_reward_dir(tiny_llama_dir, tmp_path_factory):
    """A tiny three-aspect reward model trained for a few steps (weights ``WEIGHTS``)."""
    folder = tmp_path_factory.mktemp("aspect-rm")
    data = _ratings_file(folder / "ratings.jsonl")
    result = train_reward_model(
        _config(tiny_llama_dir, data, folder / "run", loss="aspect_regression",
                aspect_weights=WEIGHTS, epochs=2)
    )  # fmt: skip
    return folder / "run" / "final", result


def test_plackett_luce_reward_model_learns_the_rankings(tiny_llama_dir, tmp_path):
    """8 lists of 3 (the all-tied one skipped), 6 to train on: the Plackett-Luce loss starts near
    log 3! (an untrained head scores the three alike) and falls (about 1.9 -> 1.2 for the first
    and last three of 16 steps); the model is a plain one-output reward model with held-out pair
    accuracy."""
    data = _lists_file(tmp_path / "lists.jsonl")
    result = train_reward_model(
        _config(tiny_llama_dir, data, tmp_path / "out", loss="plackett_luce")
    )
    losses = [row["loss"] for row in _metrics(tmp_path / "out") if "loss" in row]
    # log 3! = 1.79 for an untied list; the list with a tie costs log 3 + 2 log 2 = 2.48.
    assert 1.5 < sum(losses[:3]) / 3 < 2.5
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.3
    summary = result.summary
    assert summary["lists"] == 8 and summary["skipped_all_tied"] == 1
    assert (summary["train_lists"], summary["eval_lists"]) == (6, 2)
    assert 0.0 <= summary["eval/accuracy"] <= 1.0 and summary["eval/loss"] > 0
    assert not (tmp_path / "out" / "final" / ASPECTS_FILE).exists()
    from transformers import AutoConfig

    assert AutoConfig.from_pretrained(result.final_model_dir).num_labels == 1


def test_aspect_regression_trains_and_saves_its_aspects(
    aspect_reward_dir, tiny_llama_dir, tmp_path
):
    """One output per aspect seen; the masked MSE on the normalised ratings falls over 8 epochs (32
    steps: about 0.26 -> 0.13 for the first and last three);
    aspects.json records the aspects in output order and the weights of the weighted sum."""
    data = _ratings_file(tmp_path / "ratings.jsonl")
    result = train_reward_model(
        _config(tiny_llama_dir, data, tmp_path / "out", loss="aspect_regression")
    )
    losses = [row["loss"] for row in _metrics(tmp_path / "out") if "loss" in row]
    assert sum(losses[-3:]) < 0.75 * sum(losses[:3])
    assert result.summary["rows"] == 16 and "eval/mae" in result.summary
    head = AspectHead.read(result.final_model_dir)
    assert head.aspects == ("helpfulness", "correctness", "verbosity")
    assert head.weights == pytest.approx((1 / 3, 1 / 3, 1 / 3))  # no aspect_weights: 1 / A each
    final, _ = aspect_reward_dir
    assert AspectHead.read(final).weights == (0.5, 0.5, -1.0)


def test_aspect_regression_cancel_and_resume_is_exact(tiny_llama_dir, tmp_path):
    """Cancelled after step 2 and resumed from its checkpoint: the same weights as 4 uninterrupted
    steps."""
    from safetensors.torch import load_file

    data = _ratings_file(tmp_path / "ratings.jsonl")
    settings = {"loss": "aspect_regression", "max_steps": 4, "checkpoint_every": 2}
    straight = train_reward_model(_config(tiny_llama_dir, data, tmp_path / "a", **settings))
    config = _config(tiny_llama_dir, data, tmp_path / "b", **settings)
    assert train_reward_model(config, StopAfter(2)).status == "cancelled"
    resumed = train_reward_model(config)
    a = load_file(f"{straight.final_model_dir}/model.safetensors")
    b = load_file(f"{resumed.final_model_dir}/model.safetensors")
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_the_scorer_returns_the_weighted_sum_of_the_aspects(aspect_reward_dir):
    """load_member_scorer (the online recipes' loader) and reward_scores (monitoring's) give
    sum_a w_a * output_a with the saved weights, or with weights given at load time."""
    final, _ = aspect_reward_dir
    tokenizer = load_tokenizer(final)
    raw = load_sequence_classifier(final, device=torch.device("cpu"), tokenizer=tokenizer,
                                   packing=False, num_labels=3).eval()  # fmt: skip
    plain = RewardScorer(raw, tokenizer, max_length=64, prompt_budget=32)
    prompts = [(("user", p),) for p, _, _ in PAIRS[:3]]
    answers = [c for _, c, _ in PAIRS[:3]]
    with torch.no_grad():
        outputs = plain.score_members(
            [plain.encode(p, a) for p, a in zip(prompts, answers, strict=True)]
        )
    assert outputs.shape == (3, 3)
    expected = 0.5 * outputs[0] + 0.5 * outputs[1] - outputs[2]

    def scorer(weights=None):
        return load_member_scorer(
            final, device=torch.device("cpu"), num_labels=1, max_length=64, prompt_budget=32,
            packing=False, fit=FitLog("samples"), prompt_clusters=dict, aspect_weights=weights,
        )  # fmt: skip

    saved = scorer()
    assert saved.n_members == 1
    with torch.no_grad():
        rewards = saved.score_members(
            [saved.encode(p, a) for p, a in zip(prompts, answers, strict=True)]
        )
    torch.testing.assert_close(rewards[0], expected, rtol=1e-4, atol=1e-5)
    helpful = scorer("helpfulness=2")
    with torch.no_grad():
        only = helpful.score([helpful.encode(p, a) for p, a in zip(prompts, answers, strict=True)])
    torch.testing.assert_close(only, 2 * outputs[0], rtol=1e-4, atol=1e-5)
    conversations = [[{"role": "user", "content": p}] for p, _, _ in PAIRS[:3]]
    monitored = reward_scores(final, conversations, answers, max_length=64)
    assert monitored == pytest.approx(expected.tolist(), rel=1e-4, abs=1e-5)
    with pytest.raises(ValueError, match="not among the model's aspects"):
        scorer("length=1")


def test_rloo_and_grpo_train_with_a_multi_aspect_reward_model(
    aspect_reward_dir, tiny_llama_dir, prompts_file, tmp_path
):
    """RLOO scores its samples with the weighted sum (here helpfulness alone), GRPO with the saved
    weights beside a verifiable reward; both complete their steps."""
    final, _ = aspect_reward_dir
    rloo = train_rloo(
        rloo_config(tiny_llama_dir, final, prompts_file, tmp_path / "rloo",
                    reward_aspect_weights="helpfulness=1", max_steps=1)
    )  # fmt: skip
    assert rloo.status == "completed"
    assert "reward/score_mean" in _metrics(tmp_path / "rloo")[0]
    grpo = train_grpo(
        grpo_config(tiny_llama_dir, prompts_file, tmp_path / "grpo", reward_model=str(final),
                    reward_model_weight=0.5, max_steps=1)
    )  # fmt: skip
    assert grpo.status == "completed"
    assert "reward/reward_model_mean" in _metrics(tmp_path / "grpo")[0]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"loss": "plackett_luce", "ensemble_size": 2}, "ensemble_size"),
        ({"loss": "aspect_regression", "annotator_aware": True}, "annotator_aware"),
        ({"loss": "plackett_luce", "use_margin": True}, "use_margin"),
        ({"loss": "plackett_luce", "warm_start": "/elsewhere"}, "warm_start"),
        ({"aspect_weights": "helpfulness=1"}, "aspect_weights"),
        ({"loss": "aspect_regression", "aspect_weights": "helpfulness"}, "aspect_weights"),
        ({"loss": "aspect_regression", "aspect_weights": "a=1, a=2"}, "aspect_weights"),
        ({"loss": "listwise"}, "loss"),
    ],
)
def test_reward_model_settings_that_cannot_go_together(overrides, field, tmp_path):
    with pytest.raises(ConfigError) as raised:
        _config("m", "d.jsonl", tmp_path, **overrides)
    assert raised.value.field == field


def test_online_aspect_weights_are_checked_with_the_settings(tmp_path):
    with pytest.raises(ConfigError) as raised:
        RLOOConfig(model="m", reward_model="r", data="d", output_dir=str(tmp_path),
                   reward_aspect_weights="helpfulness=lots")  # fmt: skip
    assert raised.value.field == "reward_aspect_weights"
    assert parse_aspect_weights(" a = 1 , b=-0.5") == {"a": 1.0, "b": -0.5}


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"prompt": "p", "responses": ["a", "b"], "ranks": [1]}, "one rank per response"),
        ({"prompt": "p", "responses": ["a"], "ranks": [1]}, "at least 2"),
        ({"prompt": "p", "responses": ["a", "b"], "ranks": [1, "x"]}, "finite numbers"),
    ],
)
def test_bad_ranked_rows_name_their_line(row, message, tmp_path):
    data = write_jsonl(
        tmp_path / "lists.jsonl", [{"prompt": "ok", "responses": ["a", "b"], "ranks": [1, 2]}, row]
    )
    with pytest.raises(DataError, match=f"line 2: .*{message}"):
        load_ranked_lists(data)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            {"prompt": "p", "response": "r", "aspects": {"h": 6}, "scale": [1, 5]},
            "not on the scale",
        ),
        ({"prompt": "p", "response": "r", "aspects": {"h": 3}}, "scale must be"),
        ({"prompt": "p", "response": "r", "aspects": {"h": 3}, "scale": [5, 1]}, "low < high"),
        ({"prompt": "p", "response": "r", "aspects": [3], "scale": [1, 5]}, "aspects must be"),
    ],
)
def test_bad_rated_rows_name_their_line(row, message, tmp_path):
    good = {"prompt": "p", "response": "r", "aspects": {"h": 3}, "scale": [1, 5]}
    data = write_jsonl(tmp_path / "ratings.jsonl", [good, row])
    with pytest.raises(DataError, match=f"line 2: .*{message}"):
        load_rated_responses(data)


def test_rated_rows_normalise_each_rows_scale(tmp_path):
    """Ratings 4 on [1, 5] and 7 on [0, 10] normalise to 0.75 and 0.7; an unrated aspect is absent."""
    data = write_jsonl(tmp_path / "ratings.jsonl", [
        {"prompt": "p", "response": "r", "aspects": {"h": 4, "v": None}, "scale": [1, 5]},
        {"prompt": "p", "response": "s", "aspects": {"v": 7}, "scale": [0, 10]},
    ])  # fmt: skip
    rows, aspects = load_rated_responses(data)
    assert aspects == ("h", "v")
    assert rows[0].targets == {"h": 0.75} and rows[1].targets == {"v": pytest.approx(0.7)}
