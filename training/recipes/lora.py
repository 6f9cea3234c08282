"""LoRA adapters (Hu et al. 2021) through peft: wrap a transformers model, save and load the adapters
in peft's own format, merge them into the weights on request, and run the base model with the
adapter switched off (DPO's reference pass without a second copy of the model in memory).

Worker code: peft and torch are imported inside the functions, so the web process can read
``LoraSettings`` and ``LORA_TARGET_MODULES`` (for forms and run configs) without loading torch.
Models are ``transformers`` ``PreTrainedModel``s; wrapped ones are ``peft.PeftModel``s.

An adapter folder (``adapter_config.json`` + ``adapter_model.safetensors``) names its base model's
folder (``base_model_name_or_path``, written absolute by ``lora_wrap``); ``load_trained`` loads
either kind of folder as a plain transformers model, so whatever reads a trained run's output (a
reference model, a reward model, a generator) reads a LoRA run's as well.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

LoraTask = Literal["causal_lm", "sequence_classification"]

# The linear layers LoRA adapts, by ``config.model_type``: every projection of attention and MLP, as
# the QLoRA paper found necessary to match full fine-tuning (Dettmers et al. 2023, section 4).
_LLAMA_LIKE = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LORA_TARGET_MODULES: dict[str, tuple[str, ...]] = {
    "llama": _LLAMA_LIKE,
    "mistral": _LLAMA_LIKE,
    "qwen2": _LLAMA_LIKE,
    "qwen3": _LLAMA_LIKE,
    "gemma": _LLAMA_LIKE,
    "gemma2": _LLAMA_LIKE,
    "phi3": ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"),
    "gpt2": ("c_attn", "c_proj", "c_fc"),
    "gpt_neox": ("query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"),
}
# peft's own name for "every linear layer but the output head", for architectures not listed above.
ALL_LINEAR = "all-linear"
ADAPTER_CONFIG = "adapter_config.json"


@dataclass(frozen=True)
class LoraSettings:
    """LoRA hyper-parameters. The update is W + (alpha / rank) * B A with A [rank, in], B [out, rank]."""

    rank: int = 16  # r: the rank of the update; 8 to 64 is usual.
    alpha: float = 32.0  # lora_alpha: the update is scaled by alpha / rank.
    dropout: float = 0.05  # dropout on the LoRA branch's input.
    target_modules: tuple[str, ...] | None = None  # None: by architecture (LORA_TARGET_MODULES).

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise ValueError(f"rank must be >= 1, got {self.rank}")
        if self.alpha <= 0:
            raise ValueError(f"alpha must be > 0, got {self.alpha}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.target_modules is not None and not self.target_modules:
            raise ValueError("target_modules must name at least one module (or be None)")


def target_modules_for(model_type: str) -> tuple[str, ...] | str:
    """The module names LoRA adapts for ``model_type``; ``"all-linear"`` for unlisted ones."""
    return LORA_TARGET_MODULES.get(model_type, ALL_LINEAR)


def is_adapter_folder(path: str | Path) -> bool:
    """True when ``path`` holds LoRA adapters (peft's ``adapter_config.json``), not a full model."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def adapter_base(folder: str | Path) -> Path:
    """The base model folder the adapters in ``folder`` were trained on (itself a model folder, or
    an adapter folder to merge first); ValueError when it is not on this machine."""
    import json

    base = json.loads((Path(folder) / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    if not base or not Path(base).is_dir():
        raise ValueError(
            f"{folder}: the LoRA adapters' base model {base!r} is not a folder on this machine "
            f"(set base_model_name_or_path in {ADAPTER_CONFIG})"
        )
    return Path(base)


def weights_folder(path: str | Path) -> Path:
    """The folder whose ``config.json`` describes the model in ``path``: ``path`` itself, or for
    an adapter folder its base's (adapters change no shape, position table or vocabulary)."""
    path = Path(path)
    return weights_folder(adapter_base(path)) if is_adapter_folder(path) else path


def load_trained(auto_class: Any, path: str | Path, **kwargs: Any) -> Any:
    """``auto_class.from_pretrained(path, **kwargs)`` for a model folder; for an adapter folder,
    its base loaded the same way (recursively) with the adapters merged in: a plain transformers
    model either way (for a reward model, the score head trained beside the adapters included)."""
    path = Path(path)
    if not is_adapter_folder(path):
        return auto_class.from_pretrained(str(path), **kwargs)
    base = load_trained(auto_class, adapter_base(path), **kwargs)
    return lora_merge(lora_load(base, path))


def lora_wrap(
    model: Any,
    settings: LoraSettings,
    *,
    task: LoraTask = "causal_lm",
    base_path: str | Path | None = None,
) -> Any:
    """Freeze ``model`` and add trainable LoRA adapters; returns the ``PeftModel``.

    For ``"sequence_classification"`` (a reward model) the new score head is trained in full too
    (peft's ``modules_to_save``), since it starts from random. A target name that matches no module
    of the model is a ValueError from peft, before anything is trained. ``base_path``: the folder
    ``model`` was loaded from, recorded absolute in the saved adapters (``adapter_base``).
    """
    from peft import LoraConfig, TaskType, get_peft_model

    if task not in ("causal_lm", "sequence_classification"):
        raise ValueError(f"task must be causal_lm or sequence_classification, got {task!r}")
    targets = settings.target_modules or target_modules_for(model.config.model_type)
    config = LoraConfig(
        task_type=TaskType.CAUSAL_LM if task == "causal_lm" else TaskType.SEQ_CLS,
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=list(targets) if isinstance(targets, tuple) else targets,
        bias="none",
    )
    if base_path is not None:
        config.base_model_name_or_path = str(Path(base_path).absolute())
    wrapped = get_peft_model(model, config)
    if base_path is not None:
        wrapped.peft_config["default"].base_model_name_or_path = config.base_model_name_or_path
    return wrapped


def _require_peft(model: Any) -> None:
    from peft import PeftModel

    if not isinstance(model, PeftModel):
        raise ValueError(
            f"expected a model wrapped by lora_wrap or lora_load (a peft PeftModel), "
            f"got {type(model).__name__}"
        )


def trainable_parameters(model: Any) -> tuple[int, int]:
    """(trainable, total) parameter counts, for the run's log."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())


def lora_save(model: Any, folder: Path) -> Path:
    """Save only the adapters (adapter_config.json, adapter_model.safetensors) in peft's format,
    loadable with ``peft.PeftModel.from_pretrained`` or ``lora_load``. Returns ``folder``."""
    _require_peft(model)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder))
    return folder


def lora_load(base_model: Any, folder: Path, *, trainable: bool = False) -> Any:
    """Put the adapters saved in ``folder`` on ``base_model`` (the same base they were trained on);
    ``trainable`` True to continue training them (resume), False for inference."""
    from peft import PeftModel

    if not (folder / "adapter_config.json").is_file():
        raise ValueError(f"{folder} holds no LoRA adapter (adapter_config.json is missing)")
    return PeftModel.from_pretrained(base_model, str(folder), is_trainable=trainable)


def lora_merge(model: Any) -> Any:
    """Fold the adapters into the base weights (W <- W + alpha / rank * B A) and return the plain
    transformers model, which saves and loads like any other. In place: the PeftModel must not be
    used afterwards. Merge at the end of training, on request, to ship one set of weights."""
    _require_peft(model)
    return model.merge_and_unload()


@contextmanager
def adapter_disabled(model: Any) -> Iterator[Any]:
    """Run ``model`` as its base model (the adapters bypassed, not removed) inside the block.

    DPO's reference log-probs are the base model's: with LoRA, compute them under this context (and
    ``torch.no_grad()``) on the same weights, instead of keeping a frozen second copy. The adapters
    are back on when the block exits, even on an exception.
    """
    _require_peft(model)
    with model.disable_adapter():
        yield model


def is_lora_model(model: Any) -> bool:
    """True for a model wrapped by ``lora_wrap`` or ``lora_load`` (without importing peft)."""
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


class BaseModelView:
    """The base model of a LoRA-wrapped ``model``, the same weights in memory: every forward (and
    ``generate``, and the decoder stack as ``base_model``) runs with the adapters bypassed.

    This is what DPO's, PPO's and RLOO's reference is with LoRA: the starting policy without a
    second copy of its weights. Everything else (``config``, ``parameters``, the output layer,
    ``training``) is the wrapped model's. Use it without gradients, as references are.
    """

    def __init__(self, model: Any) -> None:
        _require_peft(model)
        self.model = model

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with adapter_disabled(self.model):
            return self.model(*args, **kwargs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        with adapter_disabled(self.model):
            return self.model.generate(*args, **kwargs)

    @property
    def base_model(self) -> Any:
        """The decoder stack (transformers' ``base_model``, e.g. LlamaModel), adapters off."""
        decoder = self.model.get_base_model().base_model

        def run(*args: Any, **kwargs: Any) -> Any:
            with adapter_disabled(self.model):
                return decoder(*args, **kwargs)

        return run

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def training(self) -> bool:
        return self.model.training

    def train(self, mode: bool = True) -> BaseModelView:
        self.model.train(mode)
        return self

    def eval(self) -> BaseModelView:
        return self.train(False)

    def parameters(self) -> Any:
        return self.model.parameters()

    def get_output_embeddings(self) -> Any:
        return self.model.get_output_embeddings()
