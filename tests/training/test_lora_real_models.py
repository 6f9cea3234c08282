"""Slow: LoRA DPO on the real SmolLM2-135M-Instruct (adapters on every attention and MLP
projection). CI runs it after ``fetch_models``."""

import json

import pytest
import torch

from tests.helpers.tiny_models import PAIRS, write_jsonl
from training.recipes import DPOConfig, train_dpo

pytestmark = pytest.mark.slow


def test_lora_dpo_on_smollm2_lowers_the_loss_and_merges_to_the_same_logits(tmp_path):
    """4 pairs, batch 4, 3 epochs of the same batch with rank 16: the first loss is ln 2 (a fresh
    adapter changes nothing), the third is lower; the adapters cover the 7 projections of each of
    the 30 layers, and final/merged/ gives the logits of base + adapters through plain peft."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from common.model_registry import model_path

    base_dir = model_path("smollm2-135m-instruct")
    data = write_jsonl(
        tmp_path / "pairs.jsonl",
        [{"prompt": p, "chosen": c, "rejected": r} for p, c, r in PAIRS[:4]],
    )
    result = train_dpo(
        DPOConfig(
            model=str(base_dir),
            data=str(data),
            output_dir=str(tmp_path / "dpo"),
            batch_size=4,
            epochs=3,
            max_length=128,
            learning_rate=1e-3,
            lr_scheduler="constant",
            checkpoint_every=0,
            device="cpu",
            lora_rank=16,
            merge_lora=True,
        )
    )
    rows = [
        json.loads(line) for line in (tmp_path / "dpo" / "metrics.jsonl").read_text().splitlines()
    ]
    losses = [row["loss"] for row in rows]
    assert result.status == "completed" and len(losses) == 3
    assert losses[0] == pytest.approx(0.6931, abs=1e-3)
    assert losses[-1] < losses[0] - 0.01
    adapter = json.loads((tmp_path / "dpo" / "final" / "adapter_config.json").read_text())
    assert sorted(adapter["target_modules"]) == sorted(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    ids = torch.tensor([[1, 504, 2272, 314, 260, 3575, 30]])
    with torch.no_grad():
        merged = AutoModelForCausalLM.from_pretrained(result.summary["merged_model_dir"]).eval()
        peft = PeftModel.from_pretrained(
            AutoModelForCausalLM.from_pretrained(str(base_dir)), result.final_model_dir
        ).eval()
        torch.testing.assert_close(
            merged(input_ids=ids).logits, peft(input_ids=ids).logits, atol=2e-4, rtol=1e-4
        )
