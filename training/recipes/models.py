"""Loading models and tokenizers from local Hugging Face folders for training.

Every model of a run is loaded here, so LoRA is decided here for every recipe: ``load_policy`` (and
the reward-model recipe through ``with_lora``) wraps the trained model in adapters when the config's
``lora_rank`` > 0, or puts back a checkpoint's adapters when resuming; ``load_causal_lm`` reads an
adapter folder (a LoRA run's checkpoint or final model) as its base with the adapters merged.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from training.recipes.data import token_limit
from training.recipes.lora import (
    ADAPTER_CONFIG,
    BaseModelView,
    LoraTask,
    adapter_base,
    is_adapter_folder,
    is_lora_model,
    load_trained,
    lora_load,
    lora_wrap,
    weights_folder,
)
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
        model_config=AutoConfig.from_pretrained(str(weights_folder(path))),
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
    An adapter folder loads as its base with the adapters merged (``lora.load_trained``).
    """
    from transformers import AutoModelForCausalLM

    model = None
    if packing:
        attention = packed_attention_for(device)
        if attention == "flash_attention_2" and not bf16:
            attention = packed_attention_for("cpu")
        try:
            model = load_trained(
                AutoModelForCausalLM, path, dtype=torch.float32, attn_implementation=attention
            )
        except (ValueError, ImportError):
            model = None
    if model is None:
        model = load_trained(AutoModelForCausalLM, path, dtype=torch.float32)
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
    loaded as ``config`` (a ``TrainingConfig``) asks: packing, bf16, checkpointing, dropout, and
    LoRA adapters when ``config.lora_rank`` > 0 (``with_lora``: only they are trainable)."""
    resuming_adapters = require_same_lora(path, config)
    model, packable = load_causal_lm(
        config.model if resuming_adapters else path,
        device=device,
        packing=config.packing,
        bf16=config.bf16,
        gradient_checkpointing=config.gradient_checkpointing,
        no_dropout=config.disable_dropout,
    )
    adapters = Path(path) if resuming_adapters else None
    return with_lora(model, config, adapters=adapters, task="causal_lm"), packable


def require_same_lora(path: str | Path, config: Any) -> bool:
    """Whether ``path`` holds adapters to resume (a LoRA run's checkpoint, not the base model,
    which may be an adapter folder itself: then its merged weights are the base); ValueError when
    it is a checkpoint of the other kind of run (LoRA switched on or off between a run and its
    resume)."""
    if Path(path) == Path(config.model):
        return False
    adapters = is_adapter_folder(path)
    if adapters and not config.lora_rank:
        raise ValueError(
            f"{path} is a LoRA checkpoint but lora_rank is 0: resume with the run's LoRA settings"
        )
    if config.lora_rank and not adapters:
        raise ValueError(
            f"{path} is a full-weights checkpoint but lora_rank is {config.lora_rank}: resume "
            f"with lora_rank 0, or start a new run"
        )
    if adapters:
        saved = json.loads((Path(path) / ADAPTER_CONFIG).read_text()).get("r")
        if saved != config.lora_rank:
            raise ValueError(
                f"{path} holds rank-{saved} adapters but lora_rank is {config.lora_rank}: resume "
                f"with the run's LoRA settings"
            )
    return adapters


def with_lora(model: Any, config: Any, *, adapters: Path | None, task: LoraTask) -> Any:
    """``model`` (the base, ``config.model``) as a run with ``config`` trains it: unchanged when
    ``config.lora_rank`` is 0; else frozen, with trainable adapters: new ones (``config.lora``),
    or the ones saved in the folder ``adapters`` (resuming). Dropout is zeroed again after
    wrapping when ``disable_dropout`` (the adapters' own dropout included, as TRL does)."""
    settings = config.lora
    if settings is None:
        return model
    if adapters is not None:
        model = lora_load(model, adapters, trainable=True)
    else:
        model = lora_wrap(model, settings, task=task, base_path=config.model)
    if config.disable_dropout:
        disable_dropout(model)
    return model


def reference_model(
    ref_model: str | Path | None, policy: Any, *, device: torch.device, packing: bool
) -> Any:
    """The frozen reference of a policy recipe (DPO's, PPO's, RLOO's): the folder ``ref_model``
    loaded without gradients; or, when it is None (the starting policy), a LoRA policy with its
    adapters off (``BaseModelView``: the same weights in memory, no second copy). A full-weights
    policy with no ``ref_model`` is the caller's to handle (it has changed after a resume)."""
    if ref_model is None:
        if not is_lora_model(policy):
            raise ValueError("reference_model: a full-weights policy needs the ref_model folder")
        return BaseModelView(policy)
    return load_causal_lm(ref_model, device=device, packing=packing, trainable=False)[0]


def model_fingerprint(path: str | Path) -> str:
    """sha256 over the folder's config and weight files: the identity of a reference model, so a
    cache of its log-probabilities is never reused for different weights."""
    folder = Path(path)
    digest = hashlib.sha256()
    if is_adapter_folder(folder):  # the adapters' files, then their base's
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            if (folder / name).is_file():
                digest.update(name.encode() + (folder / name).read_bytes())
        digest.update(model_fingerprint(adapter_base(folder)).encode())
        return digest.hexdigest()
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
