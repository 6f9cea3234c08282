"""LoRA through peft on a tiny Llama built from a config: what is trained, the adapter-off reference,
save and load, merge."""

import json
import math

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

from training.algorithms import dpo_loss, sequence_logprobs
from training.recipes.lora import (
    ALL_LINEAR,
    LoraSettings,
    adapter_disabled,
    lora_load,
    lora_merge,
    lora_save,
    lora_wrap,
    target_modules_for,
    trainable_parameters,
)

VOCAB = 64
INPUT_IDS = torch.tensor([[1, 5, 9, 13, 2, 7], [3, 4, 8, 16, 32, 63]])


def _config() -> LlamaConfig:
    """2 layers, hidden 32, MLP 64, 4 heads of 8, 2 KV heads (so k and v project 32 -> 16)."""
    return LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        num_labels=1,
        pad_token_id=0,
    )


def _base(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    return LlamaForCausalLM(_config()).eval()


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=INPUT_IDS).logits


def _train_adapters(model) -> None:
    """Three SGD steps of next-token loss: the adapters move away from B = 0."""
    optimiser = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    model.train()
    for _ in range(3):
        loss = model(input_ids=INPUT_IDS, labels=INPUT_IDS).loss
        loss.backward()
        optimiser.step()
        optimiser.zero_grad()
    model.eval()


def test_only_the_adapters_train_and_their_size_is_rank_times_in_plus_out():
    """Rank 4 adds r (in + out) per adapted linear layer: q, o 4 * 64 = 256; k, v 4 * 48 = 192;
    gate, up, down 4 * 96 = 384; 2048 per layer, 4096 for 2 layers. The base stays frozen."""
    base = _base()
    total_before = sum(p.numel() for p in base.parameters())
    model = lora_wrap(base, LoraSettings(rank=4, alpha=8, dropout=0.0))
    trainable, total = trainable_parameters(model)
    assert trainable == 4096
    assert total == total_before + 4096
    assert all("lora_" in name for name, p in model.named_parameters() if p.requires_grad)


def test_a_fresh_adapter_changes_nothing():
    """LoRA's B starts at zero, so the wrapped model's logits are the base model's."""
    reference = _logits(_base())
    model = lora_wrap(_base(), LoraSettings(rank=4, dropout=0.0))
    assert torch.equal(_logits(model), reference)


def test_adapter_disabled_gives_the_base_model_and_switches_back():
    """After training, the adapter-off logits are the untouched base's (DPO's reference), the
    adapter-on logits differ, and leaving the block turns the adapter back on."""
    reference = _logits(_base())
    model = lora_wrap(_base(), LoraSettings(rank=4, dropout=0.0))
    _train_adapters(model)
    trained = _logits(model)
    assert not torch.allclose(trained, reference, atol=1e-4)
    with adapter_disabled(model):
        assert torch.allclose(_logits(model), reference, atol=1e-6)
    assert torch.equal(_logits(model), trained)


def test_adapter_disabled_switches_back_after_an_exception():
    model = lora_wrap(_base(), LoraSettings(rank=4, dropout=0.0))
    _train_adapters(model)
    trained = _logits(model)
    with pytest.raises(RuntimeError), adapter_disabled(model):
        raise RuntimeError("reference pass failed")
    assert torch.equal(_logits(model), trained)


def test_save_and_load_round_trip_in_peft_format(tmp_path):
    """The saved folder is peft's (config + safetensors); loaded on a fresh copy of the same base
    it gives the trained model's logits, and trainable=True makes the adapters trainable again."""
    model = lora_wrap(_base(), LoraSettings(rank=4, alpha=8, dropout=0.0))
    _train_adapters(model)
    folder = lora_save(model, tmp_path / "adapter")
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 8
    assert set(config["target_modules"]) == set(target_modules_for("llama"))
    assert (folder / "adapter_model.safetensors").is_file()

    loaded = lora_load(_base(), folder)
    assert torch.allclose(_logits(loaded), _logits(model), atol=1e-6)
    assert trainable_parameters(loaded)[0] == 0
    assert trainable_parameters(lora_load(_base(), folder, trainable=True))[0] == 4096


def test_merge_gives_a_plain_model_with_the_same_outputs(tmp_path):
    model = lora_wrap(_base(), LoraSettings(rank=4, dropout=0.0))
    _train_adapters(model)
    expected = _logits(model)
    merged = lora_merge(model)
    assert type(merged) is LlamaForCausalLM
    assert not any("lora_" in name for name, _ in merged.named_parameters())
    assert torch.allclose(_logits(merged), expected, atol=1e-5)
    merged.save_pretrained(str(tmp_path / "merged"))
    reloaded = LlamaForCausalLM.from_pretrained(str(tmp_path / "merged")).eval()
    assert torch.allclose(_logits(reloaded), expected, atol=1e-5)


def test_a_reward_model_trains_its_score_head_in_full():
    """Sequence classification: adapters plus the whole (random) score head, hidden 32 -> 1."""
    torch.manual_seed(0)
    model = lora_wrap(
        LlamaForSequenceClassification(_config()),
        LoraSettings(rank=4, dropout=0.0),
        task="sequence_classification",
    )
    assert trainable_parameters(model)[0] == 4096 + 32


def test_target_modules_by_architecture():
    assert target_modules_for("qwen2") == (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    )
    assert target_modules_for("gpt2") == ("c_attn", "c_proj", "c_fc")
    assert target_modules_for("some_new_model") == ALL_LINEAR


def test_explicit_target_modules_are_used():
    """Only q (256) and v (192) in each of the 2 layers: 896."""
    model = lora_wrap(_base(), LoraSettings(rank=4, target_modules=("q_proj", "v_proj")))
    assert trainable_parameters(model)[0] == 2 * (256 + 192)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rank": 0}, "rank"),
        ({"alpha": 0.0}, "alpha"),
        ({"dropout": 1.0}, "dropout"),
        ({"target_modules": ()}, "target_modules"),
    ],
)
def test_bad_settings_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LoraSettings(**kwargs)


def test_functions_that_need_an_adapter_refuse_a_plain_model(tmp_path):
    base = _base()
    for call in (
        lambda: lora_save(base, tmp_path / "x"),
        lambda: lora_merge(base),
        lambda: adapter_disabled(base).__enter__(),
    ):
        with pytest.raises(ValueError, match="expected a model wrapped by lora_wrap"):
            call()
    with pytest.raises(ValueError, match="holds no LoRA adapter"):
        lora_load(base, tmp_path)
    with pytest.raises(ValueError, match="task must be"):
        lora_wrap(base, LoraSettings(), task="seq2seq")


def test_dpo_reference_from_the_disabled_adapter_starts_at_ln2_and_stays_the_base():
    """DPO with LoRA, no second model: the reference log-probs come from the same weights with the
    adapter off. At the start policy = reference, so the loss is ln 2; after the adapters train, the
    reference log-probs are still exactly the base model's."""
    completion = torch.tensor([[0, 0, 1, 1, 1, 1]])
    chosen, rejected = INPUT_IDS[:1], INPUT_IDS[1:]

    def logps(model, ids):
        return sequence_logprobs(model(input_ids=ids).logits, ids, completion)

    base = _base()
    with torch.no_grad():
        base_chosen = logps(base, chosen)
    model = lora_wrap(_base(), LoraSettings(rank=4, dropout=0.0))
    with torch.no_grad(), adapter_disabled(model):
        ref_chosen, ref_rejected = logps(model, chosen), logps(model, rejected)
    losses, _, _ = dpo_loss(logps(model, chosen), logps(model, rejected), ref_chosen, ref_rejected)
    assert losses.item() == pytest.approx(math.log(2), abs=1e-6)
    _train_adapters(model)
    with torch.no_grad(), adapter_disabled(model):
        assert torch.allclose(logps(model, chosen), base_chosen, atol=1e-6)
