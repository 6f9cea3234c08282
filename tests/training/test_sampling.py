"""Inverse-CDF sampling (``training.recipes.sampling``): the distribution softmax(logits / T)
restricted to the top-p nucleus, one token per row, and ``generate`` emitting exactly the drawn
tokens under greedy decoding."""

import math

import pytest
import torch

from training.recipes.sampling import InverseCdfSampler, inverse_cdf_sample

LOGITS = torch.tensor([2.0, 1.0, 0.0, -1.0, float("-inf")])


def _frequencies(draws: torch.Tensor, n: int) -> torch.Tensor:
    return torch.bincount(draws, minlength=n).double() / draws.numel()


def test_draws_follow_the_tempered_softmax():
    """200,000 draws at T = 2: each frequency within 4 standard errors of softmax(logits / 2);
    the -inf token is never drawn."""
    torch.manual_seed(0)
    rows = 200_000
    draws = inverse_cdf_sample(LOGITS.expand(rows, -1), temperature=2.0)
    expected = torch.softmax(LOGITS.double() / 2.0, dim=-1)
    seen = _frequencies(draws, 5)
    for p, f in zip(expected.tolist(), seen.tolist(), strict=True):
        assert abs(f - p) <= 4 * math.sqrt(max(p * (1 - p), 1e-12) / rows), (p, f)
    assert seen[4] == 0


def test_top_p_keeps_the_smallest_nucleus_reaching_it():
    """softmax(LOGITS) = 0.644, 0.237, 0.087, 0.032, 0: top_p 0.8 keeps the first two (0.644 is
    short of it), renormalised: 0.731 and 0.269; top_p 0.5 keeps the first alone."""
    torch.manual_seed(1)
    rows = 100_000
    draws = inverse_cdf_sample(LOGITS.expand(rows, -1), top_p=0.8)
    seen = _frequencies(draws, 5)
    probs = torch.softmax(LOGITS.double(), dim=-1)
    first = float(probs[0] / (probs[0] + probs[1]))
    assert abs(float(seen[0]) - first) < 4 * math.sqrt(first * (1 - first) / rows)
    assert seen[2:].sum() == 0
    assert torch.equal(inverse_cdf_sample(LOGITS.expand(50, -1), top_p=0.5), torch.zeros(50).long())


def test_rows_are_drawn_independently_and_reproducibly():
    scores = torch.randn(8, 300, generator=torch.Generator().manual_seed(3))
    torch.manual_seed(5)
    first = inverse_cdf_sample(scores)
    torch.manual_seed(5)
    assert torch.equal(first, inverse_cdf_sample(scores))
    assert first.shape == (8,) and first.dtype == torch.long


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="temperature"):
        inverse_cdf_sample(LOGITS[None], temperature=0)
    with pytest.raises(ValueError, match="top_p"):
        inverse_cdf_sample(LOGITS[None], top_p=0)


def test_the_processor_leaves_one_token_per_row_and_generate_emits_it(tiny_llama_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    scores = torch.randn(4, 50)
    torch.manual_seed(2)
    out = InverseCdfSampler()(torch.zeros(4, 1, dtype=torch.long), scores)
    assert torch.isfinite(out).sum(dim=1).tolist() == [1, 1, 1, 1]

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_llama_dir), padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(str(tiny_llama_dir)).eval()
    encoded = tokenizer(["the cat sat"] * 3, return_tensors="pt", add_special_tokens=False)
    drawn = []

    class Recording(InverseCdfSampler):
        def __call__(self, input_ids, scores):
            out = super().__call__(input_ids, scores)
            drawn.append(out.argmax(dim=-1))
            return out

    torch.manual_seed(4)
    with torch.no_grad():
        output = model.generate(
            **encoded,
            do_sample=False,
            logits_processor=[Recording(temperature=1.0)],
            max_new_tokens=5,
            min_new_tokens=5,
            pad_token_id=tokenizer.pad_token_id,
        )
    new = output[:, encoded["input_ids"].shape[1] :]
    assert torch.equal(new, torch.stack(drawn, dim=1))
    assert len({tuple(row) for row in new.tolist()}) > 1  # sampled, not one greedy answer
