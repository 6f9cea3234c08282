"""Shared-prompt prefill (``training.recipes.prefill``): a prompt held by several rows of a
generation batch runs once, and what ``generate`` produces from the shared cache is what it
produces without it."""

import pytest
import torch

from training.recipes.prefill import distinct_rows, shared_prompt_cache


def test_distinct_rows_keep_first_occurrence_order_and_tell_padding_apart():
    """Rows 0, 2 and 3 hold the same prompt; row 1 has the same ids as row 4 but a different
    mask (its first id is padding there), so they are different prompts."""
    ids = torch.tensor([[5, 6, 7], [0, 6, 7], [5, 6, 7], [5, 6, 7], [0, 6, 7]])
    mask = torch.tensor([[1, 1, 1], [0, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 1]])
    first, owner = distinct_rows(ids, mask)
    assert first.tolist() == [0, 1, 4]
    assert owner.tolist() == [0, 1, 0, 0, 2]


@pytest.fixture(scope="module")
def policy(tiny_llama_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_llama_dir), padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(str(tiny_llama_dir)).eval()
    return model, tokenizer


def _batch(tokenizer, texts):
    encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    return encoded["input_ids"], encoded["attention_mask"]


def test_no_repeated_prompt_means_plain_generate(policy):
    model, tokenizer = policy
    ids, mask = _batch(tokenizer, ["the cat sat", "a dog ran far away"])
    assert shared_prompt_cache(model, ids, mask) == {}
    assert shared_prompt_cache(model, ids[:, -1:], mask[:, -1:]) == {}  # one token wide


def test_shared_cache_holds_each_rows_own_prefix(policy):
    """Two prompts of different lengths (left padding), each repeated: the cache rows equal a
    per-row prefill of the same ids, mask and positions."""
    model, tokenizer = policy
    ids, mask = _batch(tokenizer, ["the cat sat"] * 3 + ["a dog ran far away"] * 2)
    kwargs = shared_prompt_cache(model, ids, mask)
    ((name, cache),) = kwargs.items()
    assert cache.get_seq_length() == ids.shape[1] - 1
    from transformers import DynamicCache

    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    with torch.no_grad():
        plain = getattr(
            model(
                input_ids=ids[:, :-1],
                attention_mask=mask[:, :-1],
                position_ids=positions[:, :-1],
                use_cache=True,
                **{name: DynamicCache()},
            ),
            name,
        )
    for shared_layer, plain_layer in zip(cache.layers, plain.layers, strict=True):
        real = mask[:, :-1].bool()[:, None, :, None].expand_as(plain_layer.keys)
        assert torch.allclose(shared_layer.keys[real], plain_layer.keys[real], atol=1e-5)
        assert torch.allclose(shared_layer.values[real], plain_layer.values[real], atol=1e-5)


@pytest.mark.parametrize("greedy", [True, False])
def test_generate_from_the_shared_cache_matches_plain_generate(policy, greedy):
    """Same seed, same tokens: greedy decoding and sampling (which draws the same random numbers
    in the same order, the prefill drawing none) give the rows plain ``generate`` gives."""
    model, tokenizer = policy
    ids, mask = _batch(tokenizer, ["the cat sat"] * 4 + ["a dog ran far away"] * 4)
    sampling = {"do_sample": False} if greedy else {"do_sample": True, "top_k": 0}
    outputs = []
    for shared in (False, True):
        torch.manual_seed(7)
        extra = shared_prompt_cache(model, ids, mask) if shared else {}
        assert bool(extra) == shared
        with torch.no_grad():
            outputs.append(
                model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    max_new_tokens=12,
                    pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=tokenizer.eos_token_id,
                    **extra,
                    **sampling,
                )
            )
    assert torch.equal(outputs[0], outputs[1])
