"""Padding-free batches for causal LMs, and the forward passes that score completions.

Long module: one batch layout (packed rows, shared prompts, attention grids) and the forwards on it.

A batch of sequences becomes one row of N tokens with no padding; position ids restart for each
sequence. Linear layers (most of the work) then run on exactly the real tokens. Attention runs
causally inside each sequence: flash-attn's varlen kernel on CUDA when installed, else SDPA on the
sequences gathered into right-padded grids (only attention sees padding), sequences of similar length
sharing a grid (``length_buckets``), so the padding is small.

With ``share_prompts``, sequences with the same prompt (a DPO pair's chosen and rejected, RLOO's K
samples) hold that prompt once: the row is [prompt, completion 1, completion 2, ...], each completion
positioned right after the prompt and attending to the prompt and itself, never to its siblings. The
numbers are those of separate sequences; the prompt's work is done once (prefix sharing, as in
Wang et al. 2024, "Accelerating Direct Preference Optimization with Prefix Sharing").

Only the positions that predict completion tokens go through the output layer, and they go through
``selected_logprobs`` in chunks, so the N x V logits never exist at once and the prompt's logits are
never computed at all. Models without transformers' attention interface fall back to right padding.

Shapes: S sequences, N tokens in the packed row (or S x L when padded), M completion tokens, H hidden.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import torch
import torch.nn.functional as F
from torch import Tensor

from training.algorithms import segment_sum, selected_logprobs
from training.recipes.row_gather import RowGather, gather_rows

VARLEN_ATTENTION = "concord_varlen"


@dataclass(frozen=True)
class _Grid:
    """One SDPA call: ``rows`` right-padded rows of ``width`` slots gathered from the packed row."""

    gather: Tensor  # [rows * width] packed position read into each slot; n_tokens for padding
    rows: int
    width: int

    def key_mask(self, n_tokens: int) -> Tensor:
        """[rows, 1, 1, width]: True where the slot holds a real token (for bidirectional rows)."""
        return (self.gather < n_tokens).view(self.rows, 1, 1, self.width)

    def row_starts(self) -> Tensor:
        """[rows] packed position of each row's first token."""
        return self.gather.view(self.rows, self.width)[:, 0].contiguous()


@dataclass(frozen=True)
class PackedLayout:
    """How attention reads a packed row: grids of similar-length rows (with shared prompts, per
    completion slot) and where each packed position's output lies among their slots."""

    grids: tuple[_Grid, ...]
    n_tokens: int
    output_index: Tensor  # [N] slot of each position's output, grids flattened and concatenated
    shared: bool  # rows hold prompts whose outputs other rows provide (prompt sharing)

    @cached_property
    def _grid_gathers(self) -> tuple[RowGather, ...]:
        """Each grid's gather over the packed row plus its zero row (which gets no gradient); made
        once per batch, used by every layer's queries, keys and values."""
        return tuple(
            RowGather(grid.gather, self.n_tokens + 1, constant_from=self.n_tokens)
            for grid in self.grids
        )

    @cached_property
    def _output_gather(self) -> RowGather:
        slots = sum(grid.rows * grid.width for grid in self.grids)
        return RowGather(self.output_index, slots)

    def to_grids(self, x: Tensor) -> list[Tensor]:
        """x [N, heads, D] -> one [rows, heads, width, D] per grid, padding slots zero."""
        padded = torch.cat([x, x.new_zeros(1, *x.shape[1:])])
        return [
            gather_rows(padded, gather).view(grid.rows, grid.width, *x.shape[1:]).transpose(1, 2)
            for grid, gather in zip(self.grids, self._grid_gathers, strict=True)
        ]

    def from_grids(self, outputs: Sequence[Tensor]) -> Tensor:
        """One [rows, heads, width, D] per grid -> [N, heads, D] in packed order."""
        flat = [out.transpose(1, 2).reshape(-1, out.shape[1], out.shape[-1]) for out in outputs]
        return gather_rows(flat[0] if len(flat) == 1 else torch.cat(flat), self._output_gather)


def _grid_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    layout: PackedLayout,
    scaling: float | None,
    dropout: float,
    *,
    causal: bool = True,
) -> Tensor:
    """query, key, value: [1, heads, N, D] (key/value already repeated to all heads) -> [1, N, heads, D].

    Causal grids need no mask (a causal query never reaches a right-padded key). Bidirectional grids
    (encoders) mask the padded keys of each row; a padded query's output is never read back."""
    if not causal and layout.shared:
        raise ValueError(
            "bidirectional attention cannot share prompts (each token sees the whole row)"
        )
    grids = zip(
        layout.grids,
        *(layout.to_grids(x[0].transpose(0, 1)) for x in (query, key, value)),
        strict=True,
    )
    outputs = [
        F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=None if causal else grid.key_mask(layout.n_tokens),
            dropout_p=dropout,
            is_causal=causal,
            scale=scaling,
        )
        for grid, q, k, v in grids
    ]
    return layout.from_grids(outputs).unsqueeze(0)


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
    """Attention over a packed row described by ``concord_layout`` (see ``PackedLayout``).

    query: [1, heads, N, D]; key, value: [1, kv_heads, N, D] -> ([1, N, heads, D], None), the layout
    transformers' attention functions return. The packed positions are scattered into right-padded
    grids and one causal SDPA call runs per grid: the fused CPU/CUDA kernel (SDPA per sequence with
    grouped-query heads falls back to the slow math kernel on CPU). With right padding a causal query
    never sees a padded key, so this is exact. Without a layout (padded batches, generation with a
    cache) this is transformers' own SDPA attention.
    """
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    layout = kwargs.pop("concord_layout", None)
    if layout is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    n_rep = query.shape[1] // key.shape[1]
    key, value = repeat_kv(key, n_rep), repeat_kv(value, n_rep)
    dropout_p = dropout if module.training else 0.0
    return _grid_attention(query, key, value, layout, scaling, dropout_p, causal=causal), None


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
    installed (its varlen kernel reads the same position ids), else the grid SDPA."""
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
    def scored_from(self) -> int:
        """First token with a log-probability (the first token of a sequence never has one)."""
        return max(self.prompt_length, 1)

    @property
    def completion_length(self) -> int:
        return len(self.input_ids) - self.scored_from


@dataclass
class SequenceBatch:
    """Model inputs for S sequences plus the indices that pick completion predictions out of the
    flattened last hidden states ([N, H] packed, [S * L, H] padded)."""

    input_ids: Tensor  # [1, N] packed or [S, L] padded
    position_ids: Tensor  # same shape as input_ids
    attention_mask: Tensor | None  # [S, L] when padded, None when packed
    layout: PackedLayout | None  # how attention reads the packed row; None when padded
    cu_seqlens: (
        Tensor | None
    )  # [S + 1] int32 sequence boundaries, packed without sharing (flash-attn)
    max_sequence_length: int
    predict_index: Tensor  # [M] flat rows of the hidden states that predict a completion token
    targets: Tensor  # [M] the completion tokens they predict
    segment_ids: Tensor  # [M] which sequence each completion token belongs to
    completion_lengths: Tensor  # [S] completion tokens per sequence
    last_index: Tensor  # [S] flat row of each sequence's last token (for reward and value heads)
    n_tokens: int  # tokens the model runs on (padding excluded, shared prompts counted once)

    @property
    def n_sequences(self) -> int:
        return int(self.completion_lengths.shape[0])

    @property
    def packed(self) -> bool:
        return self.layout is not None

    def model_kwargs(self) -> dict[str, object]:
        """Keyword arguments for the decoder's forward."""
        if self.layout is None:
            return {
                "input_ids": self.input_ids,
                "attention_mask": self.attention_mask,
                "position_ids": self.position_ids,
            }
        kwargs: dict[str, object] = {
            "input_ids": self.input_ids,
            "position_ids": self.position_ids,
            "concord_layout": self.layout,
        }
        if self.cu_seqlens is not None:
            kwargs.update(
                cu_seq_lens_q=self.cu_seqlens,
                cu_seq_lens_k=self.cu_seqlens,
                max_length_q=self.max_sequence_length,
                max_length_k=self.max_sequence_length,
            )
        return kwargs

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


GRID_CALL_COST = 128 * 128  # a grid's fixed cost (call, gathers) in query-key pairs per head
GRID_SLOT_COST = 16  # a padded grid slot's fill and copy cost, in query-key pairs per head


def length_buckets(
    widths: Sequence[int], *, call_cost: int | None = None, slot_cost: int | None = None
) -> list[list[int]]:
    """Split rows of the given widths into grids of similar width, so attention pads less.

    One grid of R rows and width W costs R * (W**2 + slot_cost * W) + call_cost, in query-key pairs
    per head as SDPA runs it on the padded grid (costs default to the module's constants). Exact
    dynamic programme over the rows sorted by width (an optimal split is contiguous in that order):
    O(R**2). Returns row indices per grid, narrowest grid first, each grid's rows in their original
    order; every row appears once."""
    call_cost = GRID_CALL_COST if call_cost is None else call_cost
    slot_cost = GRID_SLOT_COST if slot_cost is None else slot_cost
    order = sorted(range(len(widths)), key=lambda i: widths[i])
    n = len(order)
    best = [0.0] + [float("inf")] * n  # best[j]: cheapest split of the j narrowest rows
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        width = widths[order[j - 1]]
        per_row = width * width + slot_cost * width
        for i in range(j):
            cost = best[i] + (j - i) * per_row + call_cost
            if cost < best[j]:
                best[j], cut[j] = cost, i
    buckets = []
    j = n
    while j > 0:
        buckets.append(sorted(order[cut[j] : j]))
        j = cut[j]
    return buckets[::-1]


def _packed_layout(
    groups: list[tuple[int, list[int]]],
    branch_starts: list[list[int]],
    branch_lengths: list[list[int]],
    n_tokens: int,
    device: torch.device | str,
) -> PackedLayout:
    """Grids for groups of (prefix start, member indices) with their branches' starts and lengths.
    A grid row is a prefix followed by one branch (completion slot k of its group; without shared
    prompts every group has one slot); each slot's rows go into ``length_buckets`` grids of similar
    width. A shared prefix's outputs come from slot 0's rows."""
    slots = max(len(members) for _, members in groups)
    grid_rows: list[tuple[list[tuple[int, int]], int]] = []  # ((group, slot) per row, width)
    for slot in range(slots):
        members = [g for g in range(len(groups)) if len(groups[g][1]) > slot]
        widths = [branch_starts[g][0] - groups[g][0] + branch_lengths[g][slot] for g in members]
        for bucket in length_buckets(widths):
            grid_rows.append(([(members[i], slot) for i in bucket], max(widths[i] for i in bucket)))
    grids = []
    output_index = [0] * n_tokens
    offset = 0
    for rows, width in grid_rows:
        gather = []
        for row, (g, slot) in enumerate(rows):
            start = groups[g][0]
            prefix = branch_starts[g][0] - start
            branch = branch_starts[g][slot]
            positions = [
                *range(start, start + prefix),
                *range(branch, branch + branch_lengths[g][slot]),
            ]
            gather.extend(positions)
            gather.extend([n_tokens] * (width - len(positions)))
            for j in range(0 if slot == 0 else prefix, len(positions)):
                output_index[positions[j]] = offset + row * width + j
        grids.append(_Grid(torch.tensor(gather, dtype=torch.long, device=device), len(rows), width))
        offset += len(rows) * width
    return PackedLayout(
        tuple(grids),
        n_tokens,
        torch.tensor(output_index, dtype=torch.long, device=device),
        shared=slots > 1,
    )


@dataclass
class _PackedRow:
    """One packed row: each group's prompt once, then its members' completions one after another.

    ``tokens``/``positions`` [N]; per group, its start and members (``group_rows``), each member's
    branch start and length; per sequence, the row indices that predict its completion tokens
    (``predict``), its last token's index (``last``) and its completion length (``lengths``)."""

    tokens: list[int]
    positions: list[int]
    group_rows: list[tuple[int, list[int]]]
    branch_starts: list[list[int]]
    branch_lengths: list[list[int]]
    predict: list[list[int]]
    last: list[int]
    lengths: list[int]

    @classmethod
    def lay_out(cls, sequences: Sequence[TokenizedSequence], groups: list[list[int]]) -> _PackedRow:
        """``groups``: lists of indices into ``sequences`` that share their prompt."""
        n = len(sequences)
        row = cls([], [], [], [], [], [[] for _ in range(n)], [0] * n, [0] * n)
        tokens, positions = row.tokens, row.positions
        for members in groups:
            first = sequences[members[0]]
            prefix = first.input_ids[: first.scored_from]
            start = len(tokens)
            tokens.extend(prefix)
            positions.extend(range(len(prefix)))
            starts, sizes = [], []
            for index in members:
                completion = sequences[index].input_ids[len(prefix) :]
                branch = len(tokens)
                tokens.extend(completion)
                positions.extend(range(len(prefix), len(prefix) + len(completion)))
                starts.append(branch)
                sizes.append(len(completion))
                # Token j of the completion is predicted by the one before it: the prompt's last
                # token for j = 0, else completion token j - 1.
                row.predict[index] = [
                    branch - 1 if j == 0 else branch + j - 1 for j in range(len(completion))
                ]
                if completion:
                    row.predict[index][0] = start + len(prefix) - 1
                row.last[index] = (
                    branch + len(completion) - 1 if completion else start + len(prefix) - 1
                )
                row.lengths[index] = len(completion)
            row.group_rows.append((start, members))
            row.branch_starts.append(starts)
            row.branch_lengths.append(sizes)
        return row


def build_batch(
    sequences: Sequence[TokenizedSequence],
    *,
    packed: bool,
    pad_token_id: int,
    device: torch.device | str = "cpu",
    share_prompts: bool = False,
) -> SequenceBatch:
    """Lay out ``sequences`` for one forward pass: packed (one row, no padding; with
    ``share_prompts``, one copy of each distinct prompt) or right-padded."""
    if not sequences:
        raise ValueError("no sequences to batch")
    if not packed:
        return _padded_batch(sequences, pad_token_id=pad_token_id, device=device)

    groups: dict[tuple[int, ...], list[int]] = {}
    for index, seq in enumerate(sequences):
        prefix = tuple(seq.input_ids[: seq.scored_from])
        key = prefix if share_prompts else (index, *prefix)
        groups.setdefault(key, []).append(index)
    row = _PackedRow.lay_out(sequences, list(groups.values()))
    tokens, positions, lengths = row.tokens, row.positions, row.lengths
    shared = any(len(members) > 1 for members in groups.values())
    sequence_lengths = [len(s.input_ids) for s in sequences]
    cu_seqlens = None
    if not shared:
        cu_seqlens = torch.tensor(
            [0, *torch.tensor(sequence_lengths).cumsum(0).tolist()],
            dtype=torch.int32,
            device=device,
        )
    targets = [t for s in sequences for t in s.input_ids[s.scored_from :]]
    segments = [i for i, n in enumerate(lengths) for _ in range(n)]

    def on_device(values: list[int]) -> Tensor:
        return torch.tensor(values, dtype=torch.long, device=device)

    return SequenceBatch(
        input_ids=torch.tensor([tokens], device=device),
        position_ids=torch.tensor([positions], device=device),
        attention_mask=None,
        layout=_packed_layout(
            row.group_rows, row.branch_starts, row.branch_lengths, len(tokens), device
        ),
        cu_seqlens=cu_seqlens,
        max_sequence_length=max(sequence_lengths),
        predict_index=on_device([p for index in range(len(sequences)) for p in row.predict[index]]),
        targets=on_device(targets),
        segment_ids=on_device(segments),
        completion_lengths=on_device(lengths),
        last_index=on_device(row.last),
        n_tokens=len(tokens),
    )


def _padded_batch(
    sequences: Sequence[TokenizedSequence], *, pad_token_id: int, device: torch.device | str
) -> SequenceBatch:
    lengths = [len(s.input_ids) for s in sequences]
    width = max(lengths)
    input_ids = torch.full((len(sequences), width), pad_token_id)
    attention_mask = torch.zeros(len(sequences), width, dtype=torch.long)
    predict, targets, segments, completion_lengths, last = [], [], [], [], []
    for row, seq in enumerate(sequences):
        input_ids[row, : len(seq.input_ids)] = torch.tensor(seq.input_ids)
        attention_mask[row, : len(seq.input_ids)] = 1
        base = row * width
        predict.extend(base + p for p in range(seq.scored_from - 1, len(seq.input_ids) - 1))
        targets.extend(seq.input_ids[seq.scored_from :])
        segments.extend([row] * seq.completion_length)
        completion_lengths.append(seq.completion_length)
        last.append(base + len(seq.input_ids) - 1)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)

    def on_device(values: list[int]) -> Tensor:
        return torch.tensor(values, dtype=torch.long, device=device)

    return SequenceBatch(
        input_ids=input_ids.to(device),
        position_ids=position_ids.to(device),
        attention_mask=attention_mask.to(device),
        layout=None,
        cu_seqlens=None,
        max_sequence_length=width,
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


def can_share_prompts(model: torch.nn.Module) -> bool:
    """Prompt sharing needs the grid attention (flash-attn's varlen kernel reads boundaries only)."""
    return getattr(model.config, "_attn_implementation", None) == VARLEN_ATTENTION


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


def decoder_stack(model: torch.nn.Module) -> torch.nn.Module:
    """The decoder without its output layer (transformers' ``base_model``, e.g. LlamaModel) of a
    causal LM, of one wrapped in LoRA adapters (a peft model's own ``base_model`` is the adapter
    holder, not the decoder), or of a ``lora.BaseModelView`` (which runs it adapters-off)."""
    if hasattr(model, "get_base_model"):  # peft.PeftModel
        model = model.get_base_model()
    return model.base_model  # type: ignore[return-value]


def last_hidden_states(model: torch.nn.Module, batch: SequenceBatch) -> Tensor:
    """The decoder's final hidden states, flattened to [N, H] (packed) or [S * L, H] (padded)."""
    kwargs = batch.model_kwargs()
    if not can_share_prompts(model):  # flash-attn reads cu_seq_lens; the grid layout is ours
        kwargs.pop("concord_layout", None)
    output = decoder_stack(model)(**kwargs, use_cache=False)
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
        kwargs = batch.model_kwargs()
        if not can_share_prompts(model):
            kwargs.pop("concord_layout", None)
        logits = model(**kwargs, use_cache=False).logits
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


PACKABLE_ENCODERS = frozenset({"BertForSequenceClassification"})


def supports_encoder_packing(model: torch.nn.Module) -> bool:
    """True for BERT-family sequence classifiers (MiniLM) loaded with the grid attention: their
    linear layers then run on the real tokens only, and attention on per-row grids with the padded
    keys masked (the unpadding of Zeng et al. 2022, "Boosting distributed training performance of
    the unpadded BERT model", done with stock transformers modules)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model  # LoRA
    return (
        type(inner).__name__ in PACKABLE_ENCODERS
        and getattr(model.config, "_attn_implementation", None) == VARLEN_ATTENTION
        and not getattr(model.config, "is_decoder", False)
        and not getattr(model.config, "add_cross_attention", False)
    )


def _first_token_layer(
    layer: torch.nn.Module, hidden: Tensor, first: Tensor, layout: PackedLayout
) -> Tensor:
    """One BERT layer evaluated for each sequence's first token only: hidden [N, H] (packed, the
    layer's input), first [S] (packed row of each sequence's [CLS], ascending) -> [S, H], the
    layer's output at those rows.

    The pooler reads nothing else of the last layer, so its query, attention-output and feed-forward
    products run on S rows instead of N; keys and values still cover every real token. Each [CLS]
    query attends to its own row of its grid (padded keys masked), as in the full layer."""
    attention = layer.attention.self  # type: ignore[union-attr]
    heads, head_dim = attention.num_attention_heads, attention.attention_head_size
    split = (-1, heads, head_dim)
    keys = layout.to_grids(attention.key(hidden).view(split))
    values = layout.to_grids(attention.value(hidden).view(split))
    cls = hidden.index_select(0, first)  # [S, H]
    queries = attention.query(cls).view(split)  # [S, heads, D]
    dropout = attention.dropout.p if attention.training else 0.0
    parts, members = [], []
    for grid, key, value in zip(layout.grids, keys, values, strict=True):
        rows = torch.searchsorted(first, grid.row_starts())  # [rows] which sequences they are
        attended = F.scaled_dot_product_attention(
            queries.index_select(0, rows).unsqueeze(2),  # [rows, heads, 1, D]
            key,
            value,
            attn_mask=grid.key_mask(layout.n_tokens),
            dropout_p=dropout,
            scale=attention.scaling,
        )
        parts.append(attended.reshape(grid.rows, heads * head_dim))
        members.append(rows)
    context = torch.cat(parts).index_select(0, torch.argsort(torch.cat(members)))  # [S, heads * D]
    attended = layer.attention.output(context, cls)  # type: ignore[union-attr]
    return layer.feed_forward_chunk(attended)  # type: ignore[operator]


def packed_encoder_logits(
    model: torch.nn.Module,
    input_ids: Sequence[Sequence[int]],
    token_type_ids: Sequence[Sequence[int] | None],
) -> Tensor:
    """A BERT sequence classifier's logits [S, labels] for S unpadded sequences, equal to its padded
    forward: position ids restart per sequence, each row's [CLS] (first token) is pooled. The last
    layer runs for the [CLS] rows only (``_first_token_layer``): the same logits and gradients as
    the full layer, with about a sixth less arithmetic on MiniLM's six layers."""
    device = next(model.parameters()).device
    sequences = [TokenizedSequence(tuple(ids), len(ids)) for ids in input_ids]
    batch = build_batch(sequences, packed=True, pad_token_id=0, device=device)
    assert batch.layout is not None
    types = [
        t
        for ids, kinds in zip(input_ids, token_type_ids, strict=True)
        for t in (kinds if kinds is not None else [0] * len(ids))
    ]
    lengths = torch.tensor([len(ids) for ids in input_ids], device=device)
    first = batch.last_index - lengths + 1
    encoder = model.bert  # type: ignore[attr-defined]
    hidden = encoder.embeddings(
        input_ids=batch.input_ids,
        token_type_ids=torch.tensor([types], device=device),
        position_ids=batch.position_ids,
    )  # [1, N, H]
    *layers, last = encoder.encoder.layer
    for layer in layers:
        hidden = layer(hidden, None, concord_layout=batch.layout)
    cls = _first_token_layer(last, hidden[0], first, batch.layout)  # [S, H]
    pooled = encoder.pooler(cls[:, None, :]) if encoder.pooler is not None else cls
    return model.classifier(model.dropout(pooled))  # type: ignore[attr-defined]
