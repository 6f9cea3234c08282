"""Slow: a few DPO, SimPO, ORPO and KTO steps on the real SmolLM2-135M-Instruct and a reward model
on the real MiniLM, each on one fixed batch, so the loss must fall; two GRPO steps on SmolLM2 with
verifiable rewards and the KL term. CI runs these after ``fetch_models``."""

import json

import pytest

from tests.helpers.tiny_models import PAIRS, write_jsonl
from training.recipes import DPOConfig, RewardModelConfig, train_dpo, train_reward_model

pytestmark = pytest.mark.slow


def _losses(output_dir):
    rows = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    return [row["loss"] for row in rows if "loss" in row]


def test_dpo_on_smollm2_lowers_the_loss_on_a_fixed_batch(tmp_path):
    """4 pairs, batch 4, 3 epochs = the same batch 3 times: the first loss is ln 2 (policy =
    reference) and the third is lower."""
    from common.model_registry import model_path

    rows = [{"prompt": p, "chosen": c, "rejected": r} for p, c, r in PAIRS[:4]]
    data = write_jsonl(tmp_path / "pairs.jsonl", rows)
    result = train_dpo(
        DPOConfig(
            model=str(model_path("smollm2-135m-instruct")),
            data=str(data),
            output_dir=str(tmp_path / "dpo"),
            batch_size=4,
            epochs=3,
            max_length=128,
            learning_rate=2e-5,
            beta=0.1,
            lr_scheduler="constant",
            checkpoint_every=0,
            device="cpu",
        )
    )
    losses = _losses(tmp_path / "dpo")
    assert result.status == "completed" and len(losses) == 3
    assert losses[0] == pytest.approx(0.6931, abs=1e-3)
    assert losses[-1] < losses[0] - 0.01


def test_reward_model_on_minilm_lowers_the_loss_on_a_fixed_batch(tmp_path):
    """8 pairs in one batch, 6 epochs: the Bradley-Terry loss falls from about ln 2."""
    from transformers import AutoModelForSequenceClassification

    from common.model_registry import model_path

    rows = [{"prompt": p, "chosen": c, "rejected": r} for p, c, r in PAIRS]
    data = write_jsonl(tmp_path / "pairs.jsonl", rows)
    result = train_reward_model(
        RewardModelConfig(
            model=str(model_path("all-minilm-l6-v2")),
            data=str(data),
            output_dir=str(tmp_path / "rm"),
            batch_size=8,
            epochs=6,
            max_length=128,
            learning_rate=1e-4,
            lr_scheduler="constant",
            eval_fraction=0.0,
            checkpoint_every=0,
            device="cpu",
        )
    )
    losses = _losses(tmp_path / "rm")
    assert result.status == "completed" and len(losses) == 6
    assert losses[-1] < losses[0] - 0.05
    AutoModelForSequenceClassification.from_pretrained(result.final_model_dir)


@pytest.mark.parametrize(("kind", "values"), [("simpo", {"beta": 2.0}), ("orpo", {})])
def test_reference_free_kinds_on_smollm2_lower_the_loss_on_a_fixed_batch(kind, values, tmp_path):
    """SimPO and ORPO, 4 pairs, the same batch twice: no reference model, and the second loss is
    lower than the first."""
    from common.model_registry import model_path
    from training.recipes import config_class, run_training

    rows = [{"prompt": p, "chosen": c, "rejected": r} for p, c, r in PAIRS[:4]]
    data = write_jsonl(tmp_path / "pairs.jsonl", rows)
    config = config_class(kind)(
        model=str(model_path("smollm2-135m-instruct")),
        data=str(data),
        output_dir=str(tmp_path / kind),
        batch_size=4,
        epochs=2,
        max_length=128,
        learning_rate=2e-5,
        lr_scheduler="constant",
        checkpoint_every=0,
        device="cpu",
        **values,
    )
    result = run_training(config)
    losses = _losses(tmp_path / kind)
    assert result.status == "completed" and len(losses) == 2
    assert result.summary["reference_model"] is None
    assert losses[-1] < losses[0]


def test_kto_on_smollm2_lowers_the_loss_on_a_fixed_batch(tmp_path):
    """KTO on 4 pairs split into 8 examples, batch 8, 3 epochs = the same batch 3 times: the first
    loss is 1/2 (policy = reference: each example's loss is lambda (1 - sigmoid(0)), lambda = 1
    for balanced data) with a KL estimate of 0, and the third is lower with the rewards apart."""
    from common.model_registry import model_path
    from training.recipes import KTOConfig, run_training

    rows = [{"prompt": p, "chosen": c, "rejected": r} for p, c, r in PAIRS[:4]]
    data = write_jsonl(tmp_path / "pairs.jsonl", rows)
    result = run_training(
        KTOConfig(
            model=str(model_path("smollm2-135m-instruct")),
            data=str(data),
            output_dir=str(tmp_path / "kto"),
            batch_size=8,
            epochs=3,
            max_length=128,
            learning_rate=2e-5,
            beta=0.1,
            lr_scheduler="constant",
            checkpoint_every=0,
            device="cpu",
        )
    )
    rows = [json.loads(line) for line in (tmp_path / "kto" / "metrics.jsonl").open()]
    assert result.status == "completed" and len(rows) == 3
    assert rows[0]["loss"] == pytest.approx(0.5, abs=1e-6) and rows[0]["kl_estimate"] == 0.0
    assert rows[-1]["loss"] < rows[0]["loss"] - 0.005
    assert rows[-1]["rewards/margin"] > 0


def test_grpo_on_smollm2_runs_two_steps_with_verifiable_rewards_and_the_kl_term(tmp_path):
    """2 steps of 2 prompts x 4 samples (24 new tokens) scored by the length reward and an exact
    answer check against each prompt's ``answer``, with the k3 KL to the reference: the KL is 0
    on step 1 (policy = reference) and positive on step 2, every component is logged, the loss
    and gradient norm are finite and the policy's weights moved."""
    import math

    import torch
    from safetensors.torch import load_file

    from common.model_registry import model_path
    from training.recipes import GRPOConfig, train_grpo

    rows = [{"prompt": "What is 2 + 2? Answer with the number only.", "answer": "4"},
            {"prompt": "What is 3 + 4? Answer with the number only.", "answer": "7"}]  # fmt: skip
    model = model_path("smollm2-135m-instruct")
    result = train_grpo(
        GRPOConfig(
            model=str(model), data=str(write_jsonl(tmp_path / "maths.jsonl", rows)),
            output_dir=str(tmp_path / "grpo"), batch_size=2, group_size=4, max_new_tokens=24,
            max_length=256, epochs=2, learning_rate=1e-5, kl_coef=0.04, eval_prompts=0,
            rewards=('length_penalty {"target": 20}', "exact_answer"), checkpoint_every=0,
            device="cpu",
        )
    )  # fmt: skip
    logged = [
        json.loads(line) for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()
    ]
    assert result.status == "completed" and [r["step"] for r in logged] == [1, 2]
    assert logged[0]["kl"] == pytest.approx(0.0, abs=1e-5) and logged[1]["kl"] > 0
    for row in logged:
        assert {"reward/length_penalty_mean", "reward/exact_answer_mean"} <= row.keys()
        assert math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"])
    before = load_file(str(model / "model.safetensors"))
    after = load_file(f"{result.final_model_dir}/model.safetensors")
    assert any(not torch.equal(before[name], after[name]) for name in after if name in before)
