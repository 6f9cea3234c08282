"""The rollout engines (``training.inference.engine``): the static engine's greedy tokens are
``generate``'s, continuous batching keeps each row's tokens, the sampler's distribution and a
seed's tokens survive the engine, log-probs agree with the policy's, the engines are chosen and
refused with clear messages, and PPO, RLOO and GRPO run (and resume exactly) on the static engine."""

import math

import pytest
import torch

from tests.helpers.engines import left_padded, load_policy, smollm2_chat_batch
from tests.helpers.recipes import StopAfter, grpo_config, ppo_config, rloo_config
from training.inference.engine import (
    EngineUnavailable,
    SamplingSettings,
    policy_logprobs,
    prompt_rows,
    weights_fingerprint,
)
from training.inference.engine_choice import choose_engine, make_engine
from training.inference.engine_generate import GenerateEngine
from training.inference.engine_llamacpp import LlamaCppEngine
from training.inference.engine_static import StaticEngine

TEXTS = ["the cat sat", "a dog ran far away", "the cat sat", "Paris.", "a dog ran far away"]
STOPS = tuple(range(3, 300, 7))  # about one token in seven ends a row: rows of many lengths


@pytest.fixture(scope="module")
def policy(engine_llama_dir):
    return load_policy(engine_llama_dir)


def _settings(tokenizer, **values):
    return SamplingSettings(eos_token_ids=(tokenizer.eos_token_id,), **values)


def test_static_greedy_tokens_are_generates(policy):
    """Prompts of different lengths, two of them repeated: the static engine's greedy tokens equal
    plain ``model.generate``'s (no shared prefill) and the generate engine's, row for row."""
    model, tokenizer = policy
    ids, mask = left_padded(tokenizer, TEXTS)
    settings = _settings(tokenizer, max_new_tokens=12, greedy=True)
    static = StaticEngine().generate(model, ids, mask, settings)
    via_generate = GenerateEngine().generate(model, ids, mask, settings)
    with torch.no_grad():
        plain = model.generate(
            input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=12,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        )[:, ids.shape[1] :]  # fmt: skip
    for row in range(len(TEXTS)):
        expected = plain[row].tolist()[: len(static.tokens[row])]
        assert static.tokens[row] == expected, row
        assert static.tokens[row] == via_generate.tokens[row], row
    assert static.finished == via_generate.finished
    assert static.stats["prefills"] == 1  # the 3 distinct prompts in one forward pass


def test_continuous_batching_keeps_each_rows_tokens(policy):
    """Two slots for five rows of different lengths (slots refilled as rows finish, then dropped):
    each row's greedy tokens are those it gets generated alone, and its sampled tokens (same seed)
    those it gets in a batch wide enough for all rows."""
    model, tokenizer = policy
    ids, mask = left_padded(tokenizer, TEXTS)
    greedy = SamplingSettings(max_new_tokens=9, greedy=True, eos_token_ids=STOPS)
    narrow = StaticEngine(max_batch=2).generate(model, ids, mask, greedy)
    for row in range(len(TEXTS)):
        alone = StaticEngine().generate(model, ids[row : row + 1], mask[row : row + 1], greedy)
        assert narrow.tokens[row] == alone.tokens[0], row
    sampled = SamplingSettings(max_new_tokens=9, temperature=1.0, seed=11, eos_token_ids=STOPS)
    a = StaticEngine(max_batch=2).generate(model, ids, mask, sampled)
    b = StaticEngine(max_batch=8).generate(model, ids, mask, sampled)
    assert a.tokens == b.tokens
    assert len({len(t) for t in a.tokens}) > 1
    assert a.stats["slot_moves"] + b.stats["slot_moves"] > 0  # a finished slot taken by the last


def test_finished_rows_are_dropped_not_padded(policy):
    """Rows that stop early leave the batch: the decode steps run fewer row-steps than rows x
    longest response."""
    model, tokenizer = policy
    ids, mask = left_padded(tokenizer, TEXTS)
    out = StaticEngine().generate(
        model, ids, mask, SamplingSettings(max_new_tokens=20, seed=1, eos_token_ids=STOPS)
    )
    lengths = [len(t) for t in out.tokens]
    assert out.stats["tokens"] == sum(lengths)
    assert len(set(lengths)) > 1, lengths
    assert out.stats["decode_steps"] == max(lengths) - 1  # one batch: the longest row's steps
    assert all(out.finished[r] == (t[-1] in STOPS) for r, t in enumerate(out.tokens))


def test_no_stop_tokens_run_every_row_to_the_length_limit(policy, monkeypatch):
    """``eos_token_ids=()`` means no row stops early: both engines run every row to
    ``max_new_tokens``, even when the model's own generation config names, as its EOS, a token
    the greedy answer emits (transformers must not fall back to it)."""
    model, tokenizer = policy
    ids, mask = left_padded(tokenizer, TEXTS[:2])
    settings = SamplingSettings(max_new_tokens=10, greedy=True)
    first = StaticEngine().generate(model, ids, mask, settings).tokens[0]
    monkeypatch.setattr(model.generation_config, "eos_token_id", first[2])
    for engine in (StaticEngine(), GenerateEngine()):
        out = engine.generate(model, ids, mask, settings)
        assert [len(t) for t in out.tokens] == [10, 10], type(engine).__name__
        assert out.tokens[0] == first
        assert out.finished == [False, False]


@pytest.mark.parametrize("engine", [StaticEngine, LlamaCppEngine])
@pytest.mark.parametrize(("temperature", "top_p"), [(0.3, 1.0), (0.5, 0.6)])
def test_the_engines_first_tokens_follow_the_tempered_nucleus(policy, temperature, top_p, engine):
    """6,000 samples of one prompt's first token: each likely token's frequency (p >= 0.01), and
    the pooled frequency of the rest, is within 4 standard errors of softmax(logits / T)
    restricted to the top-p nucleus (from a policy forward pass), and no token outside the
    nucleus is drawn (the sampler's frequency tests, through the engine)."""
    model, tokenizer = policy
    ids, mask = left_padded(tokenizer, ["the cat sat"])
    rows = 6000
    settings = SamplingSettings(max_new_tokens=1, temperature=temperature, top_p=top_p, seed=3)
    out = engine().generate(model, ids.expand(rows, -1), mask.expand(rows, -1), settings)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[0, -1].double()
    probs = torch.softmax(logits / temperature, dim=-1)
    ordered, order = probs.sort(descending=True)
    keep = (ordered.cumsum(0) - ordered) < top_p
    nucleus = torch.zeros_like(probs)
    nucleus[order[keep]] = ordered[keep] / ordered[keep].sum()
    drawn = torch.tensor([t[0] for t in out.tokens])
    seen = torch.bincount(drawn, minlength=probs.numel()).double() / rows
    assert seen[nucleus == 0].sum() == 0
    likely = nucleus >= 0.01  # each its own check; the rest pooled (too rare for 4 SE each)
    cells = [(float(nucleus[likely & (nucleus == p)].sum()), float(seen[nucleus == p].sum()))
             for p in nucleus[likely].tolist()]  # fmt: skip
    cells.append((float(nucleus[~likely].sum()), float(seen[~likely].sum())))
    for p, f in cells:
        assert abs(f - p) <= 4 * math.sqrt(max(p * (1 - p), 1e-12) / rows), (p, f)
    assert likely.sum() >= 2  # a real distribution, not one greedy token


def test_a_seed_gives_the_same_tokens_and_the_global_rng_picks_one(policy):
    model, tokenizer = policy
    ids, mask = left_padded(tokenizer, TEXTS)
    engine = StaticEngine()
    seeded = _settings(tokenizer, max_new_tokens=8, seed=5)
    assert (
        engine.generate(model, ids, mask, seeded).tokens
        == engine.generate(model, ids, mask, seeded).tokens
    )
    unseeded = _settings(tokenizer, max_new_tokens=8)
    torch.manual_seed(2)
    first = engine.generate(model, ids, mask, unseeded).tokens
    torch.manual_seed(2)
    assert engine.generate(model, ids, mask, unseeded).tokens == first
    other = engine.generate(model, ids, mask, _settings(tokenizer, max_new_tokens=8, seed=6))
    assert other.tokens != first


@pytest.mark.parametrize("engine", [StaticEngine(), StaticEngine(max_batch=2), GenerateEngine()])
def test_engine_logprobs_agree_with_a_policy_forward_pass(policy, engine):
    model, tokenizer = policy
    ids, mask = left_padded(tokenizer, TEXTS)
    torch.manual_seed(0)
    settings = _settings(tokenizer, max_new_tokens=10, temperature=0.7)
    out = engine.generate(model, ids, mask, settings)
    again = policy_logprobs(model, prompt_rows(ids, mask), out.tokens, temperature=0.7)
    for mine, theirs in zip(out.logprobs, again, strict=True):
        assert mine.dtype == torch.float32 and mine.shape == theirs.shape
        assert torch.allclose(mine, theirs, atol=1e-3), (mine - theirs).abs().max()


def test_repetition_penalty_matches_generates(policy):
    model, tokenizer = policy
    ids, mask = left_padded(tokenizer, TEXTS[:2])
    settings = _settings(tokenizer, max_new_tokens=10, greedy=True, repetition_penalty=1.5)
    static = StaticEngine().generate(model, ids, mask, settings)
    assert static.tokens == GenerateEngine().generate(model, ids, mask, settings).tokens
    assert static.tokens == LlamaCppEngine(max_batch=1).generate(model, ids, mask, settings).tokens


def test_the_weights_fingerprint_sees_a_fused_adamw_step():
    """The recipes' fused AdamW writes parameters without bumping their version counters (what
    the vLLM engine once checked): the content checksum still changes, and only then."""
    layer = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=0.1, fused=True)
    before, versions = weights_fingerprint(layer), [p._version for p in layer.parameters()]
    assert weights_fingerprint(layer) == before
    layer(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    assert weights_fingerprint(layer) != before
    assert [p._version for p in layer.parameters()] == versions  # why versions are not enough


def test_bf16_under_autocast_runs_in_bf16(policy):
    model, tokenizer = policy
    ids, mask = left_padded(tokenizer, TEXTS)
    settings = _settings(tokenizer, max_new_tokens=6, seed=1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = StaticEngine().generate(model, ids, mask, settings)
    assert all(len(t) >= 1 for t in out.tokens)
    assert all(torch.isfinite(lp).all() for lp in out.logprobs)
    assert next(model.parameters()).dtype == torch.float32  # the policy itself is untouched


def test_a_failing_compile_falls_back_to_eager(policy, monkeypatch):
    model, tokenizer = policy
    ids, mask = left_padded(tokenizer, TEXTS)
    settings = _settings(tokenizer, max_new_tokens=6, greedy=True)

    def broken(*args, **kwargs):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(torch, "compile", broken)
    with pytest.warns(RuntimeWarning, match="decoding eagerly"):
        out = StaticEngine(compile=True).generate(model, ids, mask, settings)
    assert out.tokens == StaticEngine().generate(model, ids, mask, settings).tokens


def test_threads_give_the_same_tokens_and_are_restored(policy):
    model, tokenizer = policy
    ids, mask = left_padded(tokenizer, TEXTS)
    settings = _settings(tokenizer, max_new_tokens=6, seed=4)
    before = torch.get_num_threads()
    one = StaticEngine(threads=1).generate(model, ids, mask, settings)
    assert torch.get_num_threads() == before
    assert one.tokens == StaticEngine().generate(model, ids, mask, settings).tokens
    with pytest.raises(ValueError, match="threads"):
        StaticEngine(threads=0)


def test_choosing_and_refusing_engines(policy, tiny_reward_dir):
    from transformers import AutoModelForSequenceClassification

    model, _ = policy
    assert choose_engine("auto", model) == "static"  # measured faster on the CPU (issue 37)
    reward = AutoModelForSequenceClassification.from_pretrained(str(tiny_reward_dir))
    assert choose_engine("auto", reward) == "generate"  # not a Llama causal LM
    with pytest.raises(EngineUnavailable, match="engine 'static' cannot run"):
        make_engine("static", reward)
    with pytest.raises(ValueError, match="engine must be one of"):
        choose_engine("fast", model)
    assert choose_engine("llamacpp", reward) == "llamacpp"  # refused when built, below
    with pytest.raises(EngineUnavailable, match="vLLM"):
        make_engine("vllm", model)  # CPU, and vLLM is not installed here


def test_bad_settings_and_prompts_are_refused():
    with pytest.raises(ValueError, match="max_new_tokens"):
        SamplingSettings(max_new_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        SamplingSettings(max_new_tokens=1, temperature=0)
    with pytest.raises(ValueError, match="top_p"):
        SamplingSettings(max_new_tokens=1, top_p=1.5)
    with pytest.raises(ValueError, match="at least one token"):
        prompt_rows(torch.ones(2, 3, dtype=torch.long), torch.tensor([[1, 1, 1], [0, 0, 0]]))


def test_the_config_names_the_engines(tiny_llama_dir, prompts_file, tmp_path):
    from training.recipes.config import ConfigError

    assert grpo_config(tiny_llama_dir, prompts_file, tmp_path).engine == "generate"
    with pytest.raises(ConfigError, match="engine"):
        grpo_config(tiny_llama_dir, prompts_file, tmp_path, engine="fast")


@pytest.mark.parametrize("engine", ["static", "llamacpp"])
def test_chat_generator_on_an_in_process_engine(engine_llama_dir, engine):
    from training.inference.generation import ChatGenerator, SamplingConfig

    conversations = [[{"role": "user", "content": text}] for text in TEXTS[:3]]
    config = SamplingConfig(max_new_tokens=8, temperature=0.0, repetition_penalty=1.2)
    plain = ChatGenerator(engine_llama_dir, device="cpu").generate(conversations, config)
    generator = ChatGenerator(engine_llama_dir, device="cpu", engine=engine)
    assert generator.generate(conversations, config) == plain
    sampled = SamplingConfig(max_new_tokens=8, temperature=0.7, seed=3)
    assert generator.generate(conversations, sampled) == generator.generate(conversations, sampled)


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(f"{folder}/model.safetensors")


@pytest.mark.parametrize("engine", ["static", "llamacpp"])
def test_grpo_on_an_in_process_engine_resumes_exactly(
    engine_llama_dir, prompts_file, tmp_path, engine
):
    """Cancelled after step 1 and resumed: the same weights as 3 uninterrupted steps (the engine's
    seed comes from the restored RNG; llamacpp: each step's new weights pushed), with the KL term
    and greedy evaluation on the engine."""
    from training.recipes.grpo import train_grpo

    values = {
        "engine": engine,
        "max_steps": 3,
        "kl_coef": 0.04,
        "eval_prompts": 1,
        "eval_every": 2,
    }
    straight = train_grpo(grpo_config(engine_llama_dir, prompts_file, tmp_path / "a", **values))
    config = grpo_config(engine_llama_dir, prompts_file, tmp_path / "b", **values)
    assert train_grpo(config, StopAfter(1)).status == "cancelled"
    resumed = train_grpo(config)
    assert resumed.status == "completed"
    a, b = _weights(straight.final_model_dir), _weights(resumed.final_model_dir)
    for name in a:
        assert torch.equal(a[name], b[name]), name


@pytest.mark.parametrize("engine", ["static", "llamacpp"])
def test_ppo_and_rloo_run_on_an_in_process_engine(
    engine_llama_dir, tiny_reward_dir, prompts_file, tmp_path, engine
):
    from training.recipes.ppo import train_ppo
    from training.recipes.rloo import train_rloo

    ppo = ppo_config(engine_llama_dir, tiny_reward_dir, prompts_file, tmp_path / "p", engine=engine)
    assert train_ppo(ppo).status == "completed"
    rloo = rloo_config(
        engine_llama_dir, tiny_reward_dir, prompts_file, tmp_path / "r", engine=engine
    )
    assert train_rloo(rloo).status == "completed"


@pytest.mark.slow
def test_static_greedy_tokens_are_generates_on_smollm2():
    """SmolLM2-135M-Instruct, fp32: three chat prompts (one repeated), 24 greedy tokens."""
    questions = ("What is the capital of France?", "Name a primary colour.")
    model, tokenizer, ids, mask = smollm2_chat_batch((*questions, questions[0]))
    settings = _settings(tokenizer, max_new_tokens=24, greedy=True)
    static = StaticEngine().generate(model, ids, mask, settings)
    assert static.tokens == GenerateEngine().generate(model, ids, mask, settings).tokens
