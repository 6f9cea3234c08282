"""Run configurations: one dataclass per recipe, every field with a default and a one-line help.

Defaults are PIPELINE.md's. ``__post_init__`` rejects impossible values naming the field. The resolved
configuration is written as ``config.json`` in the run's output folder, so a run can be repeated
exactly (``training.recipes.kinds.config_from_dict(json.load(...))``).

Long module: one dataclass per kind beside the shared fields and the form descriptions, so that a
kind's settings, defaults and checks read in one place (split when a kind's checks grow their own
helpers).
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.recipes.aspect_head import parse_aspect_weights
from training.recipes.lora import LoraSettings

# training.algorithms.DPO_LOSS_TYPES, repeated so that validating a config never imports torch (the
# admin validates run settings in the web process); a test checks the two agree.
DPO_LOSS_TYPES = ("sigmoid", "ipo", "hinge")
# training.recipes.zero.ZERO_PRESETS' names, repeated for the same reason (checked by a test).
ZERO_STAGES = ("none", "zero2", "zero2_offload", "zero3", "zero3_offload")
# The rollout engines by name (training.inference.engine, which reads them from here: no torch here).
ROLLOUT_ENGINES = ("auto", "generate", "static", "llamacpp", "vllm")
# training.algorithms.grpo's ADVANTAGE_SCALES and GRPO_LOSS_NORMS, repeated for the same reason.
GRPO_SCALES = ("group", "batch", "none")
GRPO_LOSS_NORMS = ("token", "sequence", "constant")
# training.recipes.scoring.ENSEMBLE_MODES, repeated for the same reason.
ENSEMBLE_MODES = ("heads", "independent")
# The reward model's objectives and the rows each reads (training.recipes.reward_rows, issue #32).
RM_LOSSES = ("bradley_terry", "plackett_luce", "aspect_regression")


def _f(
    default: Any, help: str, *, choices: tuple[str, ...] = (), section: str = "", **kwargs: Any
) -> Any:
    """A field with its one-line help and, for a field that takes one of a few names, its choices
    (declared here once: validation, the command line and the admin's select all read them);
    ``section``: the title of the form section it shows in (training.recipes.kinds.FORM_SECTIONS;
    empty: the section that lists it there, else "Algorithm")."""
    metadata: dict[str, Any] = {"help": help}
    if choices:
        metadata["choices"] = tuple(choices)
    if section:
        metadata["section"] = section
    return field(default=default, metadata=metadata, **kwargs)


class ConfigError(ValueError):
    """A configuration value is impossible. ``field`` names the setting it is about (None when the
    error is about no single setting); the message starts with it too, for people."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def _invalid(field: str, problem: str) -> ConfigError:
    return ConfigError(f"{field}: {problem}", field=field)


def _number_pair(name: str, value: Any) -> tuple[float, float]:
    """Two numbers from a pair (a tuple, or the list JSON gives back); ConfigError otherwise (a
    text such as "(0.1, 1.0)" is not a pair: forms parse text before it gets here)."""
    if isinstance(value, str | bytes) or not hasattr(value, "__len__") or len(value) != 2:
        raise _invalid(name, f"two numbers (low, high), got {value!r}")
    try:
        return (float(value[0]), float(value[1]))
    except (TypeError, ValueError):
        raise _invalid(name, f"two numbers (low, high), got {value!r}") from None


@dataclass
class TrainingConfig:
    """Fields every recipe shares: data, model, optimiser, precision, logging and checkpoints."""

    model: str = _f(
        "", "local Hugging Face folder of the base model (policy, or reward-model base)"
    )
    data: str = _f(
        "", "JSONL file: preference pairs (rm, dpo, simpo, orpo, kto) or prompts (ppo, rloo, grpo)"
    )
    output_dir: str = _f("", "run folder: config.json, metrics.jsonl, checkpoints/, final/")
    seed: int = _f(0, "seed for data order, initialisation and sampling")
    epochs: int = _f(1, "passes over the training data")
    max_steps: int | None = _f(None, "stop after this many optimiser steps (None: run all epochs)")
    batch_size: int = _f(
        8,
        "pairs (rm, dpo, simpo, orpo), labelled completions (kto) or prompts (ppo, rloo, grpo) "
        "per optimiser step",
    )
    micro_batch_size: int | None = _f(
        None, "rows per forward pass; batch_size / micro_batch_size = gradient accumulation steps"
    )
    max_length: int = _f(512, "longest sequence in tokens (prompt + completion)")
    max_prompt_length: int | None = _f(
        None, "longest prompt kept (its end is kept) when a pair is too long; None: max_length // 2"
    )
    learning_rate: float = _f(1e-5, "peak learning rate of AdamW")
    weight_decay: float = _f(0.0, "AdamW decoupled weight decay")
    warmup_ratio: float = _f(0.0, "share of the steps with a linear learning-rate warm-up")
    lr_scheduler: str = _f(
        "linear",
        "after warm-up: 'linear' decay to 0, 'cosine' or 'constant'",
        choices=("linear", "cosine", "constant"),
    )
    max_grad_norm: float | None = _f(1.0, "clip the global gradient norm (None: no clipping)")
    bf16: bool = _f(False, "bfloat16 autocast for matmuls (CPU with AVX-512 BF16/AMX, or GPU)")
    gradient_checkpointing: bool = _f(False, "recompute activations in backward to save memory")
    packing: bool = _f(True, "padding-free packed batches where the model supports them")
    disable_dropout: bool = _f(True, "set the models' dropout to 0 (losses compare forward passes)")
    device: str = _f("auto", "'auto' (cuda when available), 'cpu', 'cuda' or 'cuda:N'")
    log_every: int = _f(1, "log metrics every this many optimiser steps")
    checkpoint_every: int = _f(100, "save a checkpoint every this many steps (0: only at the end)")
    keep_checkpoints: int = _f(5, "keep the newest this many checkpoints")
    resume: bool = _f(True, "continue from the newest checkpoint in output_dir when there is one")
    lora_rank: int = _f(
        0, "LoRA rank r: train low-rank adapters instead of every weight (0: off, full training)"
    )
    lora_alpha: float = _f(32.0, "LoRA scale: the update is (lora_alpha / lora_rank) * B A")
    lora_dropout: float = _f(
        0.05, "dropout on the LoRA branch's input (0 anyway while disable_dropout is on)"
    )
    lora_target_modules: tuple[str, ...] | None = _f(
        None,
        "names of the linear layers LoRA adapts (None: every attention and MLP projection of the "
        "model's architecture, or 'all-linear' for an unlisted one)",
    )
    merge_lora: bool = _f(
        False, "also save the final model with the adapters merged in, under final/merged/"
    )

    kind: str = dataclasses.field(default="", init=False, metadata={"help": "recipe name"})

    def __post_init__(self) -> None:
        for spec in dataclasses.fields(self):  # every class's fields, so subclasses need no check
            choices = spec.metadata.get("choices")
            if choices and getattr(self, spec.name) not in choices:
                raise _invalid(
                    spec.name, f"one of {', '.join(choices)}; got {getattr(self, spec.name)!r}"
                )
        for name in ("model", "data", "output_dir"):
            if not getattr(self, name):
                raise _invalid(name, "required")
        positive = ("epochs", "batch_size", "max_length", "log_every", "keep_checkpoints")
        for name in positive:
            if getattr(self, name) < 1:
                raise _invalid(name, f"must be >= 1, got {getattr(self, name)}")
        if self.max_steps is not None and self.max_steps < 1:
            raise _invalid("max_steps", f"must be >= 1 or None, got {self.max_steps}")
        if self.micro_batch_size is not None and (
            self.micro_batch_size < 1 or self.batch_size % self.micro_batch_size
        ):
            raise _invalid(
                "micro_batch_size",
                f"must divide batch_size {self.batch_size}, got {self.micro_batch_size}",
            )
        if self.max_prompt_length is not None and not 0 < self.max_prompt_length < self.max_length:
            raise _invalid(
                "max_prompt_length", f"must be in [1, max_length), got {self.max_prompt_length}"
            )
        if self.learning_rate <= 0:
            raise _invalid("learning_rate", f"must be > 0, got {self.learning_rate}")
        if self.weight_decay < 0:
            raise _invalid("weight_decay", f"must be >= 0, got {self.weight_decay}")
        if not 0 <= self.warmup_ratio < 1:
            raise _invalid("warmup_ratio", f"must be in [0, 1), got {self.warmup_ratio}")
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            raise _invalid("max_grad_norm", f"must be > 0 or None, got {self.max_grad_norm}")
        if self.checkpoint_every < 0:
            raise _invalid("checkpoint_every", f"must be >= 0, got {self.checkpoint_every}")
        if self.device != "auto" and not (self.device == "cpu" or self.device.startswith("cuda")):
            raise _invalid("device", f"'auto', 'cpu' or 'cuda[:N]', got {self.device!r}")
        self._check_lora()

    def _check_lora(self) -> None:
        """The LoRA settings (``lora.LoraSettings``'s rules, named by field); read only with
        ``lora_rank`` > 0, except ``merge_lora``, which needs adapters to merge."""
        if self.lora_rank < 0:
            raise _invalid("lora_rank", f"must be >= 0 (0: off), got {self.lora_rank}")
        if not self.lora_rank:
            if self.merge_lora:
                raise _invalid("merge_lora", "needs lora_rank > 0 (there are no adapters)")
            return
        if self.lora_alpha <= 0:
            raise _invalid("lora_alpha", f"must be > 0, got {self.lora_alpha}")
        if not 0 <= self.lora_dropout < 1:
            raise _invalid("lora_dropout", f"must be in [0, 1), got {self.lora_dropout}")
        if self.lora_target_modules is not None:
            names = self.lora_target_modules
            if (
                isinstance(names, str)
                or not names
                or not all(isinstance(n, str) and n.strip() for n in names)
            ):
                raise _invalid(
                    "lora_target_modules",
                    f"a list of module names such as q_proj, v_proj (or None), got {names!r}",
                )
            self.lora_target_modules = tuple(n.strip() for n in names)

    @property
    def lora(self) -> LoraSettings | None:
        """The run's LoRA settings, or None when it trains every weight (``lora_rank`` 0)."""
        if not self.lora_rank:
            return None
        return LoraSettings(
            rank=self.lora_rank,
            alpha=self.lora_alpha,
            dropout=self.lora_dropout,
            target_modules=self.lora_target_modules,
        )

    @property
    def prompt_budget(self) -> int:
        return self.max_prompt_length or self.max_length // 2

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save(self, path: Path) -> None:
        """Write the resolved configuration as JSON (``kind`` included)."""
        path.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")


@dataclass
class RewardModelConfig(TrainingConfig):
    """Bradley-Terry reward model: a one-output sequence-classification head on the base model."""

    learning_rate: float = _f(1e-5, "peak learning rate of AdamW")
    eval_fraction: float = _f(0.1, "share of the pairs held out for accuracy and reward statistics")
    use_margin: bool = _f(False, "subtract each pair's 'margin' (preference strength) in the loss")
    center_rewards_coef: float = _f(0.0, "weight of the reward-centering term (0: off)")
    annotator_aware: bool = _f(
        False,
        "train on each annotator's vote with a per-annotator reliability scale and side bias "
        "(dropped at inference); a plain model is trained too for comparison",
    )
    annotator_head_learning_rate: float = _f(
        1e-2,
        "learning rate of the per-annotator scales and biases and of the cluster embeddings",
    )
    judgements: str | None = _f(
        None,
        "per-annotator rows of a Concord export for annotator_aware (None: the judgements file "
        "exported beside the data file, when there is one)",
    )
    cluster_conditioning: bool = _f(
        False,
        "add a learned embedding of each prompt's cluster to every input token (PIPELINE.md's "
        "domain conditioning); a plain model is trained too for comparison",
    )
    ensemble_size: int = _f(
        1,
        "K reward models trained as an ensemble on bootstrap resamples of the pairs, scoring with "
        "a mean and a spread (1: one plain reward model; 5 is the recommended ensemble)",
    )
    warm_start: str | None = _f(
        None,
        "a reward-model folder of the same kind (same ensemble size and mode) whose weights this "
        "run starts from instead of the base model's fresh head (continuous reward modelling)",
    )
    ensemble_mode: str = _f(
        "heads",
        "'heads': one shared encoder with K output heads (one model's cost); 'independent': K "
        "separately initialised models (K times the cost, more diverse)",
        choices=ENSEMBLE_MODES,
    )
    loss: str = _f(
        "bradley_terry",
        "'bradley_terry' on preference pairs; 'plackett_luce' on ranked lists (rows with "
        "responses and ranks); 'aspect_regression': one output per rated aspect, mean squared "
        "error on the scale-normalised ratings (rows with aspects and scale), the reward their "
        "weighted sum",
        choices=RM_LOSSES,
    )
    aspect_weights: str | None = _f(
        None,
        "aspect_regression: the reward's weights, 'helpfulness=0.65, verbosity=-0.4' (an aspect "
        "left out weighs 0; None: every aspect 1 / A), saved with the model",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self.kind = "rm"
        self._check_loss()
        if self.ensemble_size < 1:
            raise _invalid("ensemble_size", f"must be >= 1, got {self.ensemble_size}")
        if self.ensemble_size > 1 and (self.annotator_aware or self.cluster_conditioning):
            raise _invalid(
                "ensemble_size",
                "an ensemble (> 1) trains plain members: not with annotator_aware or "
                "cluster_conditioning",
            )
        heads_ensemble = self.ensemble_size > 1 and self.ensemble_mode == "heads"
        if heads_ensemble and (self.use_margin or self.center_rewards_coef):
            raise _invalid(
                "ensemble_mode",
                "'heads' trains on bootstrap-weighted plain Bradley-Terry losses: not with "
                "use_margin or center_rewards_coef ('independent' takes them)",
            )
        if not 0 <= self.eval_fraction < 1:
            raise _invalid("eval_fraction", f"must be in [0, 1), got {self.eval_fraction}")
        if self.center_rewards_coef < 0:
            raise _invalid("center_rewards_coef", f"must be >= 0, got {self.center_rewards_coef}")
        if self.annotator_aware and self.use_margin:
            raise _invalid("use_margin", "not with annotator_aware (each vote is its own label)")

    def _check_loss(self) -> None:
        """Ranked lists and rated responses train one plain model: none of the pair options."""
        if self.aspect_weights is not None:
            if self.loss != "aspect_regression":
                raise _invalid("aspect_weights", "only with loss 'aspect_regression'")
            try:
                parse_aspect_weights(self.aspect_weights)
            except ValueError as error:
                raise _invalid("aspect_weights", str(error)) from None
        if self.loss == "bradley_terry":
            return
        pair_options = {
            "ensemble_size": self.ensemble_size > 1,
            "annotator_aware": self.annotator_aware,
            "cluster_conditioning": self.cluster_conditioning,
            "use_margin": self.use_margin,
            "center_rewards_coef": bool(self.center_rewards_coef),
            "warm_start": self.warm_start is not None,
        }
        for name, used in pair_options.items():
            if used:
                raise _invalid(name, f"not with loss {self.loss!r} (a pairs option)")


@dataclass
class DPOConfig(TrainingConfig):
    """Direct preference optimisation against a frozen reference (the starting policy by default)."""

    learning_rate: float = _f(5e-7, "peak learning rate of AdamW")
    beta: float = _f(0.1, "strength of the implicit KL constraint (tau for IPO)")
    loss_type: str = _f("sigmoid", "'sigmoid' (DPO), 'ipo' or 'hinge'", choices=DPO_LOSS_TYPES)
    label_smoothing: float = _f(0.0, "conservative DPO: assumed share of flipped labels, [0, 0.5)")
    ref_model: str | None = _f(None, "reference model folder (None: the starting policy)")
    reference_cache_dir: str | None = _f(
        None, "where reference log-probabilities are cached (None: <output_dir>/reference-cache)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self.kind = "dpo"
        if self.beta <= 0:
            raise _invalid("beta", f"must be > 0, got {self.beta}")
        if not 0 <= self.label_smoothing < 0.5:
            raise _invalid("label_smoothing", f"must be in [0, 0.5), got {self.label_smoothing}")
        if self.label_smoothing and self.loss_type != "sigmoid":
            raise _invalid("label_smoothing", "only with loss_type 'sigmoid'")


@dataclass
class SimPOConfig(TrainingConfig):
    """SimPO: a margin between length-normalised log-probabilities, no reference model at all."""

    learning_rate: float = _f(1e-6, "peak learning rate of AdamW (the paper: 3e-7 to 1e-6)")
    beta: float = _f(2.0, "scale of the reward beta * average log-prob (the paper: 2.0 to 2.5)")
    gamma: float = _f(
        0.5,
        "target reward margin, absolute (TRL's simpo_gamma; the paper's gamma/beta ratio is "
        "gamma / beta = 0.25 at the defaults)",
    )
    label_smoothing: float = _f(0.0, "assumed share of flipped labels, [0, 0.5)")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.kind = "simpo"
        if self.beta <= 0:
            raise _invalid("beta", f"must be > 0, got {self.beta}")
        if self.gamma < 0:
            raise _invalid("gamma", f"must be >= 0, got {self.gamma}")
        if not 0 <= self.label_smoothing < 0.5:
            raise _invalid("label_smoothing", f"must be in [0, 0.5), got {self.label_smoothing}")


@dataclass
class ORPOConfig(TrainingConfig):
    """ORPO: supervised loss on the chosen answer plus an odds-ratio term, no reference model."""

    learning_rate: float = _f(8e-6, "peak learning rate of AdamW (the paper: 8e-6)")
    orpo_lambda: float = _f(
        0.1, "weight of the odds-ratio term beside the chosen NLL (TRL's ORPO beta)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self.kind = "orpo"
        if self.orpo_lambda < 0:
            raise _invalid("orpo_lambda", f"must be >= 0, got {self.orpo_lambda}")


@dataclass
class KTOConfig(TrainingConfig):
    """KTO (Ethayarajh et al. 2024): single completions labelled desirable or undesirable.

    No pairs needed: each example is weighed against a frozen reference (the starting policy by
    default) and a reference point estimated from mismatched (prompt, another prompt's completion)
    pairs of each batch.

    Data: by default each preference pair of ``data`` gives two examples, its chosen answer
    (desirable) and its rejected one (undesirable); ``unpaired_data`` trains on a JSONL file in
    TRL's unpaired format instead ({"prompt", "completion", "label": true|false} a line; rows in
    TRL's paired format {"prompt", "chosen", "rejected"} are split the same way).

    Weights: None (the default) balances them from the fitted examples with
    ``training.algorithms.kto_balanced_weights``: the rarer kind's weight is raised so that
    desirable_weight * n_desirable = undesirable_weight * n_undesirable, the low end of the range
    [1, 4/3] that the KTO paper (section 4.2) recommends for that ratio. Split pairs are balanced,
    so they train at 1.0 / 1.0 (TRL's defaults); an unbalanced unpaired file gets the paper's
    correction without a hand calculation. Set both to override.
    """

    learning_rate: float = _f(5e-7, "peak learning rate of AdamW (TRL's KTO default: 5e-7)")
    beta: float = _f(0.1, "strength of the implicit KL constraint (the paper: 0.1)")
    desirable_weight: float | None = _f(
        None,
        "lambda_D, weight of the desirable examples' losses (None: balanced from the data, see "
        "the class docstring)",
    )
    undesirable_weight: float | None = _f(
        None,
        "lambda_U, weight of the undesirable examples' losses (None: balanced from the data)",
    )
    unpaired_data: str | None = _f(
        None,
        "JSONL file in TRL's unpaired format {prompt, completion, label} to train on instead of "
        "the pairs of data (None: each pair gives a desirable chosen and an undesirable rejected)",
    )
    ref_model: str | None = _f(None, "reference model folder (None: the starting policy)")
    reference_cache_dir: str | None = _f(
        None, "where reference log-probabilities are cached (None: <output_dir>/reference-cache)"
    )
    batch_size: int = _f(
        8,
        "labelled completions per optimiser step (at least 2: the KL estimate "
        "pairs each prompt with another example's completion)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self.kind = "kto"
        if self.beta <= 0:
            raise _invalid("beta", f"must be > 0, got {self.beta}")
        for name in ("desirable_weight", "undesirable_weight"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise _invalid(name, f"must be > 0 or None, got {value}")
        if (self.desirable_weight is None) != (self.undesirable_weight is None):
            raise _invalid(
                "undesirable_weight" if self.undesirable_weight is None else "desirable_weight",
                "set both weights, or neither (None: balanced from the data)",
            )
        if self.batch_size < 2:
            raise _invalid(
                "batch_size",
                f"must be >= 2 (the KL estimate needs another example's completion), got "
                f"{self.batch_size}",
            )
        if self.unpaired_data is not None and not self.unpaired_data.strip():
            self.unpaired_data = None


@dataclass
class OnlineRLConfig(TrainingConfig):
    """What PPO and RLOO share: a reward model, sampling, shaping and the KL penalty."""

    learning_rate: float = _f(1e-6, "peak learning rate of AdamW")
    reward_model: str = _f("", "reward model folder (AutoModelForSequenceClassification, 1 label)")
    ref_model: str | None = _f(None, "reference (SFT) model folder (None: the starting policy)")
    max_new_tokens: int = _f(128, "longest sampled response, in tokens")
    temperature: float = _f(0.7, "sampling temperature of the current policy")
    top_p: float = _f(1.0, "nucleus sampling threshold (1.0: off, so log-probabilities are exact)")
    kl_controller: str = _f(
        "fixed",
        "'fixed', 'adaptive' (Ziegler), 'variance' or 'linear'",
        choices=("fixed", "adaptive", "variance", "linear"),
    )
    kl_coef: float = _f(0.02, "KL coefficient (initial value for adaptive and variance)")
    kl_target: float = _f(0.17, "adaptive controller's target KL (middle of the healthy band)")
    kl_horizon: int = _f(10_000, "adaptive controller's horizon, in samples")
    kl_linear_start: float = _f(0.2, "linear schedule's first coefficient")
    kl_linear_end: float = _f(0.02, "linear schedule's last coefficient")
    kl_estimator: str = _f(
        "k1",
        "per-token KL estimator folded into the reward: 'k1', 'k2', 'k3'",
        choices=("k1", "k2", "k3"),
    )
    reward_objective: str = _f(
        "mean",
        "with a reward-model ensemble (ensemble.json beside it): the reward is the members' "
        "'mean', 'wco' (their minimum) or 'uwo' (mean - uwo_lambda * their variance); one model: "
        "all three are its score",
        choices=("mean", "wco", "uwo"),
    )
    uwo_lambda: float = _f(0.5, "uwo's weight on the members' variance (>= 0)")
    reward_aspect_weights: str | None = _f(
        None,
        "a multi-aspect reward model (aspects.json beside it): the weights of its weighted-sum "
        "reward, 'helpfulness=0.65, verbosity=-0.4' (an aspect left out weighs 0); None: the "
        "weights saved with the model",
    )
    length_penalty_coef: float = _f(0.01, "reward -= coef * max(0, length - base) (0: off)")
    length_penalty_base: int = _f(256, "length (tokens) beyond which the length penalty applies")
    missing_eos_penalty: float = _f(1.0, "subtracted from responses that never emit EOS (0: off)")
    reward_range: tuple[float, float] | None = _f(
        (0.1, 1.0),
        "min-max normalise rewards into this range, fitted on the first batch (None: off)",
    )
    eval_prompts: int = _f(
        32,
        "prompts held out of training for evaluation, at most a tenth of the data (the same "
        "prompts for every run on the same file); 0: no held-out set, no evaluation",
    )
    eval_every: int = _f(
        50,
        "every this many steps (and at the last step), answer the held-out prompts greedily and "
        "log the reward model's mean and std as eval_reward_mean / eval_reward_std",
    )
    eval_kl_samples: int = _f(
        1,
        "answers sampled per held-out prompt for the evaluation KL (eval_kl, from the same seed at "
        "every evaluation): more give the stopping panel's peak fit a steadier KL axis, at the "
        "cost of that many answers per prompt at each evaluation",
    )
    deepspeed: str = _f(
        "none",
        "DeepSpeed ZeRO on CUDA (the gpu extra): 'none', 'zero2', 'zero2_offload' (optimizer "
        "states in CPU memory), 'zero3' or 'zero3_offload' (optimizer states and parameters in "
        "CPU memory)",
        choices=ZERO_STAGES,
    )
    engine: str = _f(
        "generate",
        "rollout engine: 'generate' (transformers, any model), 'static' (preallocated KV cache and "
        "continuous batching, plain Llama-family policies), 'llamacpp' (llama.cpp in-process on "
        "the CPU, plain Llama-family policies, the serve extra), 'vllm' (colocated vLLM, CUDA and "
        "the gpu extra) or 'auto' (static for a plain Llama-family policy on the CPU, where it "
        "measured faster, else generate)",
        choices=ROLLOUT_ENGINES,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check_reward_sources()
        if self.eval_prompts < 0:
            raise _invalid("eval_prompts", f"must be >= 0, got {self.eval_prompts}")
        if self.eval_every < 1:
            raise _invalid("eval_every", f"must be >= 1, got {self.eval_every}")
        if self.eval_kl_samples < 1:
            raise _invalid("eval_kl_samples", f"must be >= 1, got {self.eval_kl_samples}")
        if self.max_new_tokens < 1:
            raise _invalid("max_new_tokens", f"must be >= 1, got {self.max_new_tokens}")
        if self.temperature <= 0:
            raise _invalid("temperature", f"must be > 0 for sampling, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise _invalid("top_p", f"must be in (0, 1], got {self.top_p}")
        if self.kl_coef < 0:
            raise _invalid("kl_coef", f"must be >= 0, got {self.kl_coef}")
        if not self.uwo_lambda >= 0:  # also rejects NaN
            raise _invalid("uwo_lambda", f"must be >= 0, got {self.uwo_lambda}")
        if self.reward_aspect_weights is not None:
            try:
                parse_aspect_weights(self.reward_aspect_weights)
            except ValueError as error:
                raise _invalid("reward_aspect_weights", str(error)) from None
        if self.lora_rank and self.deepspeed != "none":
            raise _invalid(
                "deepspeed",
                "not with LoRA (lora_rank > 0): the adapters are small enough for plain AdamW",
            )
        self.check_update_passes()
        if self.reward_range is not None:
            self.reward_range = _number_pair("reward_range", self.reward_range)
            if not self.reward_range[0] < self.reward_range[1]:
                raise _invalid("reward_range", f"need low < high, got {self.reward_range}")

    def check_update_passes(self) -> None:
        """RLOO and GRPO split each rank's prompts into passes of ``micro_batch_size`` prompts
        (with all their samples) and add up the gradients; a DeepSpeed engine takes one backward
        per optimiser step, so there the whole batch is one pass. PPO's pass is its minibatch."""
        micro = self.micro_batch_size
        if isinstance(self, PPOConfig):
            if micro is not None and micro != self.minibatch_size:
                raise _invalid(
                    "micro_batch_size",
                    f"PPO runs each minibatch in one forward pass: set minibatch_size (rollouts "
                    f"per optimiser step, now {self.minibatch_size}) instead, and leave "
                    f"micro_batch_size empty or equal to it",
                )
            return
        if micro is None or micro == self.batch_size:
            return
        if self.deepspeed != "none":
            raise _invalid(
                "micro_batch_size",
                f"leave it empty with deepspeed {self.deepspeed!r}: a ZeRO run takes each rank's "
                "whole batch in one pass",
            )

    def check_reward_sources(self) -> None:
        """PPO and RLOO score with a reward model; GRPO may score with verifiable rewards."""
        if not self.reward_model:
            raise _invalid("reward_model", "required")

    @property
    def needs_reference(self) -> bool:
        """Whether the recipe reads the reference model (PPO and RLOO always do: their KL goes
        into the reward, and their eval round compares against it)."""
        return True


@dataclass
class RLOOConfig(OnlineRLConfig):
    """REINFORCE leave-one-out: K samples per prompt, each baselined by the mean of the other K - 1."""

    rloo_k: int = _f(4, "samples per prompt (K >= 2)")
    batch_size: int = _f(4, "prompts per optimiser step (each sampled K times)")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.kind = "rloo"
        if self.rloo_k < 2:
            raise _invalid("rloo_k", f"must be >= 2, got {self.rloo_k}")


@dataclass
class PPOConfig(OnlineRLConfig):
    """PPO with a value head on the policy backbone, GAE and clipped objectives."""

    batch_size: int = _f(8, "prompts per rollout batch")
    samples_per_prompt: int = _f(
        2, "responses sampled per prompt (their score variance picks the prompts to double)"
    )
    double_sample_variance: float | None = _f(
        0.15,
        "a prompt whose responses' raw reward-model scores vary more than this (unbiased "
        "variance) gets samples_per_prompt more: twice the samples (None: off)",
    )
    ppo_epochs: int = _f(4, "optimisation passes over each rollout batch")
    minibatch_size: int = _f(4, "rollouts per PPO minibatch")
    gamma: float = _f(1.0, "discount")
    lam: float = _f(0.95, "GAE lambda")
    clip_ratio: float = _f(0.2, "policy ratio clip epsilon")
    value_clip: float = _f(0.2, "value clip range")
    vf_coef: float = _f(0.5, "weight of the clipped value loss")
    entropy_coef: float = _f(0.01, "entropy bonus weight")
    whiten_advantages: bool = _f(True, "whiten advantages over each rollout batch")
    target_kl_stop: float | None = _f(0.1, "stop the PPO epochs when approximate KL passes this")
    value_hidden: int = _f(1024, "value head: hidden -> value_hidden -> 1, with dropout")
    value_dropout: float = _f(0.1, "value head dropout")
    anchor_fraction: float = _f(0.2, "share of rollouts sampled from the SFT reference")
    anchor_temperature: float = _f(0.3, "temperature of the anchor samples")
    perturb_fraction: float = _f(0.1, "share of rollouts with a perturbing instruction appended")
    perturb_instructions: tuple[str, ...] = _f(
        (
            "Answer in a different way than you usually would.",
            "Be concise.",
            "Explain your reasoning step by step.",
        ),
        "instructions appended to a prompt for exploration rollouts",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self.kind = "ppo"
        if self.ppo_epochs < 1:
            raise _invalid("ppo_epochs", f"must be >= 1, got {self.ppo_epochs}")
        if self.samples_per_prompt < 1:
            raise _invalid("samples_per_prompt", f"must be >= 1, got {self.samples_per_prompt}")
        if self.double_sample_variance is not None:
            if self.double_sample_variance < 0:
                raise _invalid(
                    "double_sample_variance",
                    f"must be >= 0 or None, got {self.double_sample_variance}",
                )
            if self.samples_per_prompt < 2:
                raise _invalid(
                    "double_sample_variance",
                    "needs samples_per_prompt >= 2 to measure a prompt's "
                    "score variance (set it to None to sample each prompt once)",
                )
        if not 1 <= self.minibatch_size <= self.batch_size:
            raise _invalid(
                "minibatch_size",
                f"must be in [1, batch_size={self.batch_size}], got {self.minibatch_size}",
            )
        if not (self.anchor_fraction >= 0 and self.perturb_fraction >= 0) or (
            self.anchor_fraction + self.perturb_fraction > 1
        ):
            raise ConfigError(
                "anchor_fraction + perturb_fraction: must be within [0, 1]",
                field="perturb_fraction",
            )
        for name in ("clip_ratio", "value_clip"):
            if getattr(self, name) <= 0:
                raise _invalid(name, f"must be > 0, got {getattr(self, name)}")
        if isinstance(self.perturb_instructions, str) or not all(
            isinstance(text, str) for text in self.perturb_instructions
        ):
            raise _invalid(
                "perturb_instructions",
                f"a list of instructions (texts), got {self.perturb_instructions!r}",
            )
        self.perturb_instructions = tuple(self.perturb_instructions)


@dataclass(frozen=True)
class RewardSpec:
    """One verifiable reward of a GRPO run, parsed from its line ``[label=]name [JSON options]``:
    ``length_penalty {"target": 60}``, ``short=length_penalty {"target": 30}``, ``exact_answer``.
    The name is checked against the registry (``training.algorithms.rewards``) when the recipe
    starts: the registry needs the torch package, which the web process does not load."""

    name: str
    options: dict[str, Any]
    label: str | None = None

    @property
    def key(self) -> str:
        return self.label or self.name


def parse_reward_spec(line: str) -> RewardSpec:
    """``[label=]name [JSON object]`` -> RewardSpec; ConfigError (field ``rewards``) naming the line
    otherwise."""
    head, _, options_text = line.strip().partition(" ")
    label, _, name = head.rpartition("=")
    words = [w for w in (label, name) if w]
    if not name or not all(w.replace("_", "").isalnum() for w in words):
        raise _invalid(
            "rewards",
            f"'[label=]name [JSON options]' with names of letters, digits and underscores, "
            f"got {line!r}",
        )
    options: Any = {}
    if options_text.strip():
        try:
            options = json.loads(options_text)
        except json.JSONDecodeError as error:
            raise _invalid("rewards", f"options of {line!r} are not JSON ({error.msg})") from None
        if not isinstance(options, dict):
            raise _invalid("rewards", f"options of {line!r} must be a JSON object {{...}}")
    return RewardSpec(name=name, options=options, label=label or None)


@dataclass
class GRPOConfig(OnlineRLConfig):
    """GRPO: G samples per prompt, advantages relative to the group, clipped ratio with a k3 KL."""

    reward_model: str = _f(
        "",
        "reward model folder (AutoModelForSequenceClassification, 1 label); optional for GRPO "
        "when verifiable rewards score the samples",
    )
    batch_size: int = _f(4, "prompts per optimiser step (each sampled group_size times)")
    group_size: int = _f(8, "samples per prompt G (>= 2); advantages are relative to the group")
    scale_rewards: str = _f(
        "group",
        "divide the centred rewards by the group's std ('group', GRPO), the batch's ('batch') or "
        "not at all ('none', Dr. GRPO)",
        choices=GRPO_SCALES,
    )
    loss_normalisation: str = _f(
        "token",
        "'token': mean over every completion token of the batch (DAPO); 'sequence': mean per "
        "sequence, then over sequences (GRPO paper); 'constant': sum / (samples x max_new_tokens)",
        choices=GRPO_LOSS_NORMS,
    )
    clip_low: float = _f(0.2, "lower clip epsilon of the ratio: clip(rho, 1 - clip_low, ...)")
    clip_high: float | None = _f(
        None, "upper clip epsilon (DAPO's clip-higher: 0.28); None: the same as clip_low"
    )
    updates_per_batch: int = _f(
        1,
        "optimiser updates on each batch of samples (TRL's num_iterations); above 1 the ratio "
        "leaves 1 and the clip acts",
    )
    kl_coef: float = _f(
        0.04, "weight of the k3 KL to the reference in the loss; 0: no reference model is loaded"
    )
    kl_estimator: str = _f("k3", "GRPO's KL term is k3 (Schulman 2020)", choices=("k3",))
    dynamic_sampling: bool = _f(
        False,
        "drop the groups whose rewards are all equal (no signal) and sample fresh prompts in "
        "their place (DAPO)",
    )
    dynamic_sampling_rounds: int = _f(
        3, "at most this many rounds of fresh prompts per step; what stays flat is dropped"
    )
    rewards: tuple[str, ...] = _f(
        (),
        "verifiable rewards, one per line: [label=]name [JSON options], e.g. "
        'length_penalty {"target": 60}; built in: exact_answer, regex_match, format, '
        "length_penalty",
    )
    reward_weights: tuple[float, ...] = _f(
        (), "weight of each verifiable reward, in order (empty: 1.0 each)"
    )
    reward_modules: tuple[str, ...] = _f(
        (),
        "Python modules imported before the rewards are looked up, one per line: where your own "
        "@rewards.register functions live (e.g. myproject.rewards)",
    )
    reward_model_weight: float = _f(
        1.0, "weight of the reward model's score in the total (when there is a reward model)"
    )
    reward_range: tuple[float, float] | None = _f(
        None,
        "min-max normalise the reward model's scores into this range, fitted on the first batch "
        "(None: off; group advantages are already centred and scaled)",
    )
    length_penalty_coef: float = _f(0.0, "reward -= coef * max(0, length - base) (0: off)")
    missing_eos_penalty: float = _f(0.0, "subtracted from responses that never emit EOS (0: off)")

    def __post_init__(self) -> None:
        self.rewards = tuple(self.rewards) if not isinstance(self.rewards, str) else (self.rewards,)
        self.reward_weights = tuple(self.reward_weights)
        modules = self.reward_modules
        self.reward_modules = (modules,) if isinstance(modules, str) else tuple(modules)
        super().__post_init__()
        self.kind = "grpo"
        if self.group_size < 2:
            raise _invalid("group_size", f"must be >= 2, got {self.group_size}")
        if not 0 < self.clip_low < 1:
            raise _invalid("clip_low", f"must be in (0, 1), got {self.clip_low}")
        if self.clip_high is not None and self.clip_high <= 0:
            raise _invalid("clip_high", f"must be > 0 or None, got {self.clip_high}")
        if self.updates_per_batch < 1:
            raise _invalid("updates_per_batch", f"must be >= 1, got {self.updates_per_batch}")
        if self.dynamic_sampling_rounds < 0:
            raise _invalid(
                "dynamic_sampling_rounds", f"must be >= 0, got {self.dynamic_sampling_rounds}"
            )
        bad = [m for m in self.reward_modules if not all(p.isidentifier() for p in m.split("."))]
        if bad:
            raise _invalid("reward_modules", f"dotted Python module names, got {bad}")
        if self.kl_controller != "fixed" and self.kl_coef == 0:
            raise _invalid("kl_controller", "'fixed' when kl_coef is 0 (no reference is loaded)")

    def check_reward_sources(self) -> None:
        """A reward model, verifiable rewards, or both; the rewards' lines parse; one weight each."""
        specs = self.reward_specs()
        if not self.reward_model and not specs:
            raise _invalid("rewards", "name a verifiable reward or choose a reward model")
        keys = [spec.key for spec in specs]
        twice = sorted({key for key in keys if keys.count(key) > 1})
        if twice:
            raise _invalid("rewards", f"{twice} appear twice; give each a distinct label=")
        if self.reward_weights and len(self.reward_weights) != len(specs):
            raise _invalid(
                "reward_weights",
                f"one weight per reward: {len(specs)} rewards, {len(self.reward_weights)} weights",
            )
        weights = [float(w) for w in self.reward_weights]
        if not all(math.isfinite(w) for w in [*weights, self.reward_model_weight]):
            raise _invalid("reward_weights", "weights must be finite numbers")
        if not any(self.verifiable_weights()) and not (
            self.reward_model and self.reward_model_weight
        ):
            raise _invalid("reward_weights", "every weight is 0: the reward would carry no signal")

    def reward_specs(self) -> list[RewardSpec]:
        """The verifiable rewards, parsed (blank lines skipped)."""
        return [parse_reward_spec(line) for line in self.rewards if line.strip()]

    def verifiable_weights(self) -> list[float]:
        """One weight per verifiable reward (1.0 each when none are set)."""
        return [float(w) for w in self.reward_weights] or [1.0] * len(self.reward_specs())

    @property
    def needs_reference(self) -> bool:
        """GRPO reads the reference only for its KL term."""
        return self.kl_coef > 0


def config_help(cls: type[TrainingConfig]) -> list[tuple[str, Any, str]]:
    """(name, default, help) for each settable field, for command-line and admin help."""
    rows = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        default = f.default if f.default is not dataclasses.MISSING else None
        rows.append((f.name, default, f.metadata.get("help", "")))
    return rows


@dataclass(frozen=True)
class FieldSpec:
    """What a form needs to know about one settable field, read from the dataclass.

    ``type`` is bool, int, float, str or tuple; a tuple field holds ``items`` values (``length`` of
    them, or any number when ``length`` is None). ``optional``: None is allowed (it means "off" or
    "automatic", as the help says)."""

    name: str
    type: type
    optional: bool
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    items: type | None = None
    length: int | None = None


def config_fields(cls: type[TrainingConfig]) -> list[FieldSpec]:
    """The typed settable fields of a config class, in declaration order (``kind`` excluded).

    Raises TypeError for an annotation this cannot describe (a new field's type must be one a form
    can show: bool, int, float, str, an optional one of those, or a tuple of them)."""
    hints = typing.get_type_hints(cls)
    specs = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        annotation = hints[f.name]
        args = typing.get_args(annotation)
        optional = (
            isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union
        ) and type(None) in args
        if optional:
            (annotation,) = [a for a in args if a is not type(None)]
        items = length = None
        base = typing.get_origin(annotation) or annotation
        if base in (tuple, list):
            item_args = typing.get_args(annotation)
            variable = len(item_args) == 2 and item_args[1] is Ellipsis
            if not item_args or len(set(item_args) - {Ellipsis}) != 1:
                raise TypeError(f"{cls.__name__}.{f.name}: tuple of one item type needed")
            items, length, base = item_args[0], None if variable else len(item_args), tuple
        if base not in (bool, int, float, str, tuple):
            raise TypeError(f"{cls.__name__}.{f.name}: cannot describe {annotation!r}")
        specs.append(
            FieldSpec(
                name=f.name,
                type=base,
                optional=optional,
                default=f.default,
                help=f.metadata.get("help", ""),
                choices=f.metadata.get("choices", ()),
                items=items,
                length=length,
            )
        )
    return specs
