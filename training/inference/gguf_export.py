"""Writing a plain Llama-family policy's current weights as a GGUF file that llama.cpp loads (the
llama.cpp rollout engine's weight push), the reverse of ``transformers``' GGUF loading.

The file holds what llama.cpp's ``llama`` architecture reads: the hyper-parameters, every weight
under llama.cpp's names (the query and key projections' rows permuted from transformers' rotate-half
layout to llama.cpp's interleaved pairs), and a vocabulary of V placeholder tokens: the engine
hands llama.cpp token ids and never asks it to tokenise or detokenise text.

Precisions: ``f32``, ``bf16`` or ``f16`` for the matrices (norm weights always float32, as in
llama.cpp's own converter).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from training.inference.engine import static_supported

PRECISIONS = ("f32", "bf16", "f16")

# The writer logs three INFO lines a file; a run pushes its weights once per optimiser step.
logging.getLogger("gguf.gguf_writer").setLevel(logging.WARNING)


def interleave_rotary_rows(weight: Tensor, heads: int) -> Tensor:
    """A query or key projection [heads x D, hidden] with each head's rows reordered from
    transformers' rotate-half layout (the first D/2 rows pair with the last D/2) to llama.cpp's
    interleaved one (rows 2i and 2i+1 pair): row order per head 0, D/2, 1, D/2 + 1, ..."""
    rows, *rest = weight.shape
    head_dim = rows // heads
    if head_dim * heads != rows or head_dim % 2:
        raise ValueError(f"{rows} rows do not split into {heads} heads of an even size")
    return weight.reshape(heads, 2, head_dim // 2, *rest).transpose(1, 2).reshape(weight.shape)


def _rope_theta(config: Any) -> float:
    parameters = getattr(config, "rope_parameters", None) or {}
    return float(parameters.get("rope_theta", getattr(config, "rope_theta", 10000.0)))


def _matrix(tensor: Tensor, precision: str) -> tuple[np.ndarray, Any]:
    """(the array to write, its GGML type or None for numpy's own)."""
    import gguf

    tensor = tensor.detach().cpu()
    if precision == "bf16":
        bits = tensor.to(torch.bfloat16).contiguous().view(torch.int16).numpy().view(np.uint16)
        return bits, gguf.GGMLQuantizationType.BF16
    if precision == "f16":
        return tensor.to(torch.float16).contiguous().numpy(), None
    return tensor.float().contiguous().numpy(), None


def export_gguf(policy: Any, path: Path, precision: str = "f32") -> Path:
    """Write ``policy`` (a plain Llama-family causal LM, ``engine.static_supported``) to ``path``
    as a GGUF file with its matrices in ``precision``; returns ``path``. Raises ValueError for
    another model or precision, or a model llama.cpp's ``llama`` architecture cannot express
    (biases, rope scaling other than the default)."""
    import gguf

    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    reason = static_supported(policy)
    if reason is not None:
        raise ValueError(f"cannot write this policy as GGUF: {reason}")
    config = policy.config
    parameters = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    rope_type = (parameters or {}).get("rope_type", "default")
    if rope_type != "default":
        raise ValueError(f"cannot write rope scaling {rope_type!r} as GGUF (only the default)")
    if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
        raise ValueError("cannot write a Llama with attention or MLP biases as GGUF")
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    vocab = config.vocab_size
    writer = gguf.GGUFWriter(str(path), "llama", use_temp_file=False)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(_rope_theta(config))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_vocab_size(vocab)
    writer.add_file_type(
        {"f32": gguf.LlamaFileType.ALL_F32, "bf16": gguf.LlamaFileType.MOSTLY_BF16,
         "f16": gguf.LlamaFileType.MOSTLY_F16}[precision]
    )  # fmt: skip
    writer.add_tokenizer_model("llama")
    writer.add_token_list([f"<t{i}>".encode() for i in range(vocab)])
    writer.add_token_scores([0.0] * vocab)
    writer.add_token_types([int(gguf.TokenType.NORMAL)] * vocab)
    writer.add_bos_token_id(int(config.bos_token_id or 0))
    writer.add_eos_token_id(int(_first(config.eos_token_id) or 0))

    def put(name: str, tensor: Tensor, matrix: bool = True) -> None:
        array, raw = _matrix(tensor, precision if matrix else "f32")
        writer.add_tensor(name, array, raw_dtype=raw)

    inner = policy.model
    put("token_embd.weight", inner.embed_tokens.weight)
    put("output_norm.weight", inner.norm.weight, matrix=False)
    if not getattr(config, "tie_word_embeddings", False):
        put("output.weight", policy.lm_head.weight)
    for i, layer in enumerate(inner.layers):
        attn, mlp = layer.self_attn, layer.mlp
        put(f"blk.{i}.attn_norm.weight", layer.input_layernorm.weight, matrix=False)
        put(f"blk.{i}.attn_q.weight", interleave_rotary_rows(attn.q_proj.weight, heads))
        put(f"blk.{i}.attn_k.weight", interleave_rotary_rows(attn.k_proj.weight, kv_heads))
        put(f"blk.{i}.attn_v.weight", attn.v_proj.weight)
        put(f"blk.{i}.attn_output.weight", attn.o_proj.weight)
        put(f"blk.{i}.ffn_norm.weight", layer.post_attention_layernorm.weight, matrix=False)
        put(f"blk.{i}.ffn_gate.weight", mlp.gate_proj.weight)
        put(f"blk.{i}.ffn_up.weight", mlp.up_proj.weight)
        put(f"blk.{i}.ffn_down.weight", mlp.down_proj.weight)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list | tuple) else value
