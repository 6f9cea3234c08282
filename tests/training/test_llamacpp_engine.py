"""The llama.cpp rollout engine (``training.inference.engine_llamacpp``) and the GGUF export it
pushes the weights with: greedy tokens equal the static engine's and ``generate``'s, log-probs
agree with the policy's within 1e-3 in float32, continuous batching keeps each row's tokens, a
seed gives the same tokens, and the weights are pushed again only after they change. The sampler's
frequency tests, the repetition penalty, the chat generator, GRPO's exact resume and PPO and RLOO
run through it in tests/training/test_rollout_engine.py."""

import pytest
import torch

from tests.helpers.engines import left_padded, load_policy, smollm2_chat_batch
from training.inference.engine import (
    EngineUnavailable,
    SamplingSettings,
    policy_logprobs,
    prompt_rows,
)
from training.inference.engine_choice import make_engine
from training.inference.engine_generate import GenerateEngine
from training.inference.engine_llamacpp import LlamaCppEngine
from training.inference.engine_static import StaticEngine
from training.inference.gguf_export import export_gguf, interleave_rotary_rows

TEXTS = ["the cat sat", "a dog ran far away", "the cat sat", "Paris.", "a dog ran far away"]


@pytest.fixture(scope="module")
def policy(engine_llama_dir):
    return load_policy(engine_llama_dir)


def _worst_logprob_gap(model, ids, mask, out, temperature=1.0):
    again = policy_logprobs(model, prompt_rows(ids, mask), out.tokens, temperature=temperature)
    return max(float((a - b).abs().max()) for a, b in zip(again, out.logprobs, strict=True))


def test_greedy_tokens_are_the_static_engines_and_generates(policy):
    """Prompts of different lengths, two of them repeated (prefilled once, copied): the same
    greedy tokens as the static and generate engines, row for row, and log-probs within 1e-3 of a
    policy forward pass."""
    model, tokenizer = policy
    ids, mask = left_padded(tokenizer, TEXTS)
    settings = SamplingSettings(max_new_tokens=12, greedy=True)
    out = LlamaCppEngine().generate(model, ids, mask, settings)
    assert out.tokens == StaticEngine().generate(model, ids, mask, settings).tokens
    assert out.tokens == GenerateEngine().generate(model, ids, mask, settings).tokens
    assert out.stats["prefills"] == 3 and out.stats["copies"] == 2
    assert _worst_logprob_gap(model, ids, mask, out) < 1e-3


def test_continuous_batching_keeps_each_rows_tokens(policy):
    """Two slots for five rows (rows admitted as others finish, their prompts prefilled beside
    the live rows' tokens): each row's greedy and sampled tokens are those of eight slots, and
    each greedy row is what it is alone."""
    model, tokenizer = policy
    ids, mask = left_padded(tokenizer, TEXTS)
    stops = tuple(range(3, 300, 7))  # about one token in seven ends a row: rows of many lengths
    for settings in (
        SamplingSettings(max_new_tokens=10, greedy=True, eos_token_ids=stops),
        SamplingSettings(max_new_tokens=10, temperature=0.8, seed=11, eos_token_ids=stops),
    ):
        narrow = LlamaCppEngine(max_batch=2).generate(model, ids, mask, settings)
        wide = LlamaCppEngine(max_batch=8).generate(model, ids, mask, settings)
        assert narrow.tokens == wide.tokens and narrow.finished == wide.finished
        assert len({len(t) for t in wide.tokens}) > 1  # rows really finished at different steps
        assert _worst_logprob_gap(model, ids, mask, narrow, settings.temperature) < 1e-3
    greedy = SamplingSettings(max_new_tokens=10, greedy=True, eos_token_ids=stops)
    together = LlamaCppEngine(max_batch=2).generate(model, ids, mask, greedy)
    for row in range(len(TEXTS)):
        alone = LlamaCppEngine().generate(model, ids[row : row + 1], mask[row : row + 1], greedy)
        assert alone.tokens[0] == together.tokens[row]


def test_a_seed_gives_the_same_tokens_and_one_push_serves_unchanged_weights(policy):
    model, tokenizer = policy
    ids, mask = left_padded(tokenizer, TEXTS)
    engine = LlamaCppEngine()
    settings = SamplingSettings(max_new_tokens=8, temperature=0.9, top_p=0.9, seed=5)
    first = engine.generate(model, ids, mask, settings)
    assert engine.generate(model, ids, mask, settings).tokens == first.tokens
    assert first.tokens == StaticEngine().generate(model, ids, mask, settings).tokens
    assert engine.pushes == 1
    torch.manual_seed(2)
    unseeded = SamplingSettings(max_new_tokens=8, temperature=0.9)
    again = engine.generate(model, ids, mask, unseeded)
    torch.manual_seed(2)
    assert engine.generate(model, ids, mask, unseeded).tokens == again.tokens


def test_changed_weights_are_pushed_again(engine_llama_dir):
    """An optimiser-like in-place update: the next call pushes the new weights, whose log-probs
    are the updated policy's."""
    model, tokenizer = load_policy(engine_llama_dir)
    ids, mask = left_padded(tokenizer, TEXTS[:2])
    engine = LlamaCppEngine()
    settings = SamplingSettings(max_new_tokens=6, temperature=1.0, seed=1)
    engine.generate(model, ids, mask, settings)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(1.5)
    out = engine.generate(model, ids, mask, settings)
    assert engine.pushes == 2
    assert _worst_logprob_gap(model, ids, mask, out) < 1e-3


def test_bf16_under_autocast_pushes_bf16_weights(policy):
    model, tokenizer = policy
    ids, mask = left_padded(tokenizer, TEXTS)
    engine = LlamaCppEngine()
    settings = SamplingSettings(max_new_tokens=6, greedy=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = engine.generate(model, ids, mask, settings)
    assert engine.precision_used == "bf16"
    assert [len(t) for t in out.tokens] == [6] * len(TEXTS)
    assert all(torch.isfinite(lp).all() for lp in out.logprobs)


def test_refusals(policy, tiny_reward_dir):
    from transformers import AutoModelForSequenceClassification

    _, tokenizer = policy
    ids, mask = left_padded(tokenizer, TEXTS[:1])
    reward = AutoModelForSequenceClassification.from_pretrained(str(tiny_reward_dir))
    settings = SamplingSettings(max_new_tokens=2)
    with pytest.raises(EngineUnavailable, match="engine 'llamacpp' cannot run this policy"):
        LlamaCppEngine().generate(reward, ids, mask, settings)
    with pytest.raises(EngineUnavailable, match="engine 'llamacpp' cannot run"):
        make_engine("llamacpp", reward)
    with pytest.raises(ValueError, match="precision"):
        LlamaCppEngine(precision="q4")
    for size in (0, 257):
        with pytest.raises(ValueError, match="max_batch"):
            LlamaCppEngine(max_batch=size)


def test_rotary_rows_are_interleaved_per_head():
    """Head size 4: transformers pairs rows (0, 2) and (1, 3), llama.cpp rows (0, 1) and (2, 3);
    two heads are reordered each on its own."""
    weight = torch.arange(8.0)[:, None].expand(8, 3)
    assert interleave_rotary_rows(weight, heads=2)[:, 0].tolist() == [0, 2, 1, 3, 4, 6, 5, 7]
    with pytest.raises(ValueError, match="heads"):
        interleave_rotary_rows(torch.zeros(6, 2), heads=2)  # head size 3 is odd


def test_the_export_refuses_what_llama_cpp_cannot_express(tiny_reward_dir, tmp_path):
    from transformers import AutoModelForSequenceClassification

    reward = AutoModelForSequenceClassification.from_pretrained(str(tiny_reward_dir))
    with pytest.raises(ValueError, match="cannot write this policy"):
        export_gguf(reward, tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()


@pytest.mark.slow
def test_llamacpp_greedy_tokens_and_logprobs_on_smollm2():
    """SmolLM2-135M-Instruct, fp32: three chat prompts (one repeated), 24 greedy tokens equal the
    static engine's, and sampled log-probs within 1e-3 of the policy's."""
    model, _, ids, mask = smollm2_chat_batch(
        ("What is the capital of France?", "Name a colour.", "Name a colour.")
    )
    greedy = SamplingSettings(max_new_tokens=24, greedy=True)
    out = LlamaCppEngine().generate(model, ids, mask, greedy)
    assert out.tokens == StaticEngine().generate(model, ids, mask, greedy).tokens
    sampled = LlamaCppEngine().generate(
        model, ids, mask, SamplingSettings(max_new_tokens=24, temperature=0.7, seed=0)
    )
    assert _worst_logprob_gap(model, ids, mask, sampled, 0.7) < 1e-3
