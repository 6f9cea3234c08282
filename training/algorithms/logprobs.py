"""Token log-probabilities of a causal LM, and masked reductions over tokens.

A causal LM's logits at position t predict token t + 1, so the log-probability of token t is read from
the logits at t - 1 (the shift by one). Much public RLHF code gathers without the shift; that scores
each token with the distribution that already saw it. Log-softmax always runs in float32: under bf16
the log-probabilities of a 49k-token vocabulary lose about two decimal digits, which is larger than a
DPO reward margin early in training.

Shapes: B sequences, T tokens, V vocabulary, H hidden size, N selected tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor


def masked_sum(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of ``values`` where ``mask`` is 1 (masked entries contribute exactly 0, even if NaN/inf).

    values, mask: same shape; dim None sums everything.
    """
    kept = torch.where(
        mask.bool(), values, torch.zeros((), dtype=values.dtype, device=values.device)
    )
    return kept.sum() if dim is None else kept.sum(dim)


def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``values`` over the entries where ``mask`` is 1; 0 for a row with no kept entry."""
    count = mask.to(values.dtype).sum() if dim is None else mask.to(values.dtype).sum(dim)
    return masked_sum(values, mask, dim) / count.clamp(min=1)


def masked_var(values: Tensor, mask: Tensor, *, unbiased: bool = True) -> Tensor:
    """Variance of the kept entries (Bessel-corrected when ``unbiased``), a scalar."""
    mean = masked_mean(values, mask)
    centred = (values - mean) ** 2
    count = mask.to(values.dtype).sum()
    denominator = count - 1 if unbiased else count
    return masked_sum(centred, mask) / denominator.clamp(min=1)


def masked_whiten(
    values: Tensor, mask: Tensor, *, shift_mean: bool = True, eps: float = 1e-8
) -> Tensor:
    """Whiten ``values`` with the mean and unbiased variance of the kept entries only.

    (x - mean) / sqrt(var + eps) over the mask; with ``shift_mean`` False the mean is added back
    (whitening the scale only, as for rewards). Masked entries come out as exactly 0, so padding never
    leaks into what follows. values, mask: [B, T] (any shape works).
    """
    mean = masked_mean(values, mask)
    var = masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(mask.bool(), whitened, torch.zeros_like(whitened))


def token_logprobs(logits: Tensor, input_ids: Tensor) -> Tensor:
    """log p(input_ids[:, t] | input_ids[:, :t]) for t = 1..T-1, in float32.

    logits: [B, T, V] (any float dtype), input_ids: [B, T] -> [B, T - 1]; column j holds the
    log-probability of token j + 1. Computed as gathered logit minus logsumexp, one row at a time, so
    at most one row's float32 copy of the logits exists beside the input.
    """
    targets = input_ids[:, 1:].unsqueeze(-1)
    rows = []
    for row_logits, row_targets in zip(logits[:, :-1], targets, strict=True):
        row = row_logits.float()
        rows.append(row.gather(-1, row_targets).squeeze(-1) - torch.logsumexp(row, dim=-1))
    return torch.stack(rows)


def sequence_logprobs(
    logits: Tensor, input_ids: Tensor, completion_mask: Tensor, *, average: bool = False
) -> Tensor:
    """Summed (or, with ``average``, length-averaged) log-probability of each sequence's completion.

    logits: [B, T, V]; input_ids: [B, T]; completion_mask: [B, T], 1 on the completion tokens (the
    response), 0 on the prompt and on padding, aligned with ``input_ids``. Returns [B] float32:
    sum_{t: mask[t] = 1} log p(x_t | x_<t). The shift by one happens here: callers pass the mask of the
    tokens they want scored, not a shifted one. The first token can never be scored (nothing predicts
    it), so a mask on position 0 is ignored.
    """
    if logits.shape[:2] != input_ids.shape or input_ids.shape != completion_mask.shape:
        raise ValueError(
            f"shapes disagree: logits {tuple(logits.shape)}, input_ids {tuple(input_ids.shape)}, "
            f"completion_mask {tuple(completion_mask.shape)}"
        )
    per_token = token_logprobs(logits, input_ids)
    mask = completion_mask[:, 1:]
    if average:
        return masked_mean(per_token, mask, dim=-1)
    return masked_sum(per_token, mask, dim=-1)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of the softmax distribution, in nats, float32. logits: [..., V] -> [...]."""
    logits = logits.float()
    log_p = torch.log_softmax(logits, dim=-1)
    return -(log_p.exp() * log_p).sum(-1)


# selected_logprobs keeps the softmax of the forward for backward while it takes at most this many
# bytes (float32 [N, V]); above it, backward recomputes the logits chunk by chunk instead.
KEEP_SOFTMAX_BYTES = 2 * 1024**3


def _softmax_chunk_(logits: Tensor) -> tuple[Tensor, Tensor]:
    """Turn float32 ``logits`` [n, V] into their softmax in place; returns (softmax, logsumexp [n]).
    Max-shifted, so as stable as ``torch.logsumexp``, in four passes over [n, V] and no copy."""
    top = logits.amax(dim=-1, keepdim=True)
    probs = logits.sub_(top).exp_()
    total = probs.sum(dim=-1, keepdim=True)
    probs.div_(total)
    return probs, (top + total.log()).squeeze(-1)


class _SelectedLogprobs(torch.autograd.Function):
    """Chunked fused ``log_softmax(hidden @ weight.T)[target]`` that never holds all N x V logits.

    Forward keeps the softmax for backward when it fits in ``keep_bytes`` (then backward is two
    matrix products per chunk); otherwise only the logsumexp per token, and backward recomputes one
    chunk of logits at a time: the memory trade of Liger kernel and torchtune's chunked loss, for an
    output layer (49k vocabulary) with 6x more activations than the rest of a token's layer. Element
    work is in place on each chunk. Backward may run once (it reuses the kept softmax's memory).
    """

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk_size, compute_dtype, keep_bytes):  # type: ignore[override]
        n, vocab = hidden.shape[0], weight.shape[0]
        logprobs = torch.empty(n, dtype=torch.float32, device=hidden.device)
        lse = torch.empty_like(logprobs)
        needs_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        # Each chunk's softmax, in order, when kept for backward (float32 [chunk, V] each).
        kept: list[Tensor] | None = [] if needs_grad and n * vocab * 4 <= keep_bytes else None
        weight_c = weight.to(compute_dtype)
        for start in range(0, n, chunk_size):
            stop = start + chunk_size
            logits = (hidden[start:stop].to(compute_dtype) @ weight_c.T).float()
            picked = logits.gather(-1, targets[start:stop].unsqueeze(-1)).squeeze(-1)
            softmax, lse[start:stop] = _softmax_chunk_(logits)
            if kept is not None:
                kept.append(softmax)
            logprobs[start:stop] = picked - lse[start:stop]
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.kept = kept
        ctx.chunk_size = chunk_size
        ctx.compute_dtype = compute_dtype
        return logprobs

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        hidden, weight, targets, lse = ctx.saved_tensors
        kept, ctx.kept = ctx.kept, None
        dtype = ctx.compute_dtype
        weight_c = weight.to(dtype)
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = (
            torch.zeros_like(weight, dtype=torch.float32) if ctx.needs_input_grad[1] else None
        )
        for index, start in enumerate(range(0, hidden.shape[0], ctx.chunk_size)):
            stop = start + ctx.chunk_size
            h = hidden[start:stop].to(dtype)
            if kept is not None:
                grad_logits = kept[index]
            else:
                grad_logits = (h @ weight_c.T).float().sub_(lse[start:stop, None]).exp_()
            g = grad_out[start:stop, None].float()
            # d(logit_target - lse)/d logits = onehot(target) - softmax
            grad_logits.mul_(-g).scatter_add_(-1, targets[start:stop, None], g)
            grad_logits = grad_logits.to(dtype)
            if grad_hidden is not None:
                grad_hidden[start:stop] = (grad_logits @ weight_c).to(hidden.dtype)
            if grad_weight is not None:
                if grad_logits.dtype == torch.float32 and h.dtype == torch.float32:
                    grad_weight.addmm_(grad_logits.T, h)
                else:
                    grad_weight += (grad_logits.T @ h).float()
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None, None


def selected_logprobs(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    chunk_size: int = 1024,
    compute_dtype: torch.dtype | None = None,
    keep_bytes: int = KEEP_SOFTMAX_BYTES,
) -> Tensor:
    """log softmax(hidden @ weight.T)[target] for selected positions only, float32, memory-lean.

    hidden: [N, H] (the decoder's last hidden states at the positions that predict ``targets``),
    weight: [V, H] (the output embedding, no bias), targets: [N] token ids -> [N]. Equal to
    ``token_logprobs`` on the full logits at those positions, but never materialises [N, V] logits
    at once. When gradients are needed and the float32 softmax [N, V] takes at most ``keep_bytes``,
    it is kept for backward (one matrix product fewer per chunk); otherwise backward recomputes one
    [chunk_size, V] block at a time. ``compute_dtype`` is the matmul dtype (bf16 under autocast);
    the softmax is float32 regardless.
    """
    if hidden.dim() != 2 or targets.shape != hidden.shape[:1]:
        raise ValueError(
            f"hidden must be [N, H] and targets [N], got {tuple(hidden.shape)}, {tuple(targets.shape)}"
        )
    if compute_dtype is None:
        device_type = hidden.device.type
        compute_dtype = (
            torch.get_autocast_dtype(device_type)
            if torch.is_autocast_enabled(device_type)
            else hidden.dtype
        )
    with torch.autocast(hidden.device.type, enabled=False):
        return _SelectedLogprobs.apply(
            hidden, weight, targets, chunk_size, compute_dtype, keep_bytes
        )


def segment_sum(values: Tensor, segment_ids: Tensor, n_segments: int) -> Tensor:
    """Sum ``values`` [N] into ``n_segments`` bins by ``segment_ids`` [N] -> [n_segments] (float32)."""
    out = torch.zeros(n_segments, dtype=torch.float32, device=values.device)
    return out.index_add(0, segment_ids, values.float())
