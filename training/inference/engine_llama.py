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
    """One decoder layer's tensors (biases None where the model has none)."""

    input_norm: Tensor
    q: Tensor
    k: Tensor
    v: Tensor
    o: Tensor
    q_bias: Tensor | None
    k_bias: Tensor | None
    v_bias: Tensor | None
    o_bias: Tensor | None
    post_norm: Tensor
    gate: Tensor
    up: Tensor
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

        layers = []
        for layer in inner.layers:
            attn, mlp = layer.self_attn, layer.mlp
            layers.append(
                LayerWeights(
                    cast(layer.input_layernorm.weight),
                    cast(attn.q_proj.weight),
                    cast(attn.k_proj.weight),
                    cast(attn.v_proj.weight),
                    cast(attn.o_proj.weight),
                    cast(attn.q_proj.bias),
                    cast(attn.k_proj.bias),
                    cast(attn.v_proj.bias),
                    cast(attn.o_proj.bias),
                    cast(layer.post_attention_layernorm.weight),
                    cast(mlp.gate_proj.weight),
                    cast(mlp.up_proj.weight),
                    cast(mlp.down_proj.weight),
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


def _rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    return x * cos + _rotate_half(x) * sin


def _mlp(w: LayerWeights, x: Tensor, act: Any) -> Tensor:
    return F.linear(act(F.linear(x, w.gate)) * F.linear(x, w.up), w.down)


def _qkv(w: LayerWeights, h: Tensor, weights: LlamaWeights) -> tuple[Tensor, Tensor, Tensor]:
    """[B, T, hidden] -> q [B, H, T, D], k and v [B, K, T, D]."""
    b, t, _ = h.shape
    d = weights.head_dim
    q = F.linear(h, w.q, w.q_bias).view(b, t, weights.heads, d).transpose(1, 2)
    k = F.linear(h, w.k, w.k_bias).view(b, t, weights.kv_heads, d).transpose(1, 2)
    v = F.linear(h, w.v, w.v_bias).view(b, t, weights.kv_heads, d).transpose(1, 2)
    return q, k, v


def _attention_out(w: LayerWeights, attn: Tensor) -> Tensor:
    """[B, H, T, D] -> [B, T, hidden] through the output projection."""
    b, _, t, _ = attn.shape
    return F.linear(attn.transpose(1, 2).reshape(b, t, -1), w.o, w.o_bias)


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
    ids = torch.zeros(u, p, dtype=torch.long, device=weights.device)
    for row, prompt in enumerate(prompts):
        ids[row, : len(prompt)] = torch.tensor(prompt, device=weights.device)
    x = F.embedding(ids, weights.embed)
    c, s = cos[None, None, :p], sin[None, None, :p]
    keys, values = [], []
    for w in weights.layers:
        h = rms_norm(x, w.input_norm, weights.eps)
        q, k, v = _qkv(w, h, weights)
        q, k = _rope(q, c, s), _rope(k, c, s)
        keys.append(k)
        values.append(v)
        attn = F.scaled_dot_product_attention(
            q, _gqa(k, weights.heads), _gqa(v, weights.heads), is_causal=True,
            scale=weights.head_dim**-0.5,
        )  # fmt: skip
        x = x + _attention_out(w, attn)
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
    written into the caches ``keys``/``values`` (per layer [S, K, C, D]) and attend to their slot's
    positions 0..position; -> logits [B, V] float32. ``length`` (<= C) bounds the positions read
    (every position + 1 fits in it)."""
    b = tokens.shape[0]
    kv, d = weights.kv_heads, weights.head_dim
    groups = weights.heads // kv
    x = F.embedding(tokens[:, None], weights.embed)
    c, s = cos[positions][:, None, None], sin[positions][:, None, None]
    slots = torch.arange(b, device=tokens.device)
    # [B, 1, 1, C]: each slot reads its own positions 0..position
    hidden = torch.arange(length, device=tokens.device)[None, :] > positions[:, None]
    hidden = hidden[:, None, None]
    for w, cache_k, cache_v in zip(weights.layers, keys, values, strict=True):
        h = rms_norm(x, w.input_norm, weights.eps)
        q, k, v = _qkv(w, h, weights)
        q, k = _rope(q, c, s), _rope(k, c, s)
        cache_k[slots, :, positions] = k[:, :, 0]
        cache_v[slots, :, positions] = v[:, :, 0]
        # Grouped-query attention without repeating the cache: each key/value head's G query
        # heads are the rows of one [G, D] x [D, C] product.
        scores = torch.matmul(q.view(b, kv, groups, d), cache_k[:b, :, :length].transpose(2, 3))
        scores = (scores * d**-0.5).masked_fill(hidden, float("-inf"))
        probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        attn = torch.matmul(probs, cache_v[:b, :, :length]).view(b, weights.heads, 1, d)
        x = x + _attention_out(w, attn)
        x = x + _mlp(w, rms_norm(x, w.post_norm, weights.eps), weights.act)
    return F.linear(rms_norm(x[:, 0], weights.norm, weights.eps), weights.lm_head).float()
