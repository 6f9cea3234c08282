"""The kind registry: one KindSpec per training kind, and every list of kinds read from it.

The model's kind choices, the recipe dispatch (``run_training``), the admin's kind picker, form
sections and presets, the services' reward-model and reference checks, the ``train`` command's
``--kind`` choices and guards, the runs list's headline columns and the user guide's kind table all
read ``KINDS``. Adding a kind is one ``KindSpec`` here (plus its config class and recipe).

Pure and torch-free: a spec names its recipe as a dotted path, imported on first use, so the web
process (which reads labels, choices and sections) never loads torch through this module.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from training.recipes.config import (
    ConfigError,
    DPOConfig,
    GRPOConfig,
    KTOConfig,
    ORPOConfig,
    PPOConfig,
    RewardModelConfig,
    RLOOConfig,
    SimPOConfig,
    TrainingConfig,
)

# A headline column of the runs list: (metric names, the first present is shown; column label).
Headline = tuple[tuple[str, ...], str]
REWARD_MODEL_USES = ("none", "optional", "required")


@dataclass(frozen=True)
class KindSpec:
    """One training kind.

    ``name``: the stored value (at most 8 characters: the model's column); ``label``: what people
    read; ``recipe``: ``"module:function"`` (or the function itself) taking ``(config, callback)``;
    ``reward_model``: whether a run scores with a reward-model run, "none", "optional" or
    "required"; ``reference_pass``: the recipe computes the reference's log-probs once before
    training (cached under ``reference_cache_dir``); ``rollouts``: the recipe samples from the
    policy (the train command warns about answer lengths); ``headlines``: the runs list's columns;
    ``presets``: overrides per preset name (training.recipes.presets); ``preset_base_models``: the
    registry model a preset chooses first for this kind."""

    name: str
    label: str
    config_class: type[TrainingConfig]
    recipe: str | Callable[..., Any]
    reward_model: str = "none"
    reference_pass: bool = False
    rollouts: bool = False
    headlines: tuple[Headline, ...] = ()
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    preset_base_models: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > 8:
            raise ConfigError(f"kind: a name of 1 to 8 characters, got {self.name!r}", field="kind")
        if self.reward_model not in REWARD_MODEL_USES:
            raise ConfigError(
                f"reward_model: one of {', '.join(REWARD_MODEL_USES)}, got {self.reward_model!r}",
                field="reward_model",
            )
        if self.reference_pass and not self.has_field("reference_cache_dir"):
            raise ConfigError(
                f"{self.name}: a kind with a reference pass needs a reference_cache_dir field",
                field="reference_pass",
            )

    @property
    def takes_reward_model(self) -> bool:
        """A run of this kind may name a reward-model run."""
        return self.reward_model != "none"

    @property
    def needs_reward_model(self) -> bool:
        """A run of this kind cannot start without a reward-model run."""
        return self.reward_model == "required"

    @property
    def has_reference_pass(self) -> bool:
        return self.reference_pass

    def has_field(self, name: str) -> bool:
        """Whether this kind's config has the settable field ``name``."""
        return any(f.name == name and f.init for f in dataclasses.fields(self.config_class))

    def form_sections(self, names: list[str]) -> list[tuple[str, bool, str, list[str]]]:
        """The run form's sections for this kind: (title, open, help, the settings of ``names``
        it holds: those FORM_SECTIONS lists there, then those placed by metadata or the fallback,
        each in ``names``' order), in FORM_SECTIONS' order, empty ones left out."""
        where = {f.name: section_of(f) for f in dataclasses.fields(self.config_class)}
        sections = []
        for title, is_open, help_text, listed in FORM_SECTIONS:
            mine = [name for name in names if where.get(name, FALLBACK_SECTION) == title]
            members = [name for name in mine if name in listed.split()]
            members += [name for name in mine if name not in members]
            if members:
                sections.append((title, is_open, help_text, members))
        return sections

    def recipe_function(self) -> Callable[..., Any]:
        """The recipe, imported now (it loads torch)."""
        if callable(self.recipe):
            return self.recipe
        module, _, name = self.recipe.partition(":")
        return getattr(importlib.import_module(module), name)


# The run form's sections, in order, for every kind: (title, open, help, the settings it holds
# separated by spaces). A field's ``section`` metadata (config._f) places it instead; a setting in
# neither lands in FALLBACK_SECTION ("Algorithm"): the form shows every one.
FORM_SECTIONS: tuple[tuple[str, bool, str, str], ...] = (
    (
        "Data",
        True,
        "How the snapshot's rows are cut and split. Lengths are in tokens.",
        "max_length max_prompt_length eval_fraction eval_prompts unpaired_data seed",
    ),
    (
        "Optimisation",
        True,
        "Steps, batches and the AdamW optimiser. batch_size / micro_batch_size is the number of "
        "gradient accumulation steps.",
        "epochs max_steps batch_size micro_batch_size learning_rate weight_decay warmup_ratio "
        "lr_scheduler max_grad_norm annotator_head_learning_rate",
    ),
    (
        "Algorithm",
        True,
        "The recipe's own objective: loss, KL penalty, reward shaping, advantages.",
        "loss aspect_weights beta loss_type label_smoothing desirable_weight undesirable_weight "
        "use_margin center_rewards_coef annotator_aware "
        "cluster_conditioning rloo_k samples_per_prompt double_sample_variance ppo_epochs "
        "minibatch_size gamma lam clip_ratio value_clip vf_coef entropy_coef whiten_advantages "
        "target_kl_stop kl_controller kl_coef kl_target kl_horizon kl_linear_start kl_linear_end "
        "kl_estimator reward_objective uwo_lambda reward_aspect_weights reward_range "
        "length_penalty_coef "
        "length_penalty_base missing_eos_penalty "
        "group_size scale_rewards loss_normalisation clip_low clip_high updates_per_batch "
        "dynamic_sampling dynamic_sampling_rounds rewards reward_weights reward_model_weight "
        "reward_modules",
    ),
    (
        "Model",
        False,
        "Changes to the models while they train (the base model is chosen above).",
        "disable_dropout value_hidden value_dropout",
    ),
    (
        "Generation",
        False,
        "Sampling of the policy's responses (rollouts and anchor samples).",
        "max_new_tokens temperature top_p anchor_fraction anchor_temperature perturb_fraction "
        "perturb_instructions",
    ),
    (
        "LoRA",
        False,
        "Train low-rank adapters instead of every weight (lora_rank > 0; 0 trains every weight): "
        "far less optimiser memory, the same reference model without a second copy. The final "
        "model is an adapter folder; merge_lora also saves merged weights.",
        "lora_rank lora_alpha lora_dropout lora_target_modules merge_lora",
    ),
    (
        "Precision and hardware",
        False,
        "Where and how the maths runs. flash-attn is used by packed batches on CUDA when its "
        "package is installed.",
        "device bf16 packing gradient_checkpointing deepspeed",
    ),
    (
        "Checkpoints and evaluation",
        False,
        "What is logged and saved, and how often.",
        "log_every checkpoint_every keep_checkpoints eval_every eval_kl_samples reference_cache_dir",
    ),
)
FALLBACK_SECTION = "Algorithm"


def section_of(field_: dataclasses.Field[Any]) -> str:
    """The title of the form section a config field shows in (its metadata, FORM_SECTIONS, or
    FALLBACK_SECTION)."""
    if field_.metadata.get("section"):
        return field_.metadata["section"]
    for title, _, _, members in FORM_SECTIONS:
        if field_.name in members.split():
            return title
    return FALLBACK_SECTION


_PAIR_HEADLINES: tuple[Headline, ...] = (
    (("rewards/accuracy",), "reward accuracy"),
    (("rewards/margin",), "margin"),
)
_ONLINE_HEADLINES: tuple[Headline, ...] = ((("reward/score_mean",), "reward"), (("kl",), "KL"))
_CPU_PAIRS = {"batch_size": 4}
_GPU_PAIRS = {"batch_size": 32, "micro_batch_size": 8}

# In the order people see them (the kind picker, selects, the docs' kind table).
KINDS: dict[str, KindSpec] = {
    spec.name: spec
    for spec in (
        KindSpec(
            name="rm",
            label="Reward model",
            config_class=RewardModelConfig,
            recipe="training.recipes.reward_model:train_reward_model",
            headlines=(
                (("eval/accuracy", "accuracy"), "eval accuracy"),
                (("eval/loss", "loss"), "loss"),
            ),
            presets={"cpu": {"batch_size": 4, "learning_rate": 1e-5}, "gpu": _GPU_PAIRS},
            # The encoder the docs recommend for reward models: MiniLM (22M parameters, against
            # SmolLM2's 135M) trained the 72 demo pairs' 17 steps in 142 s on a busy 2-core
            # machine, where SmolLM2 had taken 8.7 minutes for 15.
            preset_base_models={"cpu": "all-minilm-l6-v2"},
        ),
        KindSpec(
            name="dpo",
            label="DPO",
            config_class=DPOConfig,
            recipe="training.recipes.dpo:train_dpo",
            reference_pass=True,
            headlines=_PAIR_HEADLINES,
            presets={"cpu": _CPU_PAIRS, "gpu": _GPU_PAIRS},
        ),
        KindSpec(
            name="simpo",
            label="SimPO",
            config_class=SimPOConfig,
            recipe="training.recipes.reference_free:train_simpo",
            headlines=_PAIR_HEADLINES,
            presets={"cpu": _CPU_PAIRS, "gpu": _GPU_PAIRS},
        ),
        KindSpec(
            name="orpo",
            label="ORPO",
            config_class=ORPOConfig,
            recipe="training.recipes.reference_free:train_orpo",
            headlines=_PAIR_HEADLINES,
            presets={"cpu": _CPU_PAIRS, "gpu": _GPU_PAIRS},
        ),
        KindSpec(
            name="kto",
            label="KTO",
            config_class=KTOConfig,
            recipe="training.recipes.kto:train_kto",
            reference_pass=True,
            headlines=((("rewards/margin",), "margin"), (("kl_estimate",), "KL estimate")),
            presets={"cpu": _CPU_PAIRS, "gpu": _GPU_PAIRS},
        ),
        KindSpec(
            name="ppo",
            label="PPO",
            config_class=PPOConfig,
            recipe="training.recipes.ppo:train_ppo",
            reward_model="required",
            rollouts=True,
            headlines=_ONLINE_HEADLINES,
            presets={
                "cpu": {
                    "batch_size": 2,
                    "minibatch_size": 2,
                    "ppo_epochs": 1,
                    "max_new_tokens": 32,
                    "eval_prompts": 4,
                    "eval_every": 10,
                    "value_hidden": 256,
                },
                "gpu": {"batch_size": 16, "minibatch_size": 8, "micro_batch_size": 8},
            },
        ),
        KindSpec(
            name="rloo",
            label="RLOO",
            config_class=RLOOConfig,
            recipe="training.recipes.rloo:train_rloo",
            reward_model="required",
            rollouts=True,
            headlines=_ONLINE_HEADLINES,
            presets={
                "cpu": {
                    "batch_size": 2,
                    "rloo_k": 2,
                    "max_new_tokens": 32,
                    "eval_prompts": 4,
                    "eval_every": 10,
                },
                "gpu": {"batch_size": 8, "micro_batch_size": 4},
            },
        ),
        KindSpec(
            name="grpo",
            label="GRPO",
            config_class=GRPOConfig,
            recipe="training.recipes.grpo:train_grpo",
            reward_model="optional",
            rollouts=True,
            headlines=_ONLINE_HEADLINES,
            presets={
                "cpu": {
                    "batch_size": 2,
                    "group_size": 4,
                    "max_new_tokens": 32,
                    "eval_prompts": 4,
                    "eval_every": 10,
                    # A verifiable reward, so the form saves without a reward model: answers near
                    # 60 characters score best (the bench's cheap reward).
                    "rewards": ('length_penalty {"target": 60}',),
                },
                "gpu": {"batch_size": 8, "micro_batch_size": 4},
            },
        ),
    )
}


def kind_names() -> tuple[str, ...]:
    """The kinds' names, in the registry's order (read now: a kind registered later is in it)."""
    return tuple(KINDS)


def kind_spec(name: str) -> KindSpec:
    """The spec of kind ``name``; ConfigError (field ``kind``) listing the kinds otherwise."""
    if name not in KINDS:
        raise ConfigError(f"kind: one of {', '.join(KINDS)}, got {name!r}", field="kind")
    return KINDS[name]


@contextmanager
def registered(spec: KindSpec) -> Iterator[KindSpec]:
    """``spec`` in the registry for the ``with`` block (tests add a toy kind this way)."""
    if spec.name in KINDS:
        raise ConfigError(f"kind: {spec.name!r} is registered already", field="kind")
    KINDS[spec.name] = spec
    try:
        yield spec
    finally:
        del KINDS[spec.name]


def config_class(kind: str) -> type[TrainingConfig]:
    """The config dataclass of ``kind``; ConfigError naming the kinds."""
    return kind_spec(kind).config_class


def config_from_dict(values: dict[str, Any]) -> TrainingConfig:
    """Rebuild a config from ``to_dict()`` output (``kind`` selects the class); unknown keys are an
    error that names them."""
    values = dict(values)
    cls = config_class(values.pop("kind", ""))
    known = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{', '.join(unknown)}: not a {cls.__name__} field", field=unknown[0])
    return cls(**values)


# The kinds of rows a dataset snapshot's file can hold (Concord's export row formats), as a run
# reads them; what each kind of run can train on is ``row_kinds_accepted``.
ROW_KINDS: dict[str, str] = {
    "pairs": "preference pairs (prompt, chosen, rejected: a pairwise export, or a ranking's pairs)",
    "listwise": "ranked lists (prompt, responses, ranks: a ranking project's listwise export)",
    "kto": "labelled completions (prompt, completion, label: a rating project's thumbs export)",
    "regression": "rated responses (prompt, response, aspects: a rating project's aspects export)",
}
# The reward model's rows per loss (RewardModelConfig.loss).
RM_LOSS_ROWS = {
    "bradley_terry": ("pairs",),
    "plackett_luce": ("listwise",),
    "aspect_regression": ("regression",),
}


def row_kinds_accepted(kind: str, config: Mapping[str, Any]) -> tuple[str, ...]:
    """The row kinds (``ROW_KINDS``) a run of ``kind`` with settings ``config`` can read from its
    snapshot: the reward model's rows follow its ``loss``; KTO reads the snapshot's preference
    pairs (each split in two) or labelled completions (a thumbs export), or, when
    ``unpaired_data`` names its examples' file, none of the snapshot's rows (any kind will do);
    the online kinds read only each row's prompt (any kind); the other offline kinds train on
    pairs."""
    spec = kind_spec(kind)
    if kind == "rm":
        return RM_LOSS_ROWS.get(config.get("loss") or "bradley_terry", ("pairs",))
    if spec.rollouts or (kind == "kto" and config.get("unpaired_data")):
        return tuple(ROW_KINDS)
    if kind == "kto":
        return ("pairs", "kto")
    return ("pairs",)
