"""The recipe configs as the launch form reads them: typed fields, choices declared once, errors that
carry their field, presets every kind accepts. Pure: no Django, no database."""

from __future__ import annotations

import dataclasses

import pytest

from training.recipes.config import (
    ConfigError,
    DPOConfig,
    PPOConfig,
    config_fields,
)
from training.recipes.kinds import config_class, config_from_dict, kind_names
from training.recipes.presets import DEFAULT_PRESET, PRESETS, preset_get, preset_values

PATHS = {"model": "/m", "data": "/d.jsonl", "output_dir": "/o"}


def _paths(kind: str) -> dict[str, str]:
    return {**PATHS, "reward_model": "/rm"} if kind in ("ppo", "rloo", "grpo") else dict(PATHS)


@pytest.mark.parametrize("kind", kind_names())
def test_every_settable_field_is_described(kind):
    """config_fields lists each init field once, in order, with a type a form can show and the
    dataclass's default and help; kind (set by the class) is not a setting."""
    cls = config_class(kind)
    specs = config_fields(cls)
    assert [s.name for s in specs] == [f.name for f in dataclasses.fields(cls) if f.init]
    for spec in specs:
        assert spec.type in (bool, int, float, str, tuple), spec
        assert spec.help, f"{spec.name} has no help"
        assert spec.default == getattr(cls(**_paths(kind)), spec.name) or spec.name in _paths(kind)


def test_field_types_from_the_annotations():
    """Optional numbers, enums with their choices, the float pair and the list of texts."""
    specs = {s.name: s for s in config_fields(PPOConfig)}
    assert (specs["max_steps"].type, specs["max_steps"].optional) == (int, True)
    assert (specs["learning_rate"].type, specs["learning_rate"].optional) == (float, False)
    assert specs["bf16"].type is bool
    assert specs["kl_estimator"].choices == ("k1", "k2", "k3")
    assert specs["deepspeed"].choices[0] == "none"
    pair = specs["reward_range"]
    assert (pair.type, pair.items, pair.length, pair.optional) == (tuple, float, 2, True)
    texts = specs["perturb_instructions"]
    assert (texts.type, texts.items, texts.length, texts.optional) == (tuple, str, None, False)
    assert {s.name: s for s in config_fields(DPOConfig)}["loss_type"].choices == (
        "sigmoid", "ipo", "hinge",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "values", "field"),
    [
        ("dpo", {"beta": -1.0}, "beta"),
        ("dpo", {"loss_type": "kto"}, "loss_type"),
        ("rm", {"lr_scheduler": "step"}, "lr_scheduler"),
        ("rm", {"batch_size": 8, "micro_batch_size": 3}, "micro_batch_size"),
        ("ppo", {"reward_range": (1.0, 0.1)}, "reward_range"),
        ("ppo", {"reward_range": "(0.1, 1.0)"}, "reward_range"),
        ("ppo", {"reward_range": ("a", "b")}, "reward_range"),
        ("ppo", {"perturb_instructions": "Be concise."}, "perturb_instructions"),
        ("ppo", {"anchor_fraction": 0.7, "perturb_fraction": 0.7}, "perturb_fraction"),
        ("rloo", {"kl_controller": "pid"}, "kl_controller"),
        ("rloo", {"rloo_k": 1}, "rloo_k"),
        ("grpo", {"group_size": 1}, "group_size"),
        ("grpo", {"loss_normalisation": "mean"}, "loss_normalisation"),
        ("grpo", {"scale_rewards": "std"}, "scale_rewards"),
        ("grpo", {"clip_low": 1.5}, "clip_low"),
        ("grpo", {"rewards": ("length_penalty {target: 60}",)}, "rewards"),
        ("grpo", {"rewards": ("bad name",)}, "rewards"),
        ("grpo", {"rewards": ("a", "a")}, "rewards"),
        ("grpo", {"rewards": ("a", "b"), "reward_weights": (1.0,)}, "reward_weights"),
        ("grpo", {"reward_model_weight": 0.0}, "reward_weights"),
    ],
)
def test_errors_carry_their_field(kind, values, field):
    """A ConfigError names its field as an attribute (forms put it under that field) and as the
    start of its message (for people). The reward_range text of the original 500 is one of them."""
    with pytest.raises(ConfigError) as caught:
        config_class(kind)(**_paths(kind), **values)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ") or field == "perturb_fraction"


def test_choices_are_checked_from_the_declaration():
    """The message lists the declared choices: the dataclass holds them once."""
    with pytest.raises(ConfigError, match="deepspeed: one of none, zero2, zero2_offload"):
        config_class("rloo")(**_paths("rloo"), deepspeed="zero1")


def test_json_lists_come_back_as_tuples():
    """A stored config (JSON: tuples became lists) rebuilds the same config."""
    ppo = config_class("ppo")(**_paths("ppo"))
    stored = {**ppo.to_dict(), "reward_range": [0.1, 1.0], "perturb_instructions": ["Be brief."]}
    again = config_from_dict(stored)
    assert again.reward_range == (0.1, 1.0) and again.perturb_instructions == ("Be brief.",)


def test_unknown_setting_names_its_field():
    with pytest.raises(ConfigError) as caught:
        config_from_dict({"kind": "dpo", **PATHS, "betta": 0.2})
    assert caught.value.field == "betta"


@pytest.mark.parametrize("kind", kind_names())
@pytest.mark.parametrize("preset", [p.name for p in PRESETS])
def test_every_preset_builds_a_valid_config_of_every_kind(kind, preset):
    """Presets name only real settings of the kind, and the dataclass accepts them."""
    values = preset_values(preset, kind)
    known = {s.name for s in config_fields(config_class(kind))}
    assert set(values) <= known
    config = config_class(kind)(**_paths(kind), **values)
    assert all(getattr(config, name) == value for name, value in values.items())


def test_presets_by_name():
    assert preset_values(DEFAULT_PRESET, "dpo") == {}  # standard: the recipe's defaults
    assert preset_values("gpu", "ppo")["bf16"] is True
    assert preset_values("cpu", "rloo")["device"] == "cpu"
    assert [p.label for p in PRESETS] == ["Quick look on CPU", "Standard", "GPU, bf16 + flash-attn"]
    with pytest.raises(ConfigError) as caught:
        preset_get("tpu")
    assert caught.value.field == "preset"


def test_grpo_needs_a_reward_model_or_a_verifiable_reward():
    """No reward model and no verifiable reward: refused under ``rewards``. Verifiable rewards
    alone are enough, parsed with their labels and options, 1.0 each by default; with kl_coef 0
    the recipe needs no reference model."""
    from training.recipes.config import GRPOConfig

    with pytest.raises(ConfigError) as caught:
        GRPOConfig(**PATHS)
    assert caught.value.field == "rewards"
    config = GRPOConfig(
        **PATHS,
        rewards=['short=length_penalty {"target": 30}', "exact_answer"],
        kl_coef=0.0,
    )
    assert [(s.key, s.name, s.options) for s in config.reward_specs()] == [
        ("short", "length_penalty", {"target": 30}),
        ("exact_answer", "exact_answer", {}),
    ]
    assert config.verifiable_weights() == [1.0, 1.0]
    assert config.needs_reference is False
    assert GRPOConfig(**PATHS, reward_model="/rm").needs_reference is True
    assert config_from_dict(config.to_dict()) == config
