"""The few generations an online run shows on its page at evaluation steps (``on_samples``).

Pure: rollouts and per-rollout numbers in, plain dictionaries out; no torch, no Django.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

SAMPLES_PER_EVAL = 4  # enough to read at a glance; one per prompt when the batch repeats prompts


class _Rollout(Protocol):
    prompt: tuple[tuple[str, str], ...]  # ((role, content), ...)
    text: str
    response_ids: tuple[int, ...]
    finished: bool


def prompt_text(prompt: Sequence[tuple[str, str]]) -> str:
    """The prompt as a reader sees it: the last user turn alone, or every turn as "role: content"
    when the conversation has more than one non-system turn."""
    turns = [(role, content) for role, content in prompt if role != "system"]
    if len(turns) == 1:
        return turns[0][1]
    return "\n".join(f"{role}: {content}" for role, content in turns)


def rollout_samples(
    *,
    rollouts: Sequence[_Rollout],
    rewards: Sequence[float],
    figures: Mapping[str, Sequence[float]],
    limit: int = SAMPLES_PER_EVAL,
) -> list[dict[str, Any]]:
    """Up to ``limit`` samples, one per distinct prompt first (RLOO repeats each prompt K times).

    rewards: [R] the reward each rollout was trained on; figures: name -> [R] per-rollout numbers
    (e.g. ``score``, ``kl``); each sample also gets ``length`` (response tokens) and ``finished``
    (1.0 when the response emitted EOS). Non-finite numbers become None.
    """
    if len(rewards) != len(rollouts):
        raise ValueError(f"rewards: {len(rewards)} values for {len(rollouts)} rollouts")
    for name, column in figures.items():
        if len(column) != len(rollouts):
            raise ValueError(
                f"figures[{name!r}]: {len(column)} values for {len(rollouts)} rollouts"
            )
    if limit < 0:
        raise ValueError(f"limit: must be >= 0, got {limit}")
    seen: set[tuple[tuple[str, str], ...]] = set()
    first_of_each = []
    for index, rollout in enumerate(rollouts):
        key = tuple(rollout.prompt)
        if key not in seen:
            seen.add(key)
            first_of_each.append(index)
    others = [i for i in range(len(rollouts)) if i not in set(first_of_each)]
    chosen = (first_of_each + others)[:limit]
    return [
        {
            "prompt": prompt_text(rollouts[i].prompt),
            "response": rollouts[i].text,
            "reward": _finite(rewards[i]),
            **{name: _finite(column[i]) for name, column in figures.items()},
            "length": float(len(rollouts[i].response_ids)),
            "finished": float(rollouts[i].finished),
        }
        for i in chosen
    ]


def _finite(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None
