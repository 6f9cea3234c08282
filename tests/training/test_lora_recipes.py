"""LoRA as an option of every recipe (``lora_rank`` > 0), on the tiny Llama policy and reward model:
only the adapters (and a reward model's score head) are trained, checkpoints hold the adapters in
peft's format and resume exactly, the final adapters load with plain peft and merge into weights that
give the same logits, the reference is the adapter-disabled policy (no second copy), and whatever
reads a trained run's output (scoring, generation, PPO/RLOO's reward model) reads a LoRA run's."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers.recipes import (
    StopAfter,
    grpo_config,
    ppo_config,
    rloo_config,
    tiny_pair_values,
)
from training.recipes import (
    ConfigError,
    DPOConfig,
    KTOConfig,
    ORPOConfig,
    PPOConfig,
    RewardModelConfig,
    SimPOConfig,
    train_dpo,
    train_grpo,
    train_kto,
    train_reward_model,
)
from training.recipes.lora import BaseModelView, is_adapter_folder
from training.recipes.ppo import train_ppo
from training.recipes.reference_free import train_orpo, train_simpo
from training.recipes.rloo import train_rloo

RANK = 4
IDS = torch.tensor([[5, 9, 13, 2, 7, 11], [3, 4, 8, 16, 32, 40]])


def _rm_config(model_dir, pairs_file, output_dir, **overrides) -> RewardModelConfig:
    values = {
        "model": str(model_dir),
        "data": str(pairs_file),
        "output_dir": str(output_dir),
        "batch_size": 2,
        "max_length": 64,
        "learning_rate": 3e-3,
        "eval_fraction": 0.25,
        "checkpoint_every": 0,
        "device": "cpu",
    }
    return RewardModelConfig(**{**values, **overrides})


def _ppo_config(policy, reward, prompts, output_dir, **overrides) -> PPOConfig:
    """The shared tiny PPO config at one PPO epoch, learning rate 1e-3 and PPOConfig's default
    rollout shares."""
    values = {
        "ppo_epochs": 1,
        "learning_rate": 1e-3,
        "anchor_fraction": 0.2,
        "perturb_fraction": 0.1,
    }
    return ppo_config(policy, reward, prompts, output_dir, **{**values, **overrides})


def _train(kind, dirs, output_dir, callback=None, **overrides):
    """Run ``kind`` for 2 steps with LoRA rank 4 (``overrides`` on top); the TrainResult."""
    llama, reward, pairs, prompts = dirs
    overrides = {"lora_rank": RANK, "max_steps": 2, **overrides}
    if kind == "rm":
        return train_reward_model(_rm_config(reward, pairs, output_dir, **overrides), callback)
    if kind in ("dpo", "simpo", "orpo", "kto"):
        cls, train = {
            "dpo": (DPOConfig, train_dpo),
            "simpo": (SimPOConfig, train_simpo),
            "orpo": (ORPOConfig, train_orpo),
            "kto": (KTOConfig, train_kto),
        }[kind]
        overrides.setdefault("batch_size", 2)
        return train(cls(**tiny_pair_values(llama, pairs, output_dir, **overrides)), callback)
    if kind == "rloo":
        return train_rloo(rloo_config(llama, reward, prompts, output_dir, **overrides), callback)
    if kind == "grpo":  # with the k3 KL term, so the adapters-off reference is used
        overrides.setdefault("kl_coef", 0.04)
        return train_grpo(grpo_config(llama, prompts, output_dir, **overrides), callback)
    return train_ppo(_ppo_config(llama, reward, prompts, output_dir, **overrides), callback)


@pytest.fixture
def dirs(tiny_llama_dir, tiny_reward_dir, pairs_file, prompts_file):
    return tiny_llama_dir, tiny_reward_dir, pairs_file, prompts_file


def _base_of(kind, dirs):
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    if kind == "rm":
        return AutoModelForSequenceClassification.from_pretrained(str(dirs[1]), num_labels=1)
    return AutoModelForCausalLM.from_pretrained(str(dirs[0]))


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(input_ids=IDS).logits


# --- configuration -------------------------------------------------------------------------------


def test_lora_is_off_by_default_and_its_settings_are_read_only_when_on(tmp_path):
    """Rank 0 (the default) is full training: ``config.lora`` is None and the other LoRA fields are
    not checked; rank 16 gives LoraSettings with the fields' values."""
    base = {"model": "m", "data": "d", "output_dir": str(tmp_path)}
    assert DPOConfig(**base).lora is None
    assert DPOConfig(**base, lora_alpha=-1).lora is None  # ignored while off
    on = DPOConfig(**base, lora_rank=16, lora_target_modules=["q_proj", "v_proj"])
    assert on.lora.rank == 16 and on.lora.alpha == 32.0 and on.lora.dropout == 0.05
    assert on.lora_target_modules == ("q_proj", "v_proj")  # a JSON list comes back as a tuple
    assert on.lora.target_modules == ("q_proj", "v_proj")


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"lora_rank": -1}, "lora_rank"),
        ({"lora_rank": 8, "lora_alpha": 0}, "lora_alpha"),
        ({"lora_rank": 8, "lora_dropout": 1.0}, "lora_dropout"),
        ({"lora_rank": 8, "lora_target_modules": []}, "lora_target_modules"),
        ({"lora_rank": 8, "lora_target_modules": "q_proj"}, "lora_target_modules"),
        ({"lora_rank": 8, "lora_target_modules": ["q_proj", " "]}, "lora_target_modules"),
        ({"merge_lora": True}, "merge_lora"),
    ],
)
def test_impossible_lora_settings_are_refused_naming_the_field(tmp_path, values, field):
    with pytest.raises(ConfigError) as caught:
        DPOConfig(model="m", data="d", output_dir=str(tmp_path), **values)
    assert caught.value.field == field and str(caught.value).startswith(field)


def test_lora_with_deepspeed_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="deepspeed: not with LoRA"):
        _ppo_config("m", "r", "d", tmp_path, lora_rank=8, deepspeed="zero2")


# --- every kind ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["rm", "dpo", "simpo", "orpo", "kto", "ppo", "rloo", "grpo"])
def test_every_kind_trains_adapters_only_and_saves_them_loadable_and_mergeable(
    kind, dirs, tmp_path
):
    """2 steps with LoRA and merge_lora. The optimiser holds exactly the adapter tensors (and the
    RM's score head, PPO's value head): its state has as many numbers as they have. The checkpoint
    and final/ are peft adapter folders that plain ``PeftModel.from_pretrained`` loads on the base,
    with trained (non-zero) B matrices; final/merged/ loads with AutoModelFor... and gives the same
    logits as base + adapters."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    result = _train(kind, dirs, tmp_path, checkpoint_every=2, merge_lora=True)
    assert result.status == "completed"
    final = tmp_path / "final"
    checkpoint = tmp_path / "checkpoints" / "step-00000002"
    for folder in (final, checkpoint):
        assert is_adapter_folder(folder) and not (folder / "model.safetensors").exists()

    adapters = load_file(str(final / "adapter_model.safetensors"))
    assert all("lora_" in name or "score" in name for name in adapters)
    assert any("score" in name for name in adapters) == (kind == "rm")
    assert any(float(t.abs().sum()) > 0 for n, t in adapters.items() if "lora_B" in n)
    saved = torch.load(checkpoint / "training_state.pt", weights_only=False)
    optimised = sum(s["exp_avg"].numel() for s in saved["optimizer"]["state"].values())
    extra = sum(t.numel() for m in saved["modules"].values() for t in m.values())  # value head
    assert optimised == sum(t.numel() for t in adapters.values()) + extra
    assert result.summary["lora_trainable_parameters"] == sum(t.numel() for t in adapters.values())

    with_adapters = PeftModel.from_pretrained(_base_of(kind, dirs), str(final))
    auto = AutoModelForSequenceClassification if kind == "rm" else AutoModelForCausalLM
    merged = auto.from_pretrained(str(final / "merged"))
    assert result.summary["merged_model_dir"] == str(final / "merged")
    torch.testing.assert_close(_logits(merged), _logits(with_adapters), rtol=1e-4, atol=1e-5)
    assert not torch.allclose(_logits(merged), _logits(_base_of(kind, dirs)))


@pytest.mark.parametrize("kind", ["dpo", "rm", "rloo", "kto", "grpo"])
def test_cancel_then_resume_with_lora_is_exact(kind, dirs, tmp_path):
    """3 steps straight, or cancelled after step 1 and resumed from its adapter checkpoint: the same
    final adapters to the bit (adapters, optimiser, schedule, RNG and data position came back). For
    DPO the reference cache is deleted before resuming, so the resumed run computes the reference of
    steps 2-3 on the adapter-disabled policy: the same values as the base model's at the start."""
    straight = _train(kind, dirs, tmp_path / "straight", max_steps=3)
    out = tmp_path / "interrupted"
    cancelled = _train(kind, dirs, out, StopAfter(1), max_steps=3)
    assert cancelled.status == "cancelled"
    assert is_adapter_folder(out / "checkpoints" / "step-00000001")
    if kind == "dpo":
        shutil.rmtree(out / "reference-cache")
    resumed = _train(kind, dirs, out, max_steps=3)
    assert resumed.status == "completed" and resumed.steps == 3
    if kind == "dpo":
        assert resumed.summary["reference_pairs_computed"] > 0
    a = load_file(f"{straight.final_model_dir}/adapter_model.safetensors")
    b = load_file(f"{resumed.final_model_dir}/adapter_model.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_resuming_a_lora_checkpoint_without_lora_is_refused(dirs, tmp_path):
    _train("dpo", dirs, tmp_path, StopAfter(1), max_steps=3)
    with pytest.raises(ValueError, match="is a LoRA checkpoint but lora_rank is 0"):
        _train("dpo", dirs, tmp_path, max_steps=3, lora_rank=0)
    with pytest.raises(ValueError, match="holds rank-4 adapters but lora_rank is 8"):
        _train("dpo", dirs, tmp_path, max_steps=3, lora_rank=8)


# --- the reference without a second copy ---------------------------------------------------------


def test_the_lora_reference_is_the_policy_with_adapters_off(tiny_llama_dir):
    """``reference_model(None, policy)`` is a view of the same module: no parameter tensor is added,
    and after the adapters have moved its logits (and its decoder's hidden states, which the packed
    log-prob path reads) are the base model's, while the policy's are not."""
    from training.recipes.models import load_policy, reference_model
    from training.recipes.packing import decoder_stack

    config = DPOConfig(
        **tiny_pair_values(tiny_llama_dir, "d", "o"), lora_rank=RANK, disable_dropout=True
    )
    policy, _ = load_policy(tiny_llama_dir, config, torch.device("cpu"))
    base = _base_of("dpo", (tiny_llama_dir,))
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.fill_(0.05)
    reference = reference_model(None, policy, device=torch.device("cpu"), packing=True)
    assert isinstance(reference, BaseModelView) and reference.model is policy
    ids = {id(p) for p in policy.parameters()}
    assert {id(p) for p in reference.parameters()} == ids
    torch.testing.assert_close(_logits(reference), _logits(base), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(_logits(policy), _logits(base))
    with torch.no_grad():
        hidden = decoder_stack(reference)(input_ids=IDS).last_hidden_state
        torch.testing.assert_close(hidden, base.model(input_ids=IDS).last_hidden_state)


def test_online_recipes_with_lora_keep_one_copy_of_the_weights(
    tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path
):
    """PPO/RLOO's reference with LoRA is the policy's view: the tensors in memory for policy and
    reference are the policy's alone (not doubled), and only the adapters are trainable."""
    from training.recipes.online import load_online_models

    config = rloo_config(tiny_llama_dir, tiny_reward_dir, prompts_file, tmp_path, lora_rank=RANK)
    models = load_online_models(config, device=torch.device("cpu"))
    assert isinstance(models.reference, BaseModelView) and models.reference.model is models.policy
    policy_tensors = {p.data_ptr() for p in models.policy.parameters()}
    both = policy_tensors | {p.data_ptr() for p in models.reference.parameters()}
    assert len(both) == len(policy_tensors)
    trainable = [n for n, p in models.policy.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)


def test_lora_dpo_reads_the_reference_cache_of_full_dpo_on_the_same_base(dirs, tmp_path):
    """The reference of LoRA DPO is the base model, so its cache key is full DPO's: a LoRA run
    after a full run on the same data computes no reference log-probs, and its first loss is ln 2."""
    cache = tmp_path / "cache"
    _train("dpo", dirs, tmp_path / "full", lora_rank=0, reference_cache_dir=str(cache))
    lora = _train("dpo", dirs, tmp_path / "lora", reference_cache_dir=str(cache), log_every=1)
    assert lora.summary["reference_cache_hit"] is True
    first = json.loads((tmp_path / "lora" / "metrics.jsonl").read_text().splitlines()[0])
    assert first["loss"] == pytest.approx(0.693147, abs=1e-5)


# --- consumers of a LoRA run's output ------------------------------------------------------------


def test_scoring_with_a_lora_reward_model_and_training_against_it(dirs, tmp_path):
    """``reward_scores`` on a LoRA RM's adapter folder equals base + adapters through plain peft
    (adapters and trained score head), and equals the merged folder's; RLOO and PPO train with it
    as their reward model."""
    from peft import PeftModel

    from training.recipes.models import load_tokenizer
    from training.recipes.scoring import reward_scores

    rm = _train("rm", dirs, tmp_path / "rm", merge_lora=True)
    final = rm.final_model_dir
    conversations = [[{"role": "user", "content": "What is the capital of France?"}]] * 2
    texts = ["Paris.", "Berlin."]
    scores = reward_scores(final, conversations, texts)
    assert scores == pytest.approx(reward_scores(f"{final}/merged", conversations, texts), abs=1e-5)
    tokenizer = load_tokenizer(final)
    manual = PeftModel.from_pretrained(_base_of("rm", dirs), final).eval()
    manual.config.pad_token_id = tokenizer.pad_token_id
    for text, score in zip(texts, scores, strict=True):
        rendered = tokenizer.apply_chat_template(
            [*conversations[0], {"role": "assistant", "content": text}], tokenize=False
        )
        ids = tokenizer(rendered, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            assert float(manual(input_ids=ids).logits[0, 0]) == pytest.approx(score, abs=1e-4)
    llama, _, _, prompts = dirs
    assert train_rloo(rloo_config(llama, final, prompts, tmp_path / "rloo")).status == "completed"
    ppo = train_ppo(_ppo_config(llama, final, prompts, tmp_path / "ppo", max_steps=1))
    assert ppo.status == "completed"


def test_generating_from_a_lora_policy(dirs, tmp_path):
    """``ChatGenerator`` (eval rounds, judges) on a LoRA policy's adapter folder generates what the
    merged weights generate, greedily."""
    from training.inference.generation import ChatGenerator, SamplingConfig

    result = _train("dpo", dirs, tmp_path, merge_lora=True, learning_rate=5e-2)
    conversations = [(("user", "Add 2 and 3."),), (("user", "Is water wet?"),)]
    conversations = [[{"role": r, "content": c} for r, c in conv] for conv in conversations]
    sampling = SamplingConfig(max_new_tokens=8, temperature=0.0, repetition_penalty=1.0)
    adapters = ChatGenerator(result.final_model_dir, device="cpu").generate(conversations, sampling)
    merged = ChatGenerator(result.summary["merged_model_dir"], device="cpu").generate(
        conversations, sampling
    )
    assert [g.text for g in adapters] == [g.text for g in merged]
    assert all(g.n_tokens > 0 for g in adapters)


def test_an_encoder_reward_model_trains_lora_unpadded_and_scores_like_peft(
    tiny_bert_dir, pairs_file, tmp_path
):
    """A BERT-family reward model (MiniLM's shape; adapters on peft's ``all-linear``) with LoRA
    still trains unpadded (``packed``), its classifier trained in full beside the adapters; the
    adapter folder scores (prompt, response) as plain peft on the base does, padded."""
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification

    from training.recipes.data import load_preference_pairs
    from training.recipes.models import load_tokenizer
    from training.recipes.scoring import RewardScorer, load_sequence_classifier

    result = train_reward_model(
        _rm_config(tiny_bert_dir, pairs_file, tmp_path, epochs=2, lora_rank=RANK)
    )
    assert result.summary["packed"] is True
    adapters = load_file(f"{result.final_model_dir}/adapter_model.safetensors")
    assert any("classifier" in name and "lora_" not in name for name in adapters)
    tokenizer = load_tokenizer(result.final_model_dir)
    pairs = load_preference_pairs(pairs_file)[:3]
    base = AutoModelForSequenceClassification.from_pretrained(str(tiny_bert_dir), num_labels=1)
    plain = PeftModel.from_pretrained(base, result.final_model_dir).eval()
    batch = tokenizer(
        [p.prompt[0][1] for p in pairs],
        [p.chosen for p in pairs],
        padding=True,
        return_tensors="pt",
    )
    with torch.no_grad():
        expected = plain(**batch).logits[:, 0]
    model = load_sequence_classifier(
        result.final_model_dir, device=torch.device("cpu"), tokenizer=tokenizer
    ).eval()
    scorer = RewardScorer(model, tokenizer, max_length=64, prompt_budget=32)
    assert scorer.encoder_packed
    with torch.no_grad():
        got = scorer.score([scorer.encode(p.prompt, p.chosen) for p in pairs])
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
