"""A Llama-family forward pass written against a preallocated KV cache, for the static rollout engine
(``engine_static``): the same arithmetic as transformers' ``LlamaForCausalLM`` (RMSNorm in float32,
rotary embeddings from the model's own inverse frequencies, grouped-query attention, gated MLP), on
a snapshot of the policy's current weights in the engine's dtype.

transformers' own forward keeps a cache per call whose rows all sit at one position; here every
row of the cache (a *slot*) has its own position, so a finished row's slot can take a new prompt
while the others keep decoding (continuous batching).

Shapes: S cache slots, B active slots (the first B), L layers, H query heads, K key/value heads,
D head size, C the cache's length in positions, P a prompt's length, V the vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer's tensors, the query, key and value projections stacked into one matrix
    [(H + 2K) D, hidden] and the gate and up projections into one [2I, hidden] (one matrix product
    each instead of three and two: fewer, larger operations per step); biases None where the
    model has none."""

    input_norm: Tensor
    qkv: Tensor
    qkv_bias: Tensor | None
    o: Tensor
    o_bias: Tensor | None
    post_norm: Tensor
    gate_up: Tensor
    down: Tensor


@dataclass(frozen=True)
class LlamaWeights:
    """A snapshot of a LlamaForCausalLM's weights in one dtype (no copy where the model already
    holds that dtype), with what the forward needs from its config."""

    embed: Tensor  # [V, hidden]
    layers: tuple[LayerWeights, ...]
    norm: Tensor
    lm_head: Tensor  # [V, hidden]
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    act: Any  # the MLP's activation (transformers' ACT2FN entry)
    inv_freq: Tensor  # [D / 2] float32
    rope_scaling: float

    @classmethod
    def snapshot(cls, model: Any, dtype: torch.dtype) -> LlamaWeights:
        """The current weights of ``model`` (a LlamaForCausalLM) in ``dtype``."""
        from transformers.activations import ACT2FN

        config, inner = model.config, model.model

        def cast(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.detach().to(dtype)

        def stack(*tensors: Tensor) -> Tensor:
            return torch.cat([t.detach() for t in tensors]).to(dtype)

        layers = []
        for layer in inner.layers:
            attn, mlp = layer.self_attn, layer.mlp
            projections = (attn.q_proj, attn.k_proj, attn.v_proj)
            biases = [p.bias for p in projections]
            qkv_bias = None
            if any(b is not None for b in biases):
                qkv_bias = stack(
                    *(
                        torch.zeros_like(p.weight[:, 0]) if b is None else b
                        for p, b in zip(projections, biases, strict=True)
                    )
                )
            layers.append(
                LayerWeights(
                    input_norm=cast(layer.input_layernorm.weight),
                    qkv=stack(*(p.weight for p in projections)),
                    qkv_bias=qkv_bias,
                    o=cast(attn.o_proj.weight),
                    o_bias=cast(attn.o_proj.bias),
                    post_norm=cast(layer.post_attention_layernorm.weight),
                    gate_up=stack(mlp.gate_proj.weight, mlp.up_proj.weight),
                    down=cast(mlp.down_proj.weight),
                )
            )
        heads = config.num_attention_heads
        rotary = inner.rotary_emb
        return cls(
            embed=cast(inner.embed_tokens.weight),
            layers=tuple(layers),
            norm=cast(inner.norm.weight),
            lm_head=cast(model.lm_head.weight),
            heads=heads,
            kv_heads=config.num_key_value_heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
            eps=inner.norm.variance_epsilon,
            act=ACT2FN[config.hidden_act],
            inv_freq=rotary.inv_freq.detach().float(),
            rope_scaling=float(getattr(rotary, "attention_scaling", 1.0)),
        )

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.dtype

    @property
    def device(self) -> torch.device:
        return self.embed.device

    def rope_tables(self, length: int) -> tuple[Tensor, Tensor]:
        """cos and sin [length, D] of positions 0..length-1, in the weights' dtype (transformers
        computes them in float32 and casts)."""
        positions = torch.arange(length, device=self.device, dtype=torch.float32)
        freqs = positions[:, None] * self.inv_freq.to(self.device)[None, :]
        angles = torch.cat([freqs, freqs], dim=-1)
        cos = (angles.cos() * self.rope_scaling).to(self.dtype)
        sin = (angles.sin() * self.rope_scaling).to(self.dtype)
        return cos, sin


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """transformers' LlamaRMSNorm: normalised in float32, cast back, then scaled."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def _rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x * cos + rotate_half(x) * sin over the last dimension (D)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def _mlp(w: LayerWeights, x: Tensor, act: Any) -> Tensor:
    gate, up = F.linear(x, w.gate_up).chunk(2, dim=-1)
    return F.linear(act(gate) * up, w.down)


def _gqa(keys: Tensor, heads: int) -> Tensor:
    """[B, K, C, D] -> [B, H, C, D], each key/value head repeated for its group of query heads."""
    groups = heads // keys.shape[1]
    return keys if groups == 1 else keys.repeat_interleave(groups, dim=1)


@torch.no_grad()
def prefill(
    weights: LlamaWeights, prompts: list[list[int]], cos: Tensor, sin: Tensor
) -> tuple[list[Tensor], list[Tensor], Tensor]:
    """U prompts in one forward pass, right-padded to the longest (P), so each prompt's tokens
    see exactly the causal attention an unpadded pass gives them -> (keys and values per layer
    [U, K, P, D], positions past a prompt's end are padding and never read; the logits at each
    prompt's last token [U, V] float32). ``cos``/``sin``: ``rope_tables`` covering P."""
    u, p = len(prompts), max(len(ids) for ids in prompts)
    heads, kv, d = weights.heads, weights.kv_heads, weights.head_dim
    ids = torch.zeros(u, p, dtype=torch.long, device=weights.device)
    for row, prompt in enumerate(prompts):
        ids[row, : len(prompt)] = torch.tensor(prompt, device=weights.device)
    x = F.embedding(ids, weights.embed)
    c, s = cos[None, :p, None], sin[None, :p, None]
    keys, values = [], []
    for w in weights.layers:
        h = rms_norm(x, w.input_norm, weights.eps)
        qkv = F.linear(h, w.qkv, w.qkv_bias).view(u, p, heads + 2 * kv, d)
        qk = _rope(qkv[:, :, : heads + kv], c, s).transpose(1, 2)  # [U, H + K, P, D]
        q, k = qk[:, :heads], qk[:, heads:]
        v = qkv[:, :, heads + kv :].transpose(1, 2)
        keys.append(k)
        values.append(v)
        attn = F.scaled_dot_product_attention(
            q, _gqa(k, heads), _gqa(v, heads), is_causal=True, scale=d**-0.5
        )
        x = x + F.linear(attn.transpose(1, 2).reshape(u, p, heads * d), w.o, w.o_bias)
        x = x + _mlp(w, rms_norm(x, w.post_norm, weights.eps), weights.act)
    ends = torch.tensor([len(ids) - 1 for ids in prompts], device=weights.device)
    last = rms_norm(x[torch.arange(u, device=weights.device), ends], weights.norm, weights.eps)
    return keys, values, F.linear(last, weights.lm_head).float()


def decode_step(
    weights: LlamaWeights,
    tokens: Tensor,
    positions: Tensor,
    cos: Tensor,
    sin: Tensor,
    keys: list[Tensor],
    values: list[Tensor],
    length: int,
) -> Tensor:
    """One token for each of the first B slots: ``tokens`` [B] at ``positions`` [B] (long) are
    written into the caches ``keys``/``values`` (per layer [S, K, C, D], contiguous) and attend
    to their slot's positions 0..position; -> logits [B, V] float32. ``length`` (<= C) bounds the
    positions read (every position + 1 fits in it).

    The hidden state stays [B, hidden] (no length axis), each layer runs three matrix products
    besides attention's two, and the cache is written with one ``index_copy_`` per tensor: the
    rows of the cache seen as [S K C, D] that the B x K new keys (values) go to."""
    b = tokens.shape[0]
    heads, kv, d = weights.heads, weights.kv_heads, weights.head_dim
    groups, capacity = heads // kv, keys[0].shape[2]
    x = F.embedding(tokens, weights.embed)  # [B, hidden]
    c, s = cos[positions][:, None], sin[positions][:, None]  # [B, 1, D]
    heads_of = torch.arange(kv, device=tokens.device)
    slots = torch.arange(b, device=tokens.device)
    rows = ((slots[:, None] * kv + heads_of[None, :]) * capacity + positions[:, None]).view(-1)
    # [B, 1, 1, length] float32: 0 where a slot reads the position, -inf past its own
    hidden = torch.arange(length, device=tokens.device)[None, :] > positions[:, None]
    bias = torch.zeros(hidden.shape, device=tokens.device).masked_fill_(hidden, float("-inf"))
    bias = bias[:, None, None]
    scale = d**-0.5
    for w, cache_k, cache_v in zip(weights.layers, keys, values, strict=True):
        h = rms_norm(x, w.input_norm, weights.eps)
        qkv = F.linear(h, w.qkv, w.qkv_bias).view(b, heads + 2 * kv, d)
        qk = _rope(qkv[:, : heads + kv], c, s)  # [B, H + K, D]
        cache_k.view(-1, d).index_copy_(0, rows, qk[:, heads:].reshape(b * kv, d))
        cache_v.view(-1, d).index_copy_(0, rows, qkv[:, heads + kv :].reshape(b * kv, d))
        # Grouped-query attention without repeating the cache: each key/value head's G query
        # heads are the rows of one [G, D] x [D, length] product.
        q = qk[:, :heads].reshape(b, kv, groups, d)
        scores = torch.matmul(q, cache_k[:b, :, :length].transpose(2, 3)).float()
        probs = torch.softmax(scores.mul_(scale).add_(bias), dim=-1).to(x.dtype)
        attn = torch.matmul(probs, cache_v[:b, :, :length])  # [B, K, G, D]
        x = x + F.linear(attn.reshape(b, heads * d), w.o, w.o_bias)
        x = x + _mlp(w, rms_norm(x, w.post_norm, weights.eps), weights.act)
    return F.linear(rms_norm(x, weights.norm, weights.eps), weights.lm_head).float()
