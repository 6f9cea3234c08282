"""Loading models and tokenizers from local Hugging Face folders for training."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch

from training.recipes.data import token_limit
from training.recipes.packing import VARLEN_ATTENTION, packed_attention_for, supports_packing


def load_tokenizer(path: str | Path, *, padding_side: str = "right") -> Any:
    """The folder's tokenizer; EOS doubles as padding when the model defines no pad token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path), padding_side=padding_side)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def input_limit(path: str | Path, *, max_length: int, tokenizer: Any = None) -> int:
    """The longest input the model in ``path`` may read under the run's ``max_length``: its
    position table and, when given, its tokenizer's ``model_max_length`` (``token_limit``)."""
    from transformers import AutoConfig

    return token_limit(
        max_length=max_length,
        model_config=AutoConfig.from_pretrained(str(path)),
        tokenizer=tokenizer,
    )


def load_causal_lm(
    path: str | Path,
    *,
    device: torch.device,
    packing: bool = True,
    bf16: bool = False,
    gradient_checkpointing: bool = False,
    trainable: bool = True,
    no_dropout: bool = True,
) -> tuple[Any, bool]:
    """(model in float32 on ``device``, whether packed batches can be used with it).

    Master weights stay float32 (bf16 is autocast); the attention implementation is the packed one
    when the architecture supports it (flash-attn 2 needs bf16, so it is only chosen with ``bf16``).
    """
    from transformers import AutoModelForCausalLM

    model = None
    if packing:
        attention = packed_attention_for(device)
        if attention == "flash_attention_2" and not bf16:
            attention = packed_attention_for("cpu")
        try:
            model = AutoModelForCausalLM.from_pretrained(
                str(path), dtype=torch.float32, attn_implementation=attention
            )
        except (ValueError, ImportError):
            model = None
    if model is None:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    model.to(device)
    model.config.use_cache = False
    if no_dropout:
        disable_dropout(model)
    if gradient_checkpointing:
        enable_activation_checkpointing(model)
    model.train(trainable)
    model.requires_grad_(trainable)
    attention = getattr(model.config, "_attn_implementation", None)
    packable = attention in (VARLEN_ATTENTION, "flash_attention_2") and supports_packing(model)
    return model, packing and packable


def load_policy(path: str | Path, config: Any, device: torch.device) -> tuple[Any, bool]:
    """The policy a recipe trains, from ``path`` (the base model, or a checkpoint when resuming),
    loaded as ``config`` (a ``TrainingConfig``) asks: packing, bf16, checkpointing, dropout."""
    return load_causal_lm(
        path,
        device=device,
        packing=config.packing,
        bf16=config.bf16,
        gradient_checkpointing=config.gradient_checkpointing,
        no_dropout=config.disable_dropout,
    )


def model_fingerprint(path: str | Path) -> str:
    """sha256 over the folder's config and weight files: the identity of a reference model, so a
    cache of its log-probabilities is never reused for different weights."""
    folder = Path(path)
    digest = hashlib.sha256()
    weights = sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin"))
    files = [folder / "config.json", *weights]
    for file in files:
        digest.update(file.name.encode())
        with file.open("rb") as handle:
            for block in iter(lambda h=handle: h.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()


def enable_activation_checkpointing(model: Any) -> None:
    """Recompute activations in backward (non-reentrant), under transformers 5's name when present."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def disable_dropout(model: torch.nn.Module) -> None:
    """Zero every dropout probability in place (the saved config keeps its values).

    Preference losses compare forward passes (policy against a cached reference, chosen against
    rejected): dropout would add noise of its own to each. TRL does the same by default.
    """
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        if isinstance(getattr(module, "attention_dropout", None), float):
            module.attention_dropout = 0.0
