"""Length buckets for packed attention: the split itself (hand-checked costs), and packed forwards
over several buckets that equal their padded forwards in values and gradients."""

import itertools

import pytest
import torch

from training.recipes import packing
from training.recipes.models import load_causal_lm, load_tokenizer
from training.recipes.packing import (
    TokenizedSequence,
    build_batch,
    length_buckets,
    packed_attention_for,
    packed_encoder_logits,
    sequence_completion_logprobs,
)


def test_equal_widths_stay_in_one_grid():
    assert length_buckets([7, 7, 7, 7]) == [[0, 1, 2, 3]]


def test_split_follows_the_cost_by_hand():
    """Widths 10, 10, 100. One grid: 3 * (100**2 + 0) + C = 30000 + C. Two grids: 2 * 100 + 10000
    + 2C = 10200 + 2C. With C = 0 two grids win; with C = 20000 (10200 + 40000 > 30000 + 20000)
    one grid wins; C = 19800 is the tie, broken towards the first split found (one grid)."""
    widths = [100, 10, 10]
    assert length_buckets(widths, call_cost=0, slot_cost=0) == [[1, 2], [0]]
    assert length_buckets(widths, call_cost=20_000, slot_cost=0) == [[0, 1, 2]]
    assert length_buckets(widths, call_cost=19_800, slot_cost=0) == [[0, 1, 2]]


@pytest.mark.parametrize("seed", range(5))
def test_buckets_partition_the_rows(seed):
    generator = torch.Generator().manual_seed(seed)
    widths = torch.randint(1, 300, (40,), generator=generator).tolist()
    buckets = length_buckets(widths, call_cost=2000)
    assert sorted(i for bucket in buckets for i in bucket) == list(range(40))
    assert all(bucket == sorted(bucket) for bucket in buckets)
    tops = [max(widths[i] for i in bucket) for bucket in buckets]
    assert tops == sorted(tops)  # narrowest grid first, grids do not interleave
    for low, high in itertools.pairwise(buckets):
        assert max(widths[i] for i in low) <= min(widths[i] for i in high)


def test_no_split_costs_less_than_the_dynamic_programme():
    """Against every contiguous split of 8 sorted widths (2**7 of them), by brute force."""
    widths = [3, 5, 9, 17, 18, 40, 41, 90]

    def cost(groups):
        return sum(len(g) * (max(g) ** 2 + 16 * max(g)) + 500 for g in groups)

    best = min(
        cost([widths[a:b] for a, b in zip([0, *cuts], [*cuts, 8], strict=True)])
        for mask in range(128)
        for cuts in [[i + 1 for i in range(7) if mask >> i & 1]]
    )
    got = length_buckets(widths, call_cost=500, slot_cost=16)
    assert cost([[widths[i] for i in g] for g in got]) == best


def _sequences(lengths: list[int], vocab: int) -> list[TokenizedSequence]:
    generator = torch.Generator().manual_seed(0)
    return [
        TokenizedSequence(tuple(torch.randint(3, vocab, (n,), generator=generator).tolist()), 2)
        for n in lengths
    ]


def _packed_matches_padding(model, sequences, *, share_prompts: bool):
    """Score ``sequences`` packed and right-padded; assert equal log-probabilities and embedding
    gradients (each sequence weighted differently); return the packed layout."""
    results = []
    for packed in (True, False):
        batch = build_batch(
            sequences, packed=packed, pad_token_id=0, share_prompts=packed and share_prompts
        )
        logps = sequence_completion_logprobs(model, batch)
        (logps * torch.arange(1.0, len(sequences) + 1.0)).sum().backward()
        results.append((logps.detach(), model.model.embed_tokens.weight.grad.clone(), batch))
        model.zero_grad()
    assert torch.allclose(results[0][0], results[1][0], atol=1e-5)
    assert torch.allclose(results[0][1], results[1][1], atol=1e-5)
    assert results[0][2].layout is not None
    return results[0][2].layout


def test_bucketed_decoder_rows_equal_padding(tiny_llama_dir, monkeypatch):
    """Causal attention over several length buckets scores every completion as right padding does,
    with the same gradients."""
    monkeypatch.setattr(packing, "GRID_CALL_COST", 0)
    model, packable = load_causal_lm(tiny_llama_dir, device=torch.device("cpu"))
    assert packable
    sequences = _sequences([40, 4, 23, 5, 41, 3], model.config.vocab_size)
    layout = _packed_matches_padding(model, sequences, share_prompts=False)
    assert len(layout.grids) > 1


@pytest.mark.parametrize("call_cost", [0, None])
def test_bucketed_encoder_rows_equal_padding(tiny_bert_dir, monkeypatch, call_cost):
    """BERT unpadded (sequences of very different lengths, with token type ids) over several buckets
    and over the default split gives the padded forward's logits and the same gradients on every
    parameter, the [CLS]-only last layer included."""
    from transformers import AutoModelForSequenceClassification

    if call_cost is not None:
        monkeypatch.setattr(packing, "GRID_CALL_COST", call_cost)
    tokenizer = load_tokenizer(tiny_bert_dir)
    texts = [("why?", "yes " * k) for k in (30, 1, 2, 28, 14, 1)]
    encoded = [tokenizer(a, b) for a, b in texts]
    padded = tokenizer(
        [a for a, _ in texts], [b for _, b in texts], padding=True, return_tensors="pt"
    )

    def run(packed: bool):
        torch.manual_seed(0)
        model = AutoModelForSequenceClassification.from_pretrained(
            str(tiny_bert_dir), num_labels=1, attn_implementation=packed_attention_for("cpu")
        )
        if packed:
            logits = packed_encoder_logits(
                model, [e["input_ids"] for e in encoded], [e["token_type_ids"] for e in encoded]
            )
        else:
            logits = model(**padded).logits
        (logits[:, 0] * torch.arange(1.0, 7.0)).sum().backward()
        return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    if call_cost == 0:
        lengths = [len(e["input_ids"]) for e in encoded]
        assert len(length_buckets(lengths)) > 1
    packed_logits, packed_grads = run(True)
    padded_logits, padded_grads = run(False)
    assert torch.allclose(packed_logits, padded_logits, atol=1e-6)
    for name, grad in padded_grads.items():
        assert torch.allclose(packed_grads[name], grad, atol=1e-5), name


def test_bucketed_slots_of_shared_prompts_equal_padding(tiny_llama_dir, monkeypatch):
    """Shared prompts with completions of very different lengths, each completion slot split into
    several grids: the same log-probabilities and gradients as right padding."""
    monkeypatch.setattr(packing, "GRID_CALL_COST", 0)
    model, _ = load_causal_lm(tiny_llama_dir, device=torch.device("cpu"))
    generator = torch.Generator().manual_seed(1)

    def tokens(n: int) -> tuple[int, ...]:
        return tuple(torch.randint(3, model.config.vocab_size, (n,), generator=generator).tolist())

    long_prompt, short_prompt = tokens(30), tokens(4)
    sequences = [
        *(TokenizedSequence(long_prompt + tokens(n), 30) for n in (2, 25, 3)),
        *(TokenizedSequence(short_prompt + tokens(n), 4) for n in (40, 1)),
        TokenizedSequence(tokens(12), 3),
    ]
    layout = _packed_matches_padding(model, sequences, share_prompts=True)
    assert layout.shared and len(layout.grids) > 3  # more grids than completion slots
