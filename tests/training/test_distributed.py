"""Data parallelism: DPO on two CPU processes (torchrun, Gloo) reaches the weights one process does."""

import json
import subprocess
import sys

import torch

from training.recipes import DPOConfig, train_dpo


def test_two_ranks_train_like_one_process(tiny_llama_dir, pairs_file, tmp_path):
    """Each rank takes half of every step's pairs and the gradients are summed before the step, so
    2 steps of 4 pairs on 2 ranks equal 2 steps of 4 pairs on 1 process (to float rounding). Only
    rank 0 writes the run folder."""
    from safetensors.torch import load_file

    values = {
        "model": str(tiny_llama_dir),
        "data": str(pairs_file),
        "batch_size": 4,
        "max_length": 128,
        "learning_rate": 1e-3,
        "max_steps": 2,
        "checkpoint_every": 0,
        "device": "cpu",
    }
    single = train_dpo(DPOConfig(output_dir=str(tmp_path / "single"), **values))

    config = DPOConfig(output_dir=str(tmp_path / "ddp"), **values)
    config_path = tmp_path / "ddp-config.json"
    config.save(config_path)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         "-m", "training.launch", str(config_path)],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["status"] == "completed" and summary["world_size"] == 2

    a = load_file(f"{single.final_model_dir}/model.safetensors")
    b = load_file(str(tmp_path / "ddp" / "final" / "model.safetensors"))
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-6), name
