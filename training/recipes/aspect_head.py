"""A multi-aspect reward model's description (HelpSteer2 style): which output is which aspect and the
weights of the weighted sum that is its reward. Torch-free, so that configs validate in the web
process.

A reward-model folder trained with ``loss = "aspect_regression"`` holds ``aspects.json``:

    {"aspects": ["helpfulness", "correctness", ...], "weights": [0.5, 0.5, ...],
     "targets": "normalised"}

Output a of the sequence classifier (``num_labels = A``) predicts aspect a's rating normalised from
its row's scale to [0, 1] ((rating - low) / (high - low)); the reward the online recipes and
``reward_scores`` use is sum_a weights[a] * output[a]. A weights text (``aspect_weights`` of the
reward-model config, ``reward_aspect_weights`` of PPO, RLOO and GRPO) reads
``"helpfulness=0.65, correctness=0.8, verbosity=-0.4"``; an aspect it does not name weighs 0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ASPECTS_FILE = "aspects.json"


def parse_aspect_weights(text: str) -> dict[str, float]:
    """``"name=weight, name=weight"`` -> {name: weight}, in the text's order. ValueError for an
    empty text, a part without ``=``, a repeated name or a weight that is not a finite number."""
    weights: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"aspect weights are 'name=weight' separated by commas, got {part!r}")
        if name in weights:
            raise ValueError(f"aspect {name!r} is weighted twice")
        try:
            weight = float(value)
        except ValueError:
            raise ValueError(f"aspect {name!r}: weight {value.strip()!r} is not a number") from None
        if not math.isfinite(weight):
            raise ValueError(f"aspect {name!r}: weight must be finite, got {weight}")
        weights[name] = weight
    if not weights:
        raise ValueError("aspect weights: name at least one aspect")
    return weights


def resolve_weights(aspects: Sequence[str], text: str | None) -> tuple[float, ...]:
    """The weight of each of ``aspects`` from a weights text (unnamed aspects: 0); None gives
    every aspect 1 / A. ValueError naming an aspect the text weighs that is not among them."""
    if text is None:
        return tuple(1.0 / len(aspects) for _ in aspects)
    weights = parse_aspect_weights(text)
    unknown = [name for name in weights if name not in aspects]
    if unknown:
        raise ValueError(
            f"aspect weights name {', '.join(unknown)}, not among the model's aspects "
            f"({', '.join(aspects)})"
        )
    return tuple(weights.get(name, 0.0) for name in aspects)


@dataclass(frozen=True)
class AspectHead:
    """Aspects [A] in output order and the weights [A] of the reward's weighted sum."""

    aspects: tuple[str, ...]
    weights: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.aspects or len(set(self.aspects)) != len(self.aspects):
            raise ValueError(f"aspects must be distinct names, at least one: {self.aspects}")
        if len(self.weights) != len(self.aspects):
            raise ValueError(f"{len(self.weights)} weights for {len(self.aspects)} aspects")

    def payload(self) -> dict[str, Any]:
        return {
            "aspects": list(self.aspects),
            "weights": list(self.weights),
            "targets": "normalised",
        }

    def reweighted(self, text: str | None) -> AspectHead:
        """The same head with the weights of ``text`` (None: keep the saved ones)."""
        if text is None:
            return self
        return AspectHead(self.aspects, resolve_weights(self.aspects, text))

    @classmethod
    def read(cls, folder: str | Path) -> AspectHead | None:
        """The head described in ``folder``'s ``ASPECTS_FILE``, or None (a one-output reward model).
        ValueError naming the file when it does not hold aspects and weights."""
        file = Path(folder) / ASPECTS_FILE
        if not file.is_file():
            return None
        try:
            payload = json.loads(file.read_text())
            aspects = tuple(str(name) for name in payload["aspects"])
            weights = tuple(float(w) for w in payload["weights"])
            return cls(aspects, weights)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{file}: expected aspects and weights ({error})") from error
