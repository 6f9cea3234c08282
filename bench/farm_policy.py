"""The small farm's models (issue #34): a tiny tokenizer and 2-layer Llamas built from configs, and a
short language-model pre-training of the tiny policy on the built-in domain's answers, so that it
starts as an "instruct" model that answers in the domain's words (a random one babbles, and no
reward would move it in a few steps). Worker-side code: torch and transformers are imported inside
the functions."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def tiny_models(folder: Path, corpus: list[str], *, hidden_size: int = 32) -> tuple[Path, Path]:
    """A tiny tokenizer trained on ``corpus`` and a 2-layer Llama policy (``policy``) and reward
    model (``rm``) of width ``hidden_size`` on it (tests.helpers.tiny_models). 32 is the small
    configuration's; the built-in domain's policy needs 128 to learn which words go with a
    prompt's topic (at 32 its answers score below zero under gold whatever it is trained on)."""
    from tests.helpers.tiny_models import chatml_tokenizer, tiny_llama

    tokenizer = chatml_tokenizer(folder / "tokenizer", corpus, vocab_size=600)
    policy = tiny_llama(folder / "policy", tokenizer, hidden_size=hidden_size)
    rm = tiny_llama(
        folder / "rm", tokenizer, seed=1, for_classification=True, hidden_size=hidden_size
    )
    return policy, rm


def pretrain_policy(
    folder: Path,
    conversations: Sequence[tuple[str, str]],
    *,
    steps: int,
    seed: int = 0,
    batch_size: int = 16,
    learning_rate: float = 3e-3,
) -> list[float]:
    """Train the causal LM in ``folder`` in place for ``steps`` AdamW steps of next-token loss on
    (prompt, answer) ``conversations`` in its chat template (every token, the answer's end token
    included, so it learns to stop), ``batch_size`` conversations a step drawn with ``seed``.
    Returns the loss of each step. float32 on the CPU."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if steps < 0 or batch_size < 1 or not conversations:
        raise ValueError(
            f"need steps >= 0, batch_size >= 1 and conversations; got {steps}, {batch_size}, "
            f"{len(conversations)}"
        )
    tokenizer = AutoTokenizer.from_pretrained(str(folder), padding_side="right")
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).train()
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}, {"role": "assistant", "content": a}], tokenize=False
        )
        for p, a in conversations
    ]
    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    labels = encoded["input_ids"].masked_fill(encoded["attention_mask"] == 0, -100)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    optimiser = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    losses = []
    for _ in range(steps):
        pick = torch.as_tensor(rng.integers(0, len(texts), batch_size))
        out = model(
            input_ids=encoded["input_ids"][pick],
            attention_mask=encoded["attention_mask"][pick],
            labels=labels[pick],
        )
        optimiser.zero_grad()
        out.loss.backward()
        optimiser.step()
        losses.append(float(out.loss.detach()))
    model.eval().save_pretrained(str(folder))
    return losses


def cache_name(
    corpus: list[str], conversations: Sequence[tuple[str, str]], hidden_size: int, steps: int
) -> str:
    """The cache entry's folder name for ``pretrained_tiny_models``: the width, the steps and a
    hash of everything else that decides the models (torch's version and thread count too)."""
    import torch

    key = hashlib.sha256(
        json.dumps(
            [corpus, list(map(list, conversations)), hidden_size, steps, torch.__version__,
             torch.get_num_threads()]
        ).encode()
    ).hexdigest()[:16]  # fmt: skip
    return f"tiny-{hidden_size}-{steps}-{key}"


def pretrained_tiny_models(
    folder: Path,
    corpus: list[str],
    conversations: Sequence[tuple[str, str]],
    *,
    hidden_size: int,
    steps: int,
    cache: Path | None = None,
) -> tuple[Path, Path, bool]:
    """``tiny_models`` in ``folder`` with the policy pre-trained for ``steps`` on
    ``conversations`` (``pretrain_policy``, seed 0). With ``cache``, the two models are kept in a
    sub-folder named by a hash of everything that decides them (corpus, conversations, width,
    steps, torch's version and thread count: float sums differ with the threads) and copied from
    there when present: every farm process of one configuration pre-trains the same policy, the
    costliest part of a tiny farm (minutes of CPU at width 128). Returns (policy, rm, whether
    they came from the cache)."""
    kept = None if cache is None else cache / cache_name(corpus, conversations, hidden_size, steps)
    if kept is not None and (kept / "done").exists():
        shutil.copytree(kept, folder, dirs_exist_ok=True)
        return folder / "policy", folder / "rm", True
    policy, rm = tiny_models(folder, corpus, hidden_size=hidden_size)
    if steps:
        pretrain_policy(policy, conversations, steps=steps, seed=0)
    if kept is not None:
        staging = kept.with_name(f"{kept.name}.{os.getpid()}")
        shutil.copytree(folder, staging, dirs_exist_ok=True)
        (staging / "done").touch()
        try:
            staging.rename(kept)
        except OSError:  # another process kept the same models first
            shutil.rmtree(staging, ignore_errors=True)
    return policy, rm, False
