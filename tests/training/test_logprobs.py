"""Token log-probabilities: the shift by one, masking, float32 under bf16, and the chunked fused path."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from training.algorithms import (
    masked_mean,
    masked_whiten,
    selected_logprobs,
    sequence_logprobs,
    token_logprobs,
)


def _hand_logits() -> torch.Tensor:
    """One sequence of 3 tokens over a 2-token vocabulary.

    Position 0's logits [0, 0] give p(1) = 1/2; position 1's [ln 3, 0] give p(0) = 3/4, p(1) = 1/4;
    position 2's logits predict a 4th token that does not exist, so they never count.
    """
    return torch.tensor([[[0.0, 0.0], [math.log(3.0), 0.0], [50.0, -50.0]]])


def test_sequence_logprobs_shifts_by_one_token():
    """ids [0, 1, 0], completion = tokens 1 and 2: log p(x1=1 | pos 0) + log p(x2=0 | pos 1)
    = ln(1/2) + ln(3/4) = ln(3/8). Gathering without the shift would score token 1 with position 1's
    logits, ln(1/4), and give ln(1/4) + ln(~1) instead."""
    ids = torch.tensor([[0, 1, 0]])
    mask = torch.tensor([[0, 1, 1]])
    got = sequence_logprobs(_hand_logits(), ids, mask)
    assert got.shape == (1,)
    assert got.item() == pytest.approx(math.log(3 / 8), abs=1e-6)


def test_sequence_logprobs_masks_the_prompt():
    """Only token 2 is the completion: ln(3/4)."""
    got = sequence_logprobs(_hand_logits(), torch.tensor([[0, 1, 0]]), torch.tensor([[1, 0, 1]]))
    assert got.item() == pytest.approx(math.log(3 / 4), abs=1e-6)


def test_average_divides_by_completion_tokens():
    """Length-averaged (for IPO): ln(3/8) / 2."""
    got = sequence_logprobs(
        _hand_logits(), torch.tensor([[0, 1, 0]]), torch.tensor([[0, 1, 1]]), average=True
    )
    assert got.item() == pytest.approx(math.log(3 / 8) / 2, abs=1e-6)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), prompt=st.integers(1, 3), length=st.integers(1, 4))
def test_masked_tokens_change_nothing(seed, prompt, length):
    """Garbage logits and ids on the padding, and any logits at the last position, leave the result
    unchanged: one right-padded row scores the same as the unpadded row."""
    gen = torch.Generator().manual_seed(seed)
    real = prompt + length
    logits = torch.randn(1, real, 7, generator=gen)
    ids = torch.randint(0, 7, (1, real), generator=gen)
    mask = torch.zeros(1, real, dtype=torch.long)
    mask[0, prompt:] = 1
    clean = sequence_logprobs(logits, ids, mask)

    pad = 3
    noisy_logits = torch.cat([logits, 1e4 * torch.randn(1, pad, 7, generator=gen)], dim=1)
    noisy_ids = torch.cat([ids, torch.randint(0, 7, (1, pad), generator=gen)], dim=1)
    noisy_mask = torch.cat([mask, torch.zeros(1, pad, dtype=torch.long)], dim=1)
    assert torch.allclose(sequence_logprobs(noisy_logits, noisy_ids, noisy_mask), clean, atol=1e-6)


def test_bf16_logits_are_scored_in_float32():
    """bf16 logits come back as float32 log-probabilities equal to scoring the upcast logits: the
    log-softmax never runs in bf16 (which would round a ~-10 log-probability to a multiple of 1/16)."""
    gen = torch.Generator().manual_seed(0)
    logits = (4 * torch.randn(2, 6, 50, generator=gen)).to(torch.bfloat16)
    ids = torch.randint(0, 50, (2, 6), generator=gen)
    mask = torch.ones(2, 6, dtype=torch.long)
    got = sequence_logprobs(logits, ids, mask)
    assert got.dtype == torch.float32
    assert torch.equal(got, sequence_logprobs(logits.float(), ids, mask))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("keep_bytes", [2**30, 0], ids=["softmax-kept", "recomputed"])
def test_selected_logprobs_equals_full_logits_values_and_gradients(dtype, keep_bytes):
    """The chunked fused path (chunk 3 of 10 tokens, so chunks are ragged) gives the same values and
    the same gradients for hidden states and output weights as log_softmax on the full logits,
    whether backward uses the softmax kept from forward or recomputes it."""
    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(10, 8, generator=gen, dtype=dtype).requires_grad_()
    weight = torch.randn(13, 8, generator=gen, dtype=dtype).requires_grad_()
    targets = torch.randint(0, 13, (10,), generator=gen)
    upstream = torch.randn(10, generator=gen, dtype=dtype)

    got = selected_logprobs(hidden, weight, targets, chunk_size=3, keep_bytes=keep_bytes)
    (got * upstream.float()).sum().backward()
    grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad, weight.grad = None, None

    expected = torch.log_softmax(hidden @ weight.T, dim=-1).gather(1, targets[:, None]).squeeze(1)
    (expected * upstream).sum().backward()
    assert torch.allclose(got.to(dtype), expected, atol=1e-6)
    assert torch.allclose(grads[0], hidden.grad, atol=1e-6)
    assert torch.allclose(grads[1], weight.grad, atol=1e-6)


def test_selected_logprobs_keeps_no_softmax_without_gradients():
    """Reference passes (no gradients) keep nothing for backward, whatever the budget."""
    hidden, weight = torch.randn(4, 8), torch.randn(13, 8)
    with torch.no_grad():
        got = selected_logprobs(hidden, weight, torch.zeros(4, dtype=torch.long))
    assert got.grad_fn is None and got.shape == (4,)


def test_token_logprobs_shape():
    """[B, T, V] logits and [B, T] ids give [B, T - 1]: one log-probability per predicted token."""
    assert token_logprobs(torch.zeros(2, 5, 4), torch.zeros(2, 5, dtype=torch.long)).shape == (2, 4)


def test_masked_whiten_uses_only_kept_entries():
    """[1, 2, 3 | pad 100]: mean 2 and unbiased variance 1 over the kept three, so [-1, 0, 1, 0];
    the padded 100 neither shifts the statistics nor survives."""
    values = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    got = masked_whiten(values, mask)
    assert torch.allclose(got, torch.tensor([[-1.0, 0.0, 1.0, 0.0]]), atol=1e-6)
    unshifted = masked_whiten(values, mask, shift_mean=False)
    assert torch.allclose(unshifted, torch.tensor([[1.0, 2.0, 3.0, 0.0]]), atol=1e-6)


def test_masked_mean_of_an_empty_row_is_zero():
    """A row with no kept token averages to 0, not NaN."""
    got = masked_mean(torch.tensor([[5.0, 7.0]]), torch.tensor([[0, 0]]), dim=-1)
    assert got.tolist() == [0.0]
