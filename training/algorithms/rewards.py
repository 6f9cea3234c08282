"""Verifiable rewards for GRPO and RLOO: small functions of a completion's text, registered by name,
and their weighted combination with every component kept for logging.

Pure Python (no torch, no Django): a reward function takes one completion (str) and, where it needs
one, the reference ``answer`` (str or None), plus keyword options, and returns a float. The recipe
turns the lists this module returns into tensors.

    combine(["exact_answer", "length_penalty"], [1.0, 0.1], ["#### 42"], answers=["42"])
    # total [1.0 + 0.1 * -(60 - 7) / 60] = [0.91167]; components {"exact_answer": [1.0],
    # "length_penalty": [-0.88333]}
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

RewardFunction = Callable[..., float]
AnswerExtraction = Literal["auto", "boxed", "hashes", "none"]

_REGISTRY: dict[str, RewardFunction] = {}


def register(name: str) -> Callable[[RewardFunction], RewardFunction]:
    """Decorator that registers ``fn(completion, *, answer=None, **options) -> float`` as ``name``."""
    if not name or not name.replace("_", "").isalnum():
        raise ValueError(f"reward names are letters, digits and underscores, got {name!r}")

    def decorate(fn: RewardFunction) -> RewardFunction:
        if name in _REGISTRY:
            raise ValueError(f"a reward named {name!r} is already registered")
        _REGISTRY[name] = fn
        return fn

    return decorate


def get(name: str) -> RewardFunction:
    """The reward function registered as ``name``; ValueError listing the known names otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown reward {name!r}; known rewards: {', '.join(names())}") from None


def names() -> list[str]:
    """The registered reward names, sorted."""
    return sorted(_REGISTRY)


# -- answer extraction and normalisation -------------------------------------------------------------

_HASHES = "####"
_BOXED = "\\boxed{"
_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")
_THOUSANDS = re.compile(r"[-+]?\d{1,3}(,\d{3})+(\.\d*)?")


def _last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...}, braces balanced; None if there is none or it never closes."""
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    depth, begin = 1, start + len(_BOXED)
    for index in range(begin, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0:
            return text[begin:index]
    return None


def extract_answer(text: str, *, extract: AnswerExtraction = "auto") -> str:
    """The final answer inside ``text``.

    ``"boxed"``: the content of the last \\boxed{...} (MATH, Hendrycks et al. 2021); ``"hashes"``: what
    follows the last "####" (GSM8K, Cobbe et al. 2021); ``"auto"``: boxed if there is one, else after
    "####", else the whole text; ``"none"``: the whole text. Missing marker under "boxed" or
    "hashes": the empty string (which matches no answer).
    """
    if extract not in ("auto", "boxed", "hashes", "none"):
        raise ValueError(f"extract must be auto, boxed, hashes or none, got {extract!r}")
    if extract == "none":
        return text
    boxed = _last_boxed(text) if extract in ("auto", "boxed") else None
    if boxed is not None:
        return boxed
    if extract in ("auto", "hashes") and _HASHES in text:
        return text.rsplit(_HASHES, 1)[1]
    return text if extract == "auto" else ""


def normalise_answer(text: str) -> str:
    """Lower case, single spaces, no surrounding spaces, quotes, '$' or trailing '.', and numbers
    without thousands separators written canonically ("1,000.50" -> "1000.5", "3.0" -> "3"; "1,2"
    stays as it is)."""
    text = " ".join(text.strip().lower().split())
    text = text.strip("\"'`$ ").rstrip(".").strip()
    candidate = text.replace(",", "") if _THOUSANDS.fullmatch(text) else text
    if _NUMBER.fullmatch(candidate):
        value = float(candidate)
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    return text


# -- the built-in rewards ----------------------------------------------------------------------------


@register("exact_answer")
def exact_answer(
    completion: str, *, answer: str | None = None, extract: AnswerExtraction = "auto"
) -> float:
    """1.0 when the completion's final answer equals the reference answer after normalisation, else
    0.0. The same extraction runs on the reference, so a GSM8K answer field ("... #### 72") works as
    it is."""
    if answer is None:
        raise ValueError("exact_answer needs the reference answer of each prompt")
    found = normalise_answer(extract_answer(completion, extract=extract))
    expected = normalise_answer(extract_answer(answer, extract=extract))
    return float(found != "" and found == expected)


def _compiled(pattern: str, flags: int = 0) -> re.Pattern[str]:
    try:
        return re.compile(pattern, flags)
    except re.error as error:
        raise ValueError(f"invalid regular expression {pattern!r}: {error}") from None


@register("regex_match")
def regex_match(completion: str, *, answer: str | None = None, pattern: str) -> float:
    """1.0 when ``pattern`` (a Python regular expression) is found anywhere in the completion."""
    return float(_compiled(pattern).search(completion) is not None)


DEFAULT_FORMAT = r"\s*<think>.*?</think>\s*<answer>.*?</answer>\s*"


@register("format")
def format_check(
    completion: str, *, answer: str | None = None, pattern: str = DEFAULT_FORMAT
) -> float:
    """1.0 when the *whole* completion matches ``pattern`` ('.' matches newlines too). The default is
    the R1-style "<think>...</think><answer>...</answer>" layout (DeepSeek-AI 2025)."""
    return float(_compiled(pattern, re.DOTALL).fullmatch(completion) is not None)


@register("length_penalty")
def length_penalty(completion: str, *, answer: str | None = None, target: int = 60) -> float:
    """-|target - characters| / target: 0 at exactly ``target`` characters, -1 at 0 or 2 * target.
    (The bench's cheap reward; ``training.algorithms.shaping.length_penalty`` is a different thing,
    a token-count tax on reward-model scores.)"""
    if target <= 0:
        raise ValueError(f"length_penalty target must be > 0 characters, got {target}")
    return -abs(target - len(completion)) / target


# -- combination -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RewardComponent:
    """One named reward with its options; ``label`` (default: the name) is its key in the logs, so
    the same function may appear twice with different options under two labels."""

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)
    label: str | None = None

    @property
    def key(self) -> str:
        return self.label or self.name


@dataclass(frozen=True)
class CombinedRewards:
    """``total[i]`` = sum_k weight_k * ``components[key_k][i]``; components keep their raw values."""

    total: list[float]
    components: dict[str, list[float]]
    weights: dict[str, float]


def _bound(component: RewardComponent) -> RewardFunction:
    """The registered function, after checking the options fit its signature (so a typo fails
    before any completion is scored)."""
    fn = get(component.name)
    try:
        inspect.signature(fn).bind("", answer=None, **component.options)
    except TypeError as error:
        raise ValueError(
            f"reward {component.key!r}: bad options {dict(component.options)}: {error}"
        ) from None
    return fn


def combine(
    components: Sequence[str | RewardComponent],
    weights: Sequence[float],
    completions: Sequence[str],
    *,
    answers: Sequence[str | None] | None = None,
) -> CombinedRewards:
    """Score every completion with every component and sum with ``weights``.

    components: K names or ``RewardComponent``s; weights: K finite floats, not all zero (a negative
    weight turns a score into a penalty); completions: N strings; answers: N reference answers (or
    None) for the rewards that need one. Returns totals [N] and each component's raw scores [N] by
    key, for logging. Every check (names, options, weights, lengths, finite scores) runs before
    anything is returned: on bad input a ValueError and no partial result.
    """
    specs = [RewardComponent(c) if isinstance(c, str) else c for c in components]
    if not specs:
        raise ValueError("combine needs at least one reward component")
    if len(weights) != len(specs):
        raise ValueError(f"{len(specs)} reward components but {len(weights)} weights")
    keys = [spec.key for spec in specs]
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    if duplicates:
        raise ValueError(f"reward components {duplicates} appear twice; give each a distinct label")
    weight_values = [float(w) for w in weights]
    if not all(math.isfinite(w) for w in weight_values):
        raise ValueError(f"reward weights must be finite numbers, got {list(weights)}")
    if not any(weight_values):
        raise ValueError("reward weights are all zero: the total would carry no signal")
    if answers is not None and len(answers) != len(completions):
        raise ValueError(f"{len(completions)} completions but {len(answers)} answers")
    functions = [_bound(spec) for spec in specs]
    references = list(answers) if answers is not None else [None] * len(completions)

    scores: dict[str, list[float]] = {}
    for spec, fn in zip(specs, functions, strict=True):
        column = [
            float(fn(text, answer=answer, **spec.options))
            for text, answer in zip(completions, references, strict=True)
        ]
        bad = [i for i, value in enumerate(column) if not math.isfinite(value)]
        if bad:
            raise ValueError(f"reward {spec.key!r} is not finite for completions {bad[:5]}")
        scores[spec.key] = column
    total = [
        sum(w * scores[key][i] for key, w in zip(keys, weight_values, strict=True))
        for i in range(len(completions))
    ]
    return CombinedRewards(
        total=total, components=scores, weights=dict(zip(keys, weight_values, strict=True))
    )
