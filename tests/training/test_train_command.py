"""python manage.py train: JSON lines per logged step, a final summary, clear errors."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command


def _run(*args: str) -> list[dict]:
    out = StringIO()
    call_command("train", *args, stdout=out)
    return [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]


@pytest.mark.parametrize("kind", ["dpo", "rm", "simpo", "orpo"])
def test_train_prints_steps_and_a_summary(kind, tiny_llama_dir, pairs_file, tmp_path, settings):
    """Two steps of 4 pairs: two step lines, then a summary with throughput."""
    settings.VAR_DIR = tmp_path / "var"
    rows = _run(
        "--kind",
        kind,
        "--data",
        str(pairs_file),
        "--model",
        str(tiny_llama_dir),
        "--batch-size",
        "4",
        "--max-length",
        "128",
        "--epochs",
        "1",
        "--max-steps",
        "2",
        "--output",
        str(tmp_path / "run"),
        "--set",
        "learning_rate=1e-4",
        "--set",
        "device=cpu",
        "--set",
        {"rm": "eval_fraction=0.0", "orpo": "orpo_lambda=0.2"}.get(kind, "beta=0.2"),
    )
    steps, summary = rows[:-1], rows[-1]
    assert [row["step"] for row in steps] == [1, 2]
    assert all("loss" in row for row in steps)
    assert summary["event"] == "summary" and summary["status"] == "completed"
    assert summary["pairs_per_second"] > 0 and summary["tokens_per_second"] > 0
    assert (tmp_path / "run" / "final" / "config.json").is_file()


def test_lora_flags_train_adapters_and_merge(tiny_llama_dir, pairs_file, tmp_path, settings):
    """--lora-rank 4 --lora-alpha 8 --lora-target-modules q_proj,v_proj --merge-lora: the saved
    config has them, final/ is a peft adapter folder on those layers and final/merged/ a model."""
    settings.VAR_DIR = tmp_path / "var"
    out = tmp_path / "run"
    rows = _run(
        "--kind", "dpo", "--data", str(pairs_file), "--model", str(tiny_llama_dir),
        "--batch-size", "4", "--max-length", "128", "--max-steps", "1", "--output", str(out),
        "--set", "device=cpu", "--lora-rank", "4", "--lora-alpha", "8",
        "--lora-target-modules", "q_proj, v_proj", "--merge-lora",
    )  # fmt: skip
    assert rows[-1]["status"] == "completed"
    saved = json.loads((out / "config.json").read_text())
    assert (saved["lora_rank"], saved["lora_alpha"], saved["merge_lora"]) == (4, 8.0, True)
    assert saved["lora_target_modules"] == ["q_proj", "v_proj"]
    adapter = json.loads((out / "final" / "adapter_config.json").read_text())
    assert (adapter["r"], adapter["lora_alpha"]) == (4, 8.0)
    assert sorted(adapter["target_modules"]) == ["q_proj", "v_proj"]
    assert (out / "final" / "merged" / "model.safetensors").is_file()


def test_lora_flag_errors_name_the_field(tiny_llama_dir, pairs_file, tmp_path):
    with pytest.raises(CommandError, match="merge_lora: needs lora_rank > 0"):
        _run(
            "--kind", "dpo", "--data", str(pairs_file), "--model", str(tiny_llama_dir),
            "--output", str(tmp_path), "--merge-lora",
        )  # fmt: skip


def test_unknown_model_name_is_a_command_error(pairs_file, tmp_path):
    with pytest.raises(CommandError, match="no model called"):
        _run(
            "--kind",
            "dpo",
            "--data",
            str(pairs_file),
            "--model",
            "no-such-model",
            "--output",
            str(tmp_path),
        )


def test_bad_config_value_names_the_field(tiny_llama_dir, pairs_file, tmp_path):
    with pytest.raises(CommandError, match="beta"):
        _run(
            "--kind",
            "dpo",
            "--data",
            str(pairs_file),
            "--model",
            str(tiny_llama_dir),
            "--output",
            str(tmp_path),
            "--set",
            "beta=-1",
        )


def test_list_options_needs_only_the_kind():
    """Listing a kind's settings needs no data, model or output folder."""
    out = StringIO()
    call_command("train", "--kind", "ppo", "--list-options", stdout=out)
    text = out.getvalue()
    assert "double_sample_variance" in text and "eval_reward_mean" in text
    assert "deepspeed" in text and "zero3_offload" in text
    out = StringIO()
    call_command("train", "--kind", "dpo", "--list-options", stdout=out)
    assert "label_smoothing" in out.getvalue() and "conservative DPO" in out.getvalue()


def test_training_without_data_model_or_output_is_a_command_error(pairs_file):
    with pytest.raises(CommandError, match="--model, --output: required"):
        _run("--kind", "dpo", "--data", str(pairs_file))


@pytest.mark.parametrize(
    ("preset", "message"),
    [
        ("zero2", "deepspeed: 'zero2' cannot be used: it runs on CUDA"),
        ("zero3", "deepspeed: 'zero3' is not supported by the PPO/RLOO/GRPO loops yet"),
    ],
)
def test_deepspeed_that_cannot_run_is_a_clear_error(
    preset, message, tiny_llama_dir, prompts_file, tmp_path
):
    """ZeRO needs CUDA and the deepspeed package (and the loops run ZeRO-2 only): the command
    says so, naming the setting, before any model is loaded."""
    with pytest.raises(CommandError, match=message):
        _run(
            "--kind", "rloo", "--data", str(prompts_file), "--model", str(tiny_llama_dir),
            "--reward-model", str(tiny_llama_dir), "--output", str(tmp_path),
            "--set", "device=cpu", "--set", f"deepspeed={preset}",
        )  # fmt: skip


def test_nproc_launches_torchrun_on_the_saved_config(
    tiny_llama_dir, prompts_file, tmp_path, monkeypatch
):
    """--nproc 2 writes the resolved config to the run folder and runs training.launch on it under
    torchrun with 2 processes per node, passing its JSON lines through."""
    from training import worker
    from training.recipes import config_from_dict

    launched = []

    class FakePopen:
        def __init__(self, args, **kwargs):
            launched.append(args)
            self.stdout = iter(['{"step": 1, "loss": 0.5}\n', '{"event": "summary"}\n'])
            self.returncode = 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def wait(self):
            return self.returncode

    monkeypatch.setattr(worker.subprocess, "Popen", FakePopen)  # the launcher the command follows
    rows = _run(
        "--kind", "rloo", "--data", str(prompts_file), "--model", str(tiny_llama_dir),
        "--reward-model", str(tiny_llama_dir), "--output", str(tmp_path / "run"),
        "--nproc", "2", "--set", "rloo_k=3",
    )  # fmt: skip
    assert rows == [{"step": 1, "loss": 0.5}, {"event": "summary"}]
    (args,) = launched
    config_path = tmp_path / "run" / "launch-config.json"
    assert args[1:] == [
        "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
        "-m", "training.launch", str(config_path),
    ]  # fmt: skip
    config = config_from_dict(json.loads(config_path.read_text()))
    assert config.kind == "rloo" and config.rloo_k == 3


def _kto_args(tiny_llama_dir, tmp_path, *data: str) -> list[str]:
    return [
        "--kind", "kto", *data, "--model", str(tiny_llama_dir), "--batch-size", "4",
        "--max-length", "128", "--max-steps", "2", "--output", str(tmp_path / "run"),
        "--set", "device=cpu", "--set", "learning_rate=1e-4",
    ]  # fmt: skip


def test_train_kto_on_an_unpaired_file(tiny_llama_dir, tmp_path, settings):
    """--unpaired-file alone (no --data): two steps of 4 labelled completions, a summary in
    examples per second, the reference log-probs cached under VAR_DIR as DPO's are."""
    from tests.helpers.tiny_models import PAIRS, write_jsonl

    settings.VAR_DIR = tmp_path / "var"
    rows = [{"prompt": p, "completion": c, "label": True} for p, c, _ in PAIRS]
    rows += [{"prompt": p, "completion": r, "label": False} for p, _, r in PAIRS[:4]]
    unpaired = write_jsonl(tmp_path / "unpaired.jsonl", rows)
    lines = _run(*_kto_args(tiny_llama_dir, tmp_path, "--unpaired-file", str(unpaired)))
    steps, summary = lines[:-1], lines[-1]
    assert [row["step"] for row in steps] == [1, 2]
    assert summary["status"] == "completed" and summary["examples_per_second"] > 0
    assert (summary["desirable_examples"], summary["undesirable_examples"]) == (8, 4)
    assert (summary["desirable_weight"], summary["undesirable_weight"]) == (1.0, 2.0)
    assert list((tmp_path / "var" / "cache" / "reference-logps").glob("kto-reference-*.pt"))


def test_train_kto_errors_are_command_errors(tiny_llama_dir, pairs_file, tmp_path):
    """A bad unpaired row names its line; --unpaired-file is refused for other kinds."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "p", "completion": "c", "label": "good"}\n')
    with pytest.raises(CommandError, match=r"bad\.jsonl line 1: 'label' must be true or false"):
        _run(*_kto_args(tiny_llama_dir, tmp_path, "--unpaired-file", str(bad)))
    with pytest.raises(CommandError, match="--unpaired-file: only with --kind kto"):
        _run("--kind", "dpo", "--data", str(pairs_file), "--unpaired-file", str(bad))
    with pytest.raises(CommandError, match="--unpaired-file: no such file"):
        _run(*_kto_args(tiny_llama_dir, tmp_path, "--unpaired-file", str(tmp_path / "no.jsonl")))


def test_train_grpo_with_verifiable_rewards(tiny_llama_dir, prompts_file, tmp_path):
    """``--kind grpo`` with two ``--reward`` lines and their weights, no reward model: step lines
    with each component's mean, then a summary in samples per second (no reference at kl_coef 0)."""
    rows = _run(
        "--kind", "grpo", "--data", str(prompts_file), "--model", str(tiny_llama_dir),
        "--output", str(tmp_path / "run"), "--batch-size", "2", "--max-steps", "2",
        "--reward", 'length_penalty {"target": 20}', "--reward", "long=length_penalty",
        "--reward-weight", "1", "--reward-weight", "0.5",
        "--set", "group_size=2", "--set", "max_new_tokens=4", "--set", "kl_coef=0",
        "--set", "eval_prompts=0", "--set", "device=cpu",
    )  # fmt: skip
    steps, summary = rows[:-1], rows[-1]
    assert [row["step"] for row in steps] == [1, 2]
    for row in steps:
        total = row["reward/length_penalty_mean"] + 0.5 * row["reward/long_mean"]
        assert row["reward/score_mean"] == pytest.approx(total)
    assert summary["status"] == "completed" and summary["samples_per_second"] > 0
    assert summary["reference_model"] is False


def test_train_grpo_refuses_an_unknown_reward_and_rewards_for_other_kinds(
    tiny_llama_dir, prompts_file, pairs_file, tmp_path
):
    """An unregistered reward name is a command error listing the known ones; --reward with
    another kind is refused."""
    common = ["--model", str(tiny_llama_dir), "--output", str(tmp_path / "run")]
    with pytest.raises(CommandError, match="unknown reward 'nope'; known rewards: exact_answer"):
        _run("--kind", "grpo", "--data", str(prompts_file), "--reward", "nope", *common)
    with pytest.raises(CommandError, match="only with --kind grpo"):
        _run("--kind", "dpo", "--data", str(pairs_file), "--reward", "format", *common)


def test_config_fields_are_options_of_their_own(tiny_llama_dir, pairs_file, tmp_path, settings):
    """Every config field is an option generated from the dataclass (as HfArgumentParser does):
    --beta 0.3 (a float), --lr-scheduler cosine (one of its choices) and --no-packing (a bool's
    off flag) reach the saved config of a one-step DPO run exactly as given."""
    settings.VAR_DIR = tmp_path / "var"
    out = tmp_path / "run"
    _run(
        "--kind", "dpo", "--data", str(pairs_file), "--model", str(tiny_llama_dir),
        "--batch-size", "4", "--max-length", "128", "--max-steps", "1", "--output", str(out),
        "--device", "cpu", "--beta", "0.3", "--lr-scheduler", "cosine", "--no-packing",
    )  # fmt: skip
    saved = json.loads((out / "config.json").read_text())
    assert (saved["beta"], saved["lr_scheduler"], saved["packing"]) == (0.3, "cosine", False)
    assert saved["device"] == "cpu"


def test_an_option_of_another_kind_is_refused_naming_the_kinds(
    tiny_llama_dir, pairs_file, tmp_path
):
    """--beta belongs to DPO, SimPO and KTO (the registry's order): on a reward model it is refused
    before anything runs, and a value outside a field's choices is refused by the parser."""
    base = [
        "--data",
        str(pairs_file),
        "--model",
        str(tiny_llama_dir),
        "--output",
        str(tmp_path / "r"),
    ]
    with pytest.raises(CommandError, match=r"^--beta: only with --kind dpo, simpo, kto$"):
        call_command("train", "--kind", "rm", *base, "--beta", "0.3")
    with pytest.raises(CommandError, match="--lr-scheduler: invalid choice: 'steep'"):
        call_command("train", "--kind", "dpo", *base, "--lr-scheduler", "steep")
    assert not (tmp_path / "r").exists()
