"""Run configs (defaults, validation naming the field, JSON round trip, torch-free) and data files."""

import json
import subprocess
import sys

import pytest

from tests.helpers.tiny_models import write_jsonl
from training.recipes import ConfigError, DPOConfig, PPOConfig, config_from_dict, config_help
from training.recipes.config import DPO_LOSS_TYPES, RewardModelConfig, RLOOConfig

REQUIRED = {"model": "m", "data": "d.jsonl", "output_dir": "out"}


def test_defaults_are_pipeline_numbers():
    """DPO beta 0.1 and lr 5e-7; PPO clip 0.2, GAE lambda 0.95, 4 epochs, value weight 0.5, entropy
    0.01, KL stop 0.1, 70/20/10 rollouts; RLOO K = 4; KL 0.02; checkpoints every 100 keeping 5."""
    dpo = DPOConfig(**REQUIRED)
    assert (dpo.beta, dpo.learning_rate, dpo.checkpoint_every, dpo.keep_checkpoints) == (
        0.1,
        5e-7,
        100,
        5,
    )
    ppo = PPOConfig(**REQUIRED, reward_model="rm")
    assert (ppo.clip_ratio, ppo.lam, ppo.ppo_epochs, ppo.vf_coef, ppo.entropy_coef) == (
        0.2,
        0.95,
        4,
        0.5,
        0.01,
    )
    assert (ppo.target_kl_stop, ppo.anchor_fraction, ppo.perturb_fraction) == (0.1, 0.2, 0.1)
    assert (ppo.kl_coef, ppo.learning_rate, ppo.reward_range) == (0.02, 1e-6, (0.1, 1.0))
    assert RLOOConfig(**REQUIRED, reward_model="rm").rloo_k == 4


@pytest.mark.parametrize(
    ("cls", "values", "field"),
    [
        (DPOConfig, {"beta": 0}, "beta"),
        (DPOConfig, {"loss_type": "kto"}, "loss_type"),
        (DPOConfig, {"loss_type": "ipo", "label_smoothing": 0.1}, "label_smoothing"),
        (DPOConfig, {"batch_size": 8, "micro_batch_size": 3}, "micro_batch_size"),
        (DPOConfig, {"model": ""}, "model"),
        (RewardModelConfig, {"eval_fraction": 1.0}, "eval_fraction"),
        (PPOConfig, {"reward_model": "rm", "minibatch_size": 99}, "minibatch_size"),
        (PPOConfig, {"reward_model": ""}, "reward_model"),
        (RLOOConfig, {"reward_model": "rm", "rloo_k": 1}, "rloo_k"),
        (RLOOConfig, {"reward_model": "rm", "kl_controller": "pid"}, "kl_controller"),
    ],
)
def test_impossible_values_are_refused_naming_the_field(cls, values, field):
    with pytest.raises(ConfigError, match=f"^{field}:"):
        cls(**{**REQUIRED, **values})


def test_saved_config_rebuilds_the_same_config(tmp_path):
    """config.json -> config_from_dict gives an equal config (tuples survive JSON as lists)."""
    config = PPOConfig(**REQUIRED, reward_model="rm", kl_controller="variance")
    config.save(tmp_path / "config.json")
    assert config_from_dict(json.loads((tmp_path / "config.json").read_text())) == config
    with pytest.raises(ConfigError, match="colour"):
        config_from_dict({"kind": "dpo", **REQUIRED, "colour": "red"})


def test_every_field_has_help():
    for cls in (DPOConfig, PPOConfig, RLOOConfig, RewardModelConfig):
        assert all(help_text for _, _, help_text in config_help(cls)), cls


def test_validating_configs_imports_no_torch():
    """The admin validates run settings in the web process: building every config stays torch-free,
    and the DPO loss types repeated there agree with the maths package's."""
    code = (
        "import sys;"
        "from training.recipes import DPOConfig, PPOConfig, RLOOConfig, RewardModelConfig;"
        "r = dict(model='m', data='d', output_dir='o');"
        "DPOConfig(**r); RewardModelConfig(**r);"
        "PPOConfig(**r, reward_model='x'); RLOOConfig(**r, reward_model='x');"
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
    from training.algorithms import DPO_LOSS_TYPES as maths_types

    assert maths_types == DPO_LOSS_TYPES


def test_import_format_rows_use_gold_or_the_majority(tmp_path):
    """gold wins; else the judgements' majority; ties and rows without a majority are skipped."""
    from training.recipes.data import load_judged_pairs

    rows = [
        {"prompt": "p1", "response_a": "A", "response_b": "B", "gold": "b"},
        {"prompt": "p2", "response_a": "A", "response_b": "B",
         "judgements": [{"annotator": "x", "choice": "a", "shown_left": "b"},
                        {"annotator": "y", "choice": "a"}, {"annotator": "z", "choice": "b"}]},
        {"prompt": "p3", "response_a": "A", "response_b": "B", "gold": "tie"},
        {"prompt": [{"role": "user", "content": "p4"}], "chosen": "C", "rejected": "R",
         "margin": 0.5},
    ]  # fmt: skip
    pairs, votes = load_judged_pairs(write_jsonl(tmp_path / "rows.jsonl", rows))
    assert [(p.chosen, p.rejected) for p in pairs] == [("B", "A"), ("A", "B"), ("C", "R")]
    assert pairs[2].margin == 0.5 and pairs[2].prompt == (("user", "p4"),)
    assert [(v.annotator, v.prefers_chosen, v.chosen_shown_left) for v in votes] == [
        ("x", True, False),
        ("y", True, None),
        ("z", False, None),
    ]


def test_export_rows_join_their_raw_judgements_by_comparison_and_chosen_side(tmp_path):
    """Votes are read relative to each pair's chosen side; ties, other comparisons and rows of
    pairs without a chosen_side are skipped; the cluster is kept as text; a bad side is named."""
    from training.recipes.data import DataError, judgements_file_for, load_judged_pairs

    rows = [
        {"prompt": "p1", "chosen": "B", "rejected": "A", "comparison_id": 7, "chosen_side": "b",
         "cluster": 2},
        {"prompt": "p2", "chosen": "A", "rejected": "B", "comparison_id": 8, "chosen_side": "a"},
        {"prompt": "p3", "chosen": "A", "rejected": "B"},
    ]  # fmt: skip
    raw = [
        {"comparison_id": 7, "annotator": "x", "choice": "b", "shown_left": "a"},
        {"comparison_id": 7, "annotator": "y", "choice": "a", "shown_left": "a"},
        {"comparison_id": 8, "annotator": "x", "choice": "tie"},
        {"comparison_id": 8, "annotator": "y", "choice": "a"},
        {"comparison_id": 99, "annotator": "z", "choice": "a"},
    ]
    data = write_jsonl(tmp_path / "set.jsonl", rows)
    write_jsonl(tmp_path / "set.judgements.jsonl", raw)
    judgements = judgements_file_for(data)
    assert judgements == tmp_path / "set.judgements.jsonl"
    pairs, votes = load_judged_pairs(data, judgements)
    assert [p.cluster for p in pairs] == ["2", None, None]
    assert [(v.pair, v.annotator, v.prefers_chosen, v.chosen_shown_left) for v in votes] == [
        (0, "x", True, False),
        (0, "y", False, False),
        (1, "y", True, None),
    ]
    bad = write_jsonl(tmp_path / "bad.jsonl", [{**rows[0], "chosen_side": "left"}])
    with pytest.raises(DataError, match="line 1: chosen_side"):
        load_judged_pairs(bad)


def test_a_bad_line_is_named(tmp_path):
    from training.recipes.data import DataError, load_preference_pairs

    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "p", "chosen": "c", "rejected": "r"}\n{"prompt": "p"}\n')
    with pytest.raises(DataError, match="line 2"):
        load_preference_pairs(path)


def test_chat_encoding_is_prompt_then_the_templates_reply(tiny_tokenizer_dir):
    """The completion is what the chat template adds for the assistant turn (text, end-of-turn token,
    newline); a long prompt keeps its end; the total never exceeds max_length."""
    from training.recipes.data import ChatEncoder
    from training.recipes.models import load_tokenizer

    tokenizer = load_tokenizer(tiny_tokenizer_dir)
    encoder = ChatEncoder(tokenizer, max_length=40, prompt_budget=20)
    seq = encoder.encode((("user", "Is water wet?"),), "Water makes things wet.")
    completion = tokenizer.decode(seq.input_ids[seq.prompt_length :])
    assert completion == "Water makes things wet.<|im_end|>\n"
    long = encoder.encode((("user", "Is water wet? " * 20),), "Yes. " * 30)
    assert long.prompt_length == 20 and len(long.input_ids) == 40
    assert tokenizer.decode(long.input_ids[: long.prompt_length]).endswith("assistant\n")


def test_smollm2_template_renders_the_prompt_as_a_prefix():
    """With the real SmolLM2 tokenizer (skipped before fetch_models), the reply ends with
    <|im_end|> and the prompt carries the default system message."""
    from tests.helpers.tiny_models import smollm2_dir
    from training.recipes.data import ChatEncoder
    from training.recipes.models import load_tokenizer

    folder = smollm2_dir()
    if folder is None:
        pytest.skip("SmolLM2 not fetched (python manage.py fetch_models)")
    tokenizer = load_tokenizer(folder)
    seq = ChatEncoder(tokenizer, max_length=256, prompt_budget=128).encode(
        (("user", "Hi"),), "Hello"
    )
    assert tokenizer.decode(seq.input_ids[seq.prompt_length :]) == "Hello<|im_end|>\n"
    assert "SmolLM" in tokenizer.decode(seq.input_ids[: seq.prompt_length])


def test_repetition_rate_counts_repeated_trigrams():
    """[1 2 3 1 2 3]: trigrams 123, 231, 312, 123 -> 1 of 4 repeated = 0.25; a response shorter than
    3 tokens has none."""
    from training.recipes.online import Rollout, repetition_rate

    def rollout(ids):
        return Rollout((("user", "p"),), (1,), tuple(ids), True, "")

    assert repetition_rate([rollout([1, 2, 3, 1, 2, 3])]) == 0.25
    assert repetition_rate([rollout([1, 2])]) == 0.0
