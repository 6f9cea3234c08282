"""python manage.py train: JSON lines per logged step, a final summary, clear errors."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command


def _run(*args: str) -> list[dict]:
    out = StringIO()
    call_command("train", *args, stdout=out)
    return [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]


@pytest.mark.parametrize("kind", ["dpo", "rm"])
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
        "eval_fraction=0.0" if kind == "rm" else "beta=0.2",
    )
    steps, summary = rows[:-1], rows[-1]
    assert [row["step"] for row in steps] == [1, 2]
    assert all("loss" in row for row in steps)
    assert summary["event"] == "summary" and summary["status"] == "completed"
    assert summary["pairs_per_second"] > 0 and summary["tokens_per_second"] > 0
    assert (tmp_path / "run" / "final" / "config.json").is_file()


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


def test_list_options_prints_help_texts(tiny_llama_dir, pairs_file, tmp_path):
    out = StringIO()
    call_command(
        "train",
        "--kind",
        "dpo",
        "--data",
        "x",
        "--model",
        "x",
        "--output",
        "x",
        "--list-options",
        stdout=out,
    )
    assert "label_smoothing" in out.getvalue() and "conservative DPO" in out.getvalue()
