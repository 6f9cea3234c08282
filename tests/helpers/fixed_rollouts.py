"""Rollouts that do not depend on how prompts are split across processes, for checking that
data-parallel PPO and RLOO make the single-process update.

Sampled responses cannot match between one and two processes: each process draws its own random
numbers for its own prompts. ``fixed_rollouts()`` replaces sampling (not greedy evaluation) by
responses derived from a hash of the prompt and how often that prompt was asked before in this
process; every prompt of a step lives on one rank, so a one-epoch run sees the same responses
whatever the number of processes. Run as a module under torchrun with a plan file, it makes the
runs the plan lists (see ``main``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import torch

from training.recipes import online
from training.recipes.online import Rollout


def _fixed_sampler():
    asked: Counter[str] = Counter()
    real = online.sample_rollouts

    def sample(model, tokenizer, encoder, prompts, *, max_new_tokens, greedy=False, **kwargs):
        if greedy:  # evaluation: deterministic already
            return real(
                model, tokenizer, encoder, prompts, max_new_tokens=max_new_tokens, greedy=True
            )
        rollouts = []
        for prompt in prompts:
            key = repr(prompt)
            count = asked[key]
            asked[key] += 1
            seed = int.from_bytes(hashlib.sha256(f"{key}#{count}".encode()).digest()[:6], "big")
            generator = torch.Generator().manual_seed(seed)
            length = 1 + int(torch.randint(0, max_new_tokens, (), generator=generator))
            # ids 0-2 are the tiny tokenizer's special tokens (EOS is 2)
            ids = torch.randint(3, len(tokenizer), (length,), generator=generator).tolist()
            finished = count % 2 == 0
            if finished:
                ids[-1] = tokenizer.eos_token_id
            text = tokenizer.decode(ids, skip_special_tokens=True).strip()
            rollouts.append(
                Rollout(prompt, tuple(encoder.encode_prompt(prompt)), tuple(ids), finished, text)
            )
        return rollouts

    return sample


@contextlib.contextmanager
def fixed_rollouts() -> Iterator[None]:
    """Inside: PPO, RLOO and GRPO sample fixed responses (a fresh prompt counter each time)."""
    sample = _fixed_sampler()
    with (
        mock.patch("training.recipes.ppo.sample_rollouts", sample),
        mock.patch("training.recipes.rloo.sample_rollouts", sample),
        mock.patch("training.recipes.grpo.sample_rollouts", sample),
        mock.patch("training.recipes.online.sample_rollouts", sample),
    ):
        yield


def main(plan_path: str) -> int:
    """Run the plan's runs in order in this process group: a JSON list of {"config": path,
    "fixed_rollouts": bool, "stop_after": steps or null}."""
    from tests.helpers.recipes import StopAfter
    from training.recipes import config_from_dict, run_training
    from training.recipes.distributed import teardown_distributed

    for entry in json.loads(Path(plan_path).read_text()):
        config = config_from_dict(json.loads(Path(entry["config"]).read_text()))
        callbacks = [StopAfter(entry["stop_after"])] if entry.get("stop_after") else []
        sampling = fixed_rollouts() if entry.get("fixed_rollouts") else contextlib.nullcontext()
        with sampling:
            run_training(config, callbacks=callbacks)
    teardown_distributed()  # after the plan ran; a rank that raised exits at once
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
