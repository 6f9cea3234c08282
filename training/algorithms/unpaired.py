"""Unpaired examples for KTO from TRL's two row formats, and the mismatched pairs of its KL estimate.

Pure Python. Rows are mappings (one JSON object per line of a JSONL file, or a dataset row):

- unpaired (TRL's "unpaired preference" format): {"prompt": str, "completion": str, "label": bool};
- paired (TRL's "preference" format): {"prompt": str, "chosen": str, "rejected": str}, which becomes
  one desirable and one undesirable example with the same prompt (TRL's
  ``maybe_unpair_preference_dataset`` does the same).

Only text rows are read: conversational rows (lists of messages) must be rendered with the chat
template first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_UNPAIRED_KEYS = ("completion", "label")
_PAIRED_KEYS = ("chosen", "rejected")


@dataclass(frozen=True)
class UnpairedExample:
    """One completion of a prompt with its label: ``desirable`` True (thumbs up) or False."""

    prompt: str
    completion: str
    desirable: bool


def _text(row: Mapping[str, Any], key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str):
        kind = "missing" if value is None else f"a {type(value).__name__}, not text"
        raise ValueError(f"{where}: {key!r} is {kind}")
    if not value.strip():
        raise ValueError(f"{where}: {key!r} is empty")
    return value


def unpaired_examples(rows: Iterable[Mapping[str, Any]]) -> list[UnpairedExample]:
    """Read unpaired and paired rows (the two may be mixed) into unpaired examples, in row order; a
    paired row gives its chosen (desirable) then its rejected (undesirable) example.

    Errors (ValueError, naming the 1-based row and the field, nothing returned): a row that is not
    a mapping, that has neither or both sets of keys, a missing, empty or non-text prompt /
    completion / chosen / rejected, a label that is not a JSON boolean, or no rows at all.
    """
    examples: list[UnpairedExample] = []
    for number, row in enumerate(rows, start=1):
        where = f"row {number}"
        if not isinstance(row, Mapping):
            raise ValueError(f"{where}: expected an object, got {type(row).__name__}")
        unpaired = any(key in row for key in _UNPAIRED_KEYS)
        paired = any(key in row for key in _PAIRED_KEYS)
        if unpaired == paired:
            problem = "both" if unpaired else "neither"
            raise ValueError(
                f"{where}: has {problem} of (completion, label) and (chosen, rejected); an unpaired "
                "row is {prompt, completion, label} and a paired row {prompt, chosen, rejected}"
            )
        prompt = _text(row, "prompt", where)
        if paired:
            examples.append(UnpairedExample(prompt, _text(row, "chosen", where), True))
            examples.append(UnpairedExample(prompt, _text(row, "rejected", where), False))
            continue
        completion = _text(row, "completion", where)
        label = row.get("label")
        if not isinstance(label, bool):
            raise ValueError(f"{where}: 'label' must be true or false, got {label!r}")
        examples.append(UnpairedExample(prompt, completion, label))
    if not examples:
        raise ValueError("no rows: KTO needs labelled completions")
    return examples


def mismatched_pairs(examples: Sequence[UnpairedExample]) -> list[tuple[str, str]]:
    """(prompt_i, completion_{i-1}) for each i, the first prompt taking the last completion: each
    prompt with a completion written for another prompt, TRL's pairing for KTO's KL estimate
    (``_get_kl_dataset`` shifts the completions by one within the batch). examples: [M], M >= 2.
    """
    if len(examples) < 2:
        raise ValueError(
            f"the KL estimate pairs prompts with other prompts' completions: need at least 2 "
            f"examples in the batch, got {len(examples)}"
        )
    return [
        (example.prompt, examples[index - 1].completion) for index, example in enumerate(examples)
    ]
