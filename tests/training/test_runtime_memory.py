"""The freed-memory policy of CPU runs: counted in and out, restored by the last run or on error."""

import platform
from dataclasses import replace

import pytest
import torch

from training.recipes import RewardModelConfig, run_training
from training.recipes.runtime import FreedMemoryPolicy, freed_memory

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="the policy acts on glibc's malloc only")
def test_nested_runs_count_in_and_out():
    policy = FreedMemoryPolicy()
    cpu = torch.device("cpu")
    assert policy.enter(cpu) and policy.enter(cpu)
    assert policy.active == 2
    policy.leave()
    assert policy.active == 1  # the outer run still keeps its freed memory
    policy.leave()
    policy.leave()  # one leave too many changes nothing
    assert policy.active == 0
    block = torch.zeros(16 * 1024 * 1024)  # 64 MB, allocated and freed under the restored limits
    del block


def test_accelerator_runs_and_other_libcs_are_not_counted():
    policy = FreedMemoryPolicy()
    assert not policy.enter(torch.device("meta"))
    policy._libc = None
    assert not policy.enter(torch.device("cpu"))
    assert policy.active == 0


@pytest.mark.skipif(not GLIBC, reason="the policy acts on glibc's malloc only")
def test_reset_forgets_runs_that_raised():
    policy = FreedMemoryPolicy()
    policy.enter(torch.device("cpu"))
    policy.reset()
    assert policy.active == 0


def test_a_run_leaves_nothing_counted(tiny_bert_dir, pairs_file, tmp_path):
    """A finished run releases its count; so does one that raised before finishing."""
    config = RewardModelConfig(
        model=str(tiny_bert_dir),
        data=str(pairs_file),
        output_dir=str(tmp_path / "ok"),
        batch_size=4,
        max_length=64,
        max_steps=1,
        checkpoint_every=0,
        device="cpu",
    )
    run_training(config)
    assert freed_memory.active == 0
    missing = tmp_path / "missing.jsonl"
    with pytest.raises(FileNotFoundError):  # after start_run: the data is read inside the run
        run_training(replace(config, output_dir=str(tmp_path / "bad"), data=str(missing)))
    assert (tmp_path / "bad" / "config.json").is_file()  # the run had started
    assert freed_memory.active == 0
