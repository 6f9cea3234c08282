"""Padding-free batches for causal LMs, and the forward passes that score completions.

A batch of S tokenised sequences becomes one row of N = sum of lengths tokens (no padding), with
position ids restarting at 0 for each sequence and the boundaries ``cu_seqlens`` passed to attention.
Linear layers then do exactly the work of the real tokens; attention runs causally inside each
sequence (flash-attn's varlen kernel on CUDA when installed, else SDPA on the sequences laid out
side by side). Models
without the attention interface fall back to right padding.

Only the positions that predict completion tokens go through the output layer, and they go through
``selected_logprobs`` in chunks, so the N x V logits never exist at once and the prompt's logits are
never computed at all.

Shapes: S sequences, N tokens in the packed row (or S x L when padded), M completion tokens, H hidden.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from training.algorithms import segment_sum, selected_logprobs

VARLEN_ATTENTION = "concord_varlen"


_LAYOUT_CACHE: dict[str, object] = {}


def _segment_layout(cu_seqlens: Tensor) -> tuple[Tensor, int, int]:
    """(flat index of each packed token in an [S * L] grid, S, L) for the spans of ``cu_seqlens``;
    remembered for the last ``cu_seqlens`` seen, since every layer of a forward asks again."""
    if _LAYOUT_CACHE.get("key") is cu_seqlens:
        return _LAYOUT_CACHE["value"]  # type: ignore[return-value]
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    n_segments, longest = int(lengths.numel()), int(lengths.max())
    segment = torch.repeat_interleave(torch.arange(n_segments, device=lengths.device), lengths)
    offset = (
        torch.arange(int(lengths.sum()), device=lengths.device) - cu_seqlens[:-1].long()[segment]
    )
    value = (segment * longest + offset, n_segments, longest)
    _LAYOUT_CACHE.update(key=cu_seqlens, value=value)
    return value


def _varlen_sdpa_attention(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[Tensor, None]:
    """Attention over a packed row, each [cu_seqlens[i], cu_seqlens[i+1]) span on its own.

    query: [1, heads, N, D]; key, value: [1, kv_heads, N, D] -> ([1, N, heads, D], None), the layout
    transformers' attention functions return. Only attention sees padding: the spans are scattered
    into an [S, heads, L, D] grid (right-padded), one causal SDPA call runs on it (the fused CPU/CUDA
    kernel; per-span calls with grouped-query heads fall back to the slow math kernel on CPU), and
    the real positions are gathered back. With right padding a causal query never sees a padded key,
    so this is exact. Without ``cu_seq_lens_q`` (padded batches, generation with a cache) this is
    transformers' own SDPA attention.
    """
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    cu_seqlens = kwargs.get("cu_seq_lens_q")
    if cu_seqlens is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    if not causal:
        raise ValueError("packed batches are for causal (decoder) attention only")
    n_rep = query.shape[1] // key.shape[1]
    key, value = repeat_kv(key, n_rep), repeat_kv(value, n_rep)
    flat_index, n_segments, longest = _segment_layout(cu_seqlens)
    heads, head_dim = query.shape[1], query.shape[-1]

    def to_grid(x: Tensor) -> Tensor:  # [1, heads, N, D] -> [S, heads, L, D]
        grid = x.new_zeros(heads, n_segments * longest, head_dim)
        grid = grid.index_copy(1, flat_index, x[0])
        return grid.view(heads, n_segments, longest, head_dim).transpose(0, 1)

    out = F.scaled_dot_product_attention(
        to_grid(query),
        to_grid(key),
        to_grid(value),
        dropout_p=dropout if module.training else 0.0,
        is_causal=True,
        scale=scaling,
    )
    out = out.transpose(0, 1).reshape(heads, n_segments * longest, head_dim)
    return out.index_select(1, flat_index).transpose(0, 1).unsqueeze(0).contiguous(), None


def register_varlen_attention() -> str:
    """Register the packed attention with transformers (idempotent); returns its name for
    ``from_pretrained(attn_implementation=...)``."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(VARLEN_ATTENTION, _varlen_sdpa_attention)
    AttentionMaskInterface.register(VARLEN_ATTENTION, sdpa_mask)
    return VARLEN_ATTENTION


def packed_attention_for(device: torch.device | str) -> str:
    """The attention implementation to load a packable model with: flash-attn 2 on CUDA when it is
    installed (its varlen kernel reads the same position ids), else the per-sequence SDPA."""
    if torch.device(device).type == "cuda":
        import importlib.util

        if importlib.util.find_spec("flash_attn") is not None:
            return "flash_attention_2"
    return register_varlen_attention()


@dataclass(frozen=True)
class TokenizedSequence:
    """One sequence to score: prompt tokens then completion tokens (``input_ids[prompt_length:]``)."""

    input_ids: tuple[int, ...]
    prompt_length: int

    def __post_init__(self) -> None:
        if not 0 <= self.prompt_length <= len(self.input_ids):
            raise ValueError(
                f"prompt_length {self.prompt_length} outside a {len(self.input_ids)}-token sequence"
            )

    @property
    def completion_length(self) -> int:
        """Tokens that get a log-probability (the first token of a sequence never can)."""
        return len(self.input_ids) - max(self.prompt_length, 1)


@dataclass
class SequenceBatch:
    """Model inputs for S sequences plus the indices that pick completion predictions out of the
    flattened last hidden states ([N, H] packed, [S * L, H] padded)."""

    input_ids: Tensor  # [1, N] packed or [S, L] padded
    position_ids: Tensor  # same shape as input_ids
    attention_mask: Tensor | None  # [S, L] when padded, None when packed
    cu_seqlens: Tensor | None  # [S + 1] int32 when packed
    max_sequence_length: int
    predict_index: Tensor  # [M] flat rows of the hidden states that predict a completion token
    targets: Tensor  # [M] the completion tokens they predict
    segment_ids: Tensor  # [M] which sequence each completion token belongs to
    completion_lengths: Tensor  # [S] completion tokens per sequence
    last_index: Tensor  # [S] flat row of each sequence's last token (for reward and value heads)
    n_tokens: int  # real (non-padding) tokens

    @property
    def n_sequences(self) -> int:
        return int(self.completion_lengths.shape[0])

    @property
    def packed(self) -> bool:
        return self.cu_seqlens is not None

    def model_kwargs(self) -> dict[str, object]:
        """Keyword arguments for the decoder's forward."""
        if self.cu_seqlens is None:
            return {
                "input_ids": self.input_ids,
                "attention_mask": self.attention_mask,
                "position_ids": self.position_ids,
            }
        return {
            "input_ids": self.input_ids,
            "position_ids": self.position_ids,
            "cu_seq_lens_q": self.cu_seqlens,
            "cu_seq_lens_k": self.cu_seqlens,
            "max_length_q": self.max_sequence_length,
            "max_length_k": self.max_sequence_length,
        }

    def to_padded(self, values: Tensor) -> tuple[Tensor, Tensor]:
        """Per-completion-token values [M] -> ([S, T] right-padded with 0, mask [S, T]),
        T = the longest completion."""
        n, width = self.n_sequences, int(self.completion_lengths.max().clamp(min=1))
        starts = torch.cumsum(self.completion_lengths, 0) - self.completion_lengths
        column = torch.arange(values.shape[0], device=values.device) - starts[self.segment_ids]
        out = values.new_zeros(n, width)
        out[self.segment_ids, column] = values
        mask = torch.zeros(n, width, dtype=torch.bool, device=values.device)
        mask[self.segment_ids, column] = True
        return out, mask


def build_batch(
    sequences: Sequence[TokenizedSequence],
    *,
    packed: bool,
    pad_token_id: int,
    device: torch.device | str = "cpu",
) -> SequenceBatch:
    """Lay out ``sequences`` for one forward pass, packed (one row, no padding) or right-padded."""
    if not sequences:
        raise ValueError("no sequences to batch")
    lengths = [len(s.input_ids) for s in sequences]
    longest = max(lengths)
    row_width = sum(lengths) if packed else longest
    predict, targets, segments, completion_lengths, last = [], [], [], [], []
    offset = 0
    for index, seq in enumerate(sequences):
        base = offset if packed else index * row_width
        first = max(seq.prompt_length, 1)
        positions = range(first - 1, len(seq.input_ids) - 1)
        predict.extend(base + p for p in positions)
        targets.extend(seq.input_ids[first:])
        segments.extend([index] * len(positions))
        completion_lengths.append(len(positions))
        last.append(base + len(seq.input_ids) - 1)
        offset += len(seq.input_ids)

    if packed:
        input_ids = torch.tensor([[t for s in sequences for t in s.input_ids]])
        position_ids = torch.tensor([[p for n in lengths for p in range(n)]])
        attention_mask = None
        cu_seqlens = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    else:
        input_ids = torch.full((len(sequences), longest), pad_token_id)
        attention_mask = torch.zeros(len(sequences), longest, dtype=torch.long)
        for row, seq in enumerate(sequences):
            input_ids[row, : len(seq.input_ids)] = torch.tensor(seq.input_ids)
            attention_mask[row, : len(seq.input_ids)] = 1
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        cu_seqlens = None

    def on_device(values: list[int]) -> Tensor:
        return torch.tensor(values, dtype=torch.long, device=device)

    return SequenceBatch(
        input_ids=input_ids.to(device),
        position_ids=position_ids.to(device),
        attention_mask=None if attention_mask is None else attention_mask.to(device),
        cu_seqlens=None if cu_seqlens is None else cu_seqlens.to(device),
        max_sequence_length=longest,
        predict_index=on_device(predict),
        targets=on_device(targets),
        segment_ids=on_device(segments),
        completion_lengths=on_device(completion_lengths),
        last_index=on_device(last),
        n_tokens=sum(lengths),
    )


def supports_packing(model: torch.nn.Module) -> bool:
    """True for decoder-only models whose attention goes through transformers' attention interface
    (Llama, Qwen2, Mistral, Gemma, ... in transformers 5); False sends batches through padding."""
    config = getattr(model, "config", None)
    return bool(
        getattr(model, "_supports_attention_backend", False)
        and config is not None
        and not getattr(config, "is_encoder_decoder", False)
        and getattr(config, "model_type", "") not in {"bert", "roberta", "distilbert", "deberta"}
    )


def plain_output_weight(model: torch.nn.Module) -> Tensor | None:
    """The output embedding [V, H] when logits are exactly ``hidden @ W.T`` (no bias, no logit
    soft-capping or scaling), else None and callers compute the model's own logits."""
    head = model.get_output_embeddings()
    config = model.config
    plain = (
        isinstance(head, torch.nn.Linear)
        and head.bias is None
        and getattr(config, "final_logit_softcapping", None) is None
        and getattr(config, "logit_scale", None) in (None, 1.0)
        and getattr(config, "logits_scaling", None) in (None, 1.0)
    )
    return head.weight if plain else None


def last_hidden_states(model: torch.nn.Module, batch: SequenceBatch) -> Tensor:
    """The decoder's final hidden states, flattened to [N, H] (packed) or [S * L, H] (padded)."""
    output = model.base_model(**batch.model_kwargs(), use_cache=False)
    hidden = output.last_hidden_state
    return hidden.reshape(-1, hidden.shape[-1])


def completion_token_logprobs(
    model: torch.nn.Module,
    batch: SequenceBatch,
    hidden: Tensor | None = None,
    *,
    temperature: float = 1.0,
) -> Tensor:
    """log pi(completion token | everything before it) for every completion token: [M] float32.

    ``hidden`` [N, H] may be passed when the caller also needs it (value heads). ``temperature``
    scores the tempered policy softmax(logits / T) that sampling used. Models whose logits are not a
    plain projection (soft-capping, scaling) run their own full forward instead.
    """
    weight = plain_output_weight(model)
    if weight is None:
        logits = model(**batch.model_kwargs(), use_cache=False).logits
        logits = logits.reshape(-1, logits.shape[-1]).index_select(0, batch.predict_index)
        log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)
        return log_probs.gather(-1, batch.targets[:, None]).squeeze(-1)
    if hidden is None:
        hidden = last_hidden_states(model, batch)
    selected = hidden.index_select(0, batch.predict_index)
    if temperature != 1.0:
        selected = selected / temperature  # (h / T) W^T = (h W^T) / T
    return selected_logprobs(selected, weight, batch.targets)


def sequence_completion_logprobs(
    model: torch.nn.Module, batch: SequenceBatch, *, average: bool = False
) -> Tensor:
    """Summed (or length-averaged) completion log-probability per sequence: [S] float32."""
    per_token = completion_token_logprobs(model, batch)
    totals = segment_sum(per_token, batch.segment_ids, batch.n_sequences)
    if average:
        return totals / batch.completion_lengths.clamp(min=1)
    return totals
