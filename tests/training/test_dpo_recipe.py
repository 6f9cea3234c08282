"""The DPO recipe on a tiny Llama: correctness invariants, the reference cache, checkpoints and
exact resume."""

import json
import math

import pytest
import torch

from tests.helpers.recipes import StopAfter, tiny_pair_values
from tests.helpers.tiny_models import PAIRS, write_jsonl
from training.algorithms import sequence_logprobs
from training.recipes import DPOConfig, train_dpo
from training.recipes.data import ChatEncoder, load_preference_pairs
from training.recipes.dpo import _dpo_micro_batch, compute_reference_logps
from training.recipes.models import load_causal_lm, load_tokenizer
from training.recipes.packing import (
    TokenizedSequence,
    build_batch,
    last_hidden_states,
    sequence_completion_logprobs,
)

CPU = torch.device("cpu")


def _config(tiny_llama_dir, pairs_file, output_dir, **overrides) -> DPOConfig:
    return DPOConfig(**tiny_pair_values(tiny_llama_dir, pairs_file, output_dir, **overrides))


def _encoded(tiny_llama_dir, pairs_file):
    tokenizer = load_tokenizer(tiny_llama_dir)
    encoder = ChatEncoder(tokenizer, max_length=128, prompt_budget=64)
    pairs = [
        (encoder.encode(p.prompt, p.chosen), encoder.encode(p.prompt, p.rejected))
        for p in load_preference_pairs(pairs_file)
    ]
    return tokenizer, pairs


def _metrics(output_dir):
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]


def test_packed_shared_padded_and_full_logits_agree(tiny_llama_dir, pairs_file):
    """Four ways to score the same 16 completions give the same numbers and gradients: the packed row
    (per-sequence attention), the packed row holding each pair's prompt once, right padding, and plain
    full logits through ``sequence_logprobs``."""
    tokenizer, pairs = _encoded(tiny_llama_dir, pairs_file)
    sequences = [c for c, _ in pairs] + [r for _, r in pairs]
    model, packable = load_causal_lm(tiny_llama_dir, device=CPU)
    assert packable

    results = []
    for packed, share in ((True, False), (True, True), (False, False)):
        batch = build_batch(
            sequences, packed=packed, pad_token_id=tokenizer.pad_token_id, share_prompts=share
        )
        logps = sequence_completion_logprobs(model, batch)
        logps.sum().backward()
        results.append((logps.detach(), model.model.embed_tokens.weight.grad.clone(), batch))
        model.zero_grad()
    unshared, shared = results[0][2], results[1][2]
    prompt_tokens = sum(c.prompt_length for c, _ in pairs)
    assert shared.n_tokens == unshared.n_tokens - prompt_tokens

    padded = build_batch(sequences, packed=False, pad_token_id=tokenizer.pad_token_id)
    mask = torch.zeros_like(padded.input_ids)
    for row, seq in enumerate(sequences):
        mask[row, seq.prompt_length : len(seq.input_ids)] = 1
    logits = model(input_ids=padded.input_ids, attention_mask=padded.attention_mask).logits
    plain = sequence_logprobs(logits, padded.input_ids, mask)
    plain.sum().backward()

    for logps, grad, _ in results:
        assert torch.allclose(logps, plain.detach(), atol=1e-5)
        assert torch.allclose(grad, model.model.embed_tokens.weight.grad, atol=1e-5)


def test_prompt_sharing_with_k_samples_of_unequal_length(tiny_llama_dir):
    """Three samples of one prompt (lengths 5, 1 and 0 tokens) and one lone sequence: shared and
    unshared layouts score every completion alike, and the reward heads' last positions agree."""
    model, _ = load_causal_lm(tiny_llama_dir, device=CPU)
    prompt = (5, 6, 7, 8)
    sequences = [
        TokenizedSequence((*prompt, 9, 10, 11, 12, 13), 4),
        TokenizedSequence((*prompt, 20), 4),
        TokenizedSequence(prompt, 4),
        TokenizedSequence((30, 31, 32), 1),
    ]
    got = []
    with torch.no_grad():
        for share in (False, True):
            batch = build_batch(sequences, packed=True, pad_token_id=0, share_prompts=share)
            hidden = last_hidden_states(model, batch)
            got.append((sequence_completion_logprobs(model, batch), hidden[batch.last_index]))
    assert torch.allclose(got[0][0], got[1][0], atol=1e-5)
    assert torch.allclose(got[0][1], got[1][1], atol=1e-5)


def test_gradient_accumulation_1x8_equals_8x1(tiny_llama_dir, pairs_file):
    """One micro-batch of 8 pairs and 8 micro-batches of 1, each loss divided by the step's 8 pairs,
    leave the same gradient on every parameter."""
    tokenizer, pairs = _encoded(tiny_llama_dir, pairs_file)
    model, packed = load_causal_lm(tiny_llama_dir, device=CPU)
    reference = compute_reference_logps(
        model,
        pairs,
        [[list(range(8))]],
        packed=packed,
        pad_token_id=tokenizer.pad_token_id,
        device=CPU,
        bf16=False,
    )
    reference.chosen -= 0.5  # a reference unlike the policy, so the loss has a non-trivial gradient
    config = _config(tiny_llama_dir, pairs_file, "unused", batch_size=8)
    grads = []
    for groups in ([list(range(8))], [[i] for i in range(8)]):
        for group in groups:
            _dpo_micro_batch(
                model,
                pairs,
                group,
                reference,
                config,
                step_pairs=8,
                packed=packed,
                pad_token_id=tokenizer.pad_token_id,
                device=CPU,
            )
        grads.append([p.grad.clone() for p in model.parameters()])
        model.zero_grad()
    for whole, accumulated in zip(*grads, strict=True):
        assert torch.allclose(whole, accumulated, atol=1e-6)


def test_first_step_loss_is_ln2_and_training_lowers_it(tiny_llama_dir, pairs_file, tmp_path):
    """Policy = reference at step 1: loss ln 2, rewards 0. Ten steps at a high learning rate on 8
    pairs lower the loss; the run folder holds the config, metrics, summary and a final model that
    ``from_pretrained`` loads without this process's attention registration."""
    from transformers import AutoModelForCausalLM

    out = tmp_path / "run"
    result = train_dpo(_config(tiny_llama_dir, pairs_file, out, epochs=5, beta=0.5))
    metrics = _metrics(out)
    assert result.status == "completed" and result.steps == 10
    assert metrics[0]["loss"] == pytest.approx(math.log(2), abs=1e-5)
    assert metrics[0]["rewards/chosen"] == pytest.approx(0.0, abs=1e-5)
    assert metrics[-1]["loss"] < metrics[0]["loss"] - 0.05
    assert metrics[-1]["rewards/accuracy"] > 0.5

    saved = json.loads((out / "config.json").read_text())
    assert saved["kind"] == "dpo" and saved["beta"] == 0.5
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pairs_per_second"] > 0 and summary["tokens_per_second"] > 0
    assert "concord_varlen" not in (out / "final" / "config.json").read_text()
    AutoModelForCausalLM.from_pretrained(result.final_model_dir)


@pytest.mark.parametrize(("loss_type", "first_loss"), [("ipo", 25.0), ("hinge", 1.0)])
def test_variants_start_from_their_value_at_the_reference(
    tiny_llama_dir, pairs_file, tmp_path, loss_type, first_loss
):
    """At h = 0 with beta 0.1: IPO costs (0 - 1/(2 * 0.1))^2 = 25 and hinge max(0, 1 - 0) = 1."""
    train_dpo(_config(tiny_llama_dir, pairs_file, tmp_path, max_steps=1, loss_type=loss_type))
    assert _metrics(tmp_path)[0]["loss"] == pytest.approx(first_loss, rel=1e-5)


def test_bf16_autocast_and_gradient_checkpointing_run(tiny_llama_dir, pairs_file, tmp_path):
    """bf16 autocast and activation recomputation: the first loss is still ln 2 (reference computed
    under the same precision) and training steps complete with a finite loss."""
    train_dpo(
        _config(
            tiny_llama_dir,
            pairs_file,
            tmp_path,
            max_steps=2,
            bf16=True,
            gradient_checkpointing=True,
        )
    )
    metrics = _metrics(tmp_path)
    assert metrics[0]["loss"] == pytest.approx(math.log(2), abs=1e-4)
    assert math.isfinite(metrics[1]["loss"])


def test_reference_logps_are_cached_by_data_and_model(tiny_llama_dir, pairs_file, tmp_path):
    """A second run on the same data and reference reads the cache; other data does not."""
    cache = tmp_path / "cache"
    first = train_dpo(
        _config(
            tiny_llama_dir, pairs_file, tmp_path / "a", max_steps=1, reference_cache_dir=str(cache)
        )
    )
    second = train_dpo(
        _config(
            tiny_llama_dir, pairs_file, tmp_path / "b", max_steps=1, reference_cache_dir=str(cache)
        )
    )
    other_data = write_jsonl(
        tmp_path / "other.jsonl", [{"prompt": p, "chosen": r, "rejected": c} for p, c, r in PAIRS]
    )
    third = train_dpo(
        _config(
            tiny_llama_dir, other_data, tmp_path / "c", max_steps=1, reference_cache_dir=str(cache)
        )
    )
    assert not first.summary["reference_cache_hit"]
    assert second.summary["reference_cache_hit"]
    assert not third.summary["reference_cache_hit"]
    assert len(list(cache.glob("*.pt"))) == 2


@pytest.mark.parametrize("micro_batch_size", [None, 2])
def test_first_step_fills_its_reference_values_equal_to_a_full_reference_pass(
    tiny_llama_dir, pairs_file, tmp_path, micro_batch_size
):
    """With the starting policy as reference, the first step's pairs take their reference values
    from that step's own forward; the cache then holds what a separate pass over every pair gives
    (an explicit reference model with the same weights)."""
    from training.recipes.dpo import ReferenceLogps

    runs = {}
    for name, ref_model in (("filled", None), ("full", str(tiny_llama_dir))):
        cache = tmp_path / f"cache-{name}"
        result = train_dpo(
            _config(
                tiny_llama_dir,
                pairs_file,
                tmp_path / name,
                max_steps=2,
                ref_model=ref_model,
                micro_batch_size=micro_batch_size,
                reference_cache_dir=str(cache),
            )
        )
        runs[name] = (result, ReferenceLogps.load(next(cache.glob("*.pt")), 8))
    (filled_run, filled), (full_run, full) = runs["filled"], runs["full"]
    for field in ("chosen", "rejected"):
        assert torch.allclose(getattr(filled, field), getattr(full, field), atol=1e-4)
        assert torch.equal(getattr(filled, f"{field}_tokens"), getattr(full, f"{field}_tokens"))
    assert _metrics(tmp_path / "filled")[0]["loss"] == pytest.approx(math.log(2), abs=1e-6)
    # Which path each run took (recorded, not timed: speed is for bench/, never asserted here).
    assert filled_run.summary["reference_first_step_filled"] is True
    assert full_run.summary["reference_first_step_filled"] is False


def test_cancel_then_resume_continues_exactly(tiny_llama_dir, pairs_file, tmp_path):
    """4 steps in one go, or cancelled after step 2 (a checkpoint is written) and resumed: the final
    weights are identical, so optimiser, scheduler, RNG and data position all came back."""
    straight = train_dpo(
        _config(tiny_llama_dir, pairs_file, tmp_path / "straight", max_steps=4, batch_size=2)
    )

    out = tmp_path / "interrupted"
    config = _config(tiny_llama_dir, pairs_file, out, max_steps=4, batch_size=2)
    cancelled = train_dpo(config, StopAfter(2))
    assert cancelled.status == "cancelled" and cancelled.steps == 2
    assert (out / "checkpoints" / "step-00000002" / "model.safetensors").is_file()
    resumed = train_dpo(config)
    assert resumed.status == "completed" and resumed.steps == 4

    from safetensors.torch import load_file

    a = load_file(f"{straight.final_model_dir}/model.safetensors")
    b = load_file(f"{resumed.final_model_dir}/model.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    steps = [row["step"] for row in _metrics(out)]
    assert steps == [1, 2, 3, 4]


def test_only_the_newest_checkpoints_are_kept(tiny_llama_dir, pairs_file, tmp_path):
    """checkpoint_every 1, keep 2, 4 steps: steps 3 and 4 remain, each loadable with from_pretrained."""
    from transformers import AutoModelForCausalLM

    train_dpo(
        _config(
            tiny_llama_dir,
            pairs_file,
            tmp_path,
            max_steps=4,
            batch_size=2,
            checkpoint_every=1,
            keep_checkpoints=2,
        )
    )
    kept = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert kept == ["step-00000003", "step-00000004"]
    AutoModelForCausalLM.from_pretrained(str(tmp_path / "checkpoints" / "step-00000003"))
