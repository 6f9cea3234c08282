"""SimPO and ORPO recipes on the tiny Llama: no reference model, the first step's loss where chosen
and rejected are the same text (SimPO softplus(gamma), ln 2 at gamma 0; ORPO NLL + lambda ln 2), the
loss falls over a few steps, and a cancelled run resumes to the same weights as an uninterrupted one."""

import json
import math

import pytest
import torch

from tests.helpers.recipes import StopAfter, tiny_pair_values
from tests.helpers.tiny_models import PAIRS, write_jsonl
from training.recipes import ORPOConfig, SimPOConfig, run_training
from training.recipes.config import ConfigError
from training.recipes.kinds import config_from_dict

CLASSES = {"simpo": SimPOConfig, "orpo": ORPOConfig}


def _config(kind, tiny_llama_dir, pairs_file, output_dir, **overrides):
    return CLASSES[kind](**tiny_pair_values(tiny_llama_dir, pairs_file, output_dir, **overrides))


def _metrics(output_dir):
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]


def test_defaults_and_refusals():
    """Defaults as PIPELINE.md (SimPO beta 2.0 gamma 0.5, ORPO lambda 0.1); impossible values are
    refused naming their field; the config round-trips through its dict."""
    common = {"model": "m", "data": "d.jsonl", "output_dir": "o"}
    simpo, orpo = SimPOConfig(**common), ORPOConfig(**common)
    assert (simpo.kind, simpo.beta, simpo.gamma) == ("simpo", 2.0, 0.5)
    assert (orpo.kind, orpo.orpo_lambda) == ("orpo", 0.1)
    assert config_from_dict(simpo.to_dict()) == simpo
    assert config_from_dict(orpo.to_dict()) == orpo
    for cls, field, value in [
        (SimPOConfig, "beta", 0.0),
        (SimPOConfig, "gamma", -0.1),
        (SimPOConfig, "label_smoothing", 0.5),
        (ORPOConfig, "orpo_lambda", -1.0),
    ]:
        with pytest.raises(ConfigError) as error:
            cls(**common, **{field: value})
        assert error.value.field == field


@pytest.mark.parametrize(
    ("kind", "overrides"), [("simpo", {"gamma": 0.0}), ("simpo", {}), ("orpo", {})]
)
def test_first_step_loss_at_identical_chosen_and_rejected(
    kind, overrides, tiny_llama_dir, tmp_path
):
    """Chosen = rejected: equal average log-probs, so SimPO's loss is softplus(gamma) (ln 2 at
    gamma 0) and ORPO's odds-ratio term is ln 2 (its loss: the chosen NLL + lambda ln 2)."""
    same = write_jsonl(
        tmp_path / "same.jsonl", [{"prompt": p, "chosen": c, "rejected": c} for p, c, _ in PAIRS]
    )
    out = tmp_path / "run"
    run_training(_config(kind, tiny_llama_dir, same, out, max_steps=1, **overrides))
    first = _metrics(out)[0]
    assert first["rewards/margin"] == pytest.approx(0.0, abs=1e-5)
    if kind == "simpo":
        gamma = overrides.get("gamma", 0.5)
        assert first["loss"] == pytest.approx(math.log1p(math.exp(gamma)), rel=1e-5)
    else:
        assert first["odds_ratio_loss"] == pytest.approx(math.log(2), rel=1e-5)
        assert first["loss"] == pytest.approx(first["nll"] + 0.1 * math.log(2), rel=1e-5)


@pytest.mark.parametrize("kind", ["simpo", "orpo"])
def test_training_lowers_the_loss(kind, tiny_llama_dir, pairs_file, tmp_path):
    """Ten steps at a high learning rate on 8 pairs lower the loss and separate the rewards; the
    run folder holds the config, the summary (no reference model) and the final model."""
    out = tmp_path / "run"
    result = run_training(_config(kind, tiny_llama_dir, pairs_file, out, epochs=5))
    metrics = _metrics(out)
    assert result.status == "completed" and result.steps == 10
    assert metrics[-1]["loss"] < metrics[0]["loss"] - 0.05
    assert metrics[-1]["rewards/margin"] > metrics[0]["rewards/margin"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["kind"] == kind and summary["reference_model"] is None
    assert summary["pairs_trained"] == 40 and summary["pairs_per_second"] > 0
    assert json.loads((out / "config.json").read_text())["kind"] == kind
    assert (out / "final" / "model.safetensors").is_file()


@pytest.mark.parametrize("kind", ["simpo", "orpo"])
def test_cancel_then_resume_continues_exactly(kind, tiny_llama_dir, pairs_file, tmp_path):
    """4 steps in one go, or cancelled after step 2 and resumed: identical final weights and the
    same losses at steps 3 and 4."""
    from safetensors.torch import load_file

    straight_dir = tmp_path / "straight"
    straight = run_training(
        _config(kind, tiny_llama_dir, pairs_file, straight_dir, max_steps=4, batch_size=2)
    )
    out = tmp_path / "interrupted"
    config = _config(kind, tiny_llama_dir, pairs_file, out, max_steps=4, batch_size=2)
    cancelled = run_training(config, [StopAfter(2)])
    assert cancelled.status == "cancelled" and cancelled.steps == 2
    resumed = run_training(config)
    assert resumed.status == "completed" and resumed.steps == 4

    a = load_file(f"{straight.final_model_dir}/model.safetensors")
    b = load_file(f"{resumed.final_model_dir}/model.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert [row["step"] for row in _metrics(out)] == [1, 2, 3, 4]
    assert [row["loss"] for row in _metrics(out)] == [row["loss"] for row in _metrics(straight_dir)]
