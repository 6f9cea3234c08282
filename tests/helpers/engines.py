"""Loading a policy and left-padding prompts for the rollout-engine tests."""

import torch


def load_policy(folder):
    """(a float32 causal LM in eval mode, its tokenizer padding on the left) from ``folder``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    return model, tokenizer


def left_padded(tokenizer, texts):
    """``texts`` encoded without special tokens, left-padded: (input_ids, attention) [R, W]."""
    encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    return encoded["input_ids"], encoded["attention_mask"]


def smollm2_chat_batch(questions):
    """(SmolLM2-135M-Instruct as ``load_policy`` gives it, its tokenizer, input_ids, attention):
    each question as a one-turn chat prompt ready for the answer, left-padded. Skips the test
    when the model is not fetched."""
    import pytest

    from tests.helpers.tiny_models import smollm2_dir

    folder = smollm2_dir()
    if folder is None:
        pytest.skip("SmolLM2 is not fetched (make models)")
    model, tokenizer = load_policy(folder)
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False
        )
        for q in questions
    ]
    return (model, tokenizer, *left_padded(tokenizer, texts))
