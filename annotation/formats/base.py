"""What every reader shares: the row error, the options, and the safe JSON decoding of one record.

Pure: no Django. A reader turns one record of its public format (a dict) into one row of Concord's
own import format (the dict ``annotation.parsing`` validates), or raises ``RowError`` naming the
field that is wrong.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

MAX_RECORD_BYTES = 1_000_000
# Deeper JSON is refused: Python's parser gives up near 1,000 levels, and storing or exporting a
# value nearly that deep could fail later, half-way through a write.
MAX_DEPTH = 64
SCALARS_AS_TEXT = "scalars_as_text"  # ReadOptions.tally's key: values read as their JSON text


class RowError(ValueError):
    """One record cannot be read: ``field`` (or '' for the whole record) and why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


class SourceError(ValueError):
    """The file as a whole cannot be read (unknown format, bomb guard, broken container)."""


@dataclass(frozen=True)
class ReadOptions:
    """How readers treat what their format leaves open.

    scalars_as_text: a response that is a JSON number or boolean becomes its JSON text ("true")
        instead of a row error (PandaLM's test set has six ``true`` responses).
    scalars_as_text_name: how the refusal names the switch that turns on ``scalars_as_text`` (the
        command's flag; the upload page's checkbox; the API's field).
    tally: what the readers converted so far ("scalars_as_text": values read as their text);
        ``converted`` reports it per record.
    label_as: annotator name under which a single-label file's preference becomes a judgement
        (None: the format's default; "" for none).
    questions: FastChat question.jsonl rows by question id ({"turns": [...]}), for MT-Bench rows
        without conversation text; answers: {model: {question id: [turn texts]}}.
    """

    scalars_as_text: bool = False
    label_as: str | None = None
    questions: dict[str, dict[str, Any]] | None = None
    answers: dict[str, dict[str, list[str]]] | None = None
    questions_name: str = "--questions"
    answers_name: str = "--answers"
    scalars_as_text_name: str = "--scalars-as-text"
    extra: dict[str, Any] = field(default_factory=dict)
    tally: Counter[str] = field(default_factory=Counter, compare=False, repr=False)


def _refuse_constant(token: str) -> float:
    raise ValueError(f"{token} is not a number JSON allows")


def _finite_float(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):
        raise ValueError(f"{token[:40]} is out of the range of a double")
    return value


def unstorable(data: object) -> str | None:
    """Why the parsed value cannot be stored as it is (too deep, a NUL character), or None.

    Walks with an explicit stack: the value may be nearly as deep as the parser allows.
    """
    stack: list[tuple[object, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()  # depth: the level of ``value`` (the row object is level 1)
        if isinstance(value, dict | list) and depth > MAX_DEPTH:
            return f"JSON nested too deeply (at most {MAX_DEPTH} levels)"
        if isinstance(value, str):
            if "\x00" in value:
                return "a string contains a NUL character (\\u0000), which cannot be stored"
        elif isinstance(value, dict):
            stack.extend((key, depth) for key in value)
            stack.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)
    return None


DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


def load_record(raw: str) -> dict[str, Any]:
    """One JSON object from text (a JSONL line); raises RowError saying what is wrong."""
    if len(raw) > MAX_RECORD_BYTES or len(raw.encode("utf-8")) > MAX_RECORD_BYTES:
        raise RowError("", f"line is longer than {MAX_RECORD_BYTES} bytes")
    try:
        data = DECODER.decode(raw)
    except json.JSONDecodeError as exc:
        raise RowError("", f"malformed JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise RowError("", f"JSON nested too deeply (at most {MAX_DEPTH} levels)") from None
    except ValueError as exc:  # a number token that is out of range (see the parse hooks)
        raise RowError("", f"unacceptable JSON number: {exc}") from None
    if not isinstance(data, dict):
        raise RowError("", "each record must be a JSON object")
    if _storable_text(raw):
        return data
    return checked_record(data)


def _storable_text(raw: str) -> bool:
    """Whether the JSON text ``raw`` surely decodes to a storable value, read from the text alone
    (a scan in C, where ``unstorable``'s walk of the value costs about a third of a row's check):
    the strict decoder takes a NUL only as the escape ``\\u0000``, and a value nested deeper than
    MAX_DEPTH needs more than MAX_DEPTH opening brackets. False only means "walk the value"."""
    return "\\u0000" not in raw and raw.count("{") + raw.count("[") <= MAX_DEPTH


def checked_record(data: object) -> dict[str, Any]:
    """``data`` when it is a storable JSON object; RowError otherwise."""
    if not isinstance(data, dict):
        raise RowError("", "each record must be a JSON object")
    if problem := unstorable(data):
        raise RowError("", problem)
    return data


def text_field(
    record: dict[str, Any], name: str, *, options: ReadOptions, allow_empty: bool = True
) -> str:
    """The string in ``record[name]``; numbers and booleans only with ``scalars_as_text``."""
    value = record.get(name)
    if value is None:
        raise RowError(name, "is required")
    if isinstance(value, bool | int | float) and options.scalars_as_text:
        options.tally[SCALARS_AS_TEXT] += 1
        return json.dumps(value)
    if not isinstance(value, str):
        hint = (
            f" ({options.scalars_as_text_name} imports it as its JSON text)"
            if isinstance(value, bool | int | float)
            else ""
        )
        raise RowError(name, f"must be a string, not {type(value).__name__} {value!r}{hint}")
    if not allow_empty and not value.strip():
        raise RowError(name, "must not be empty")
    return value


def message_list(value: object, name: str) -> list[dict[str, str]]:
    """A list of {role, content} turns (extra keys dropped); RowError naming the bad turn."""
    if not isinstance(value, list) or not value:
        raise RowError(name, "must be a non-empty list of {role, content} turns")
    turns = []
    for index, turn in enumerate(value):
        if (
            not isinstance(turn, dict)
            or turn.get("role") not in ("system", "user", "assistant")
            or not isinstance(turn.get("content"), str)
        ):
            raise RowError(
                f"{name}[{index}]", "must be {role: system|user|assistant, content: text}"
            )
        turns.append({"role": turn["role"], "content": turn["content"]})
    return turns


def split_final_reply(
    first: list[dict[str, str]], second: list[dict[str, str]], names: tuple[str, str]
) -> tuple[list[dict[str, str]], str, str]:
    """Two whole conversations -> (the shared turns before the last reply, reply 1, reply 2).

    Both must end with an assistant turn and agree on every turn before it; otherwise RowError
    saying where they differ.
    """
    for convo, name in zip((first, second), names, strict=True):
        if convo[-1]["role"] != "assistant":
            raise RowError(name, "must end with an assistant turn")
    shared_first, shared_second = first[:-1], second[:-1]
    if shared_first != shared_second:
        at = next(
            (
                i
                for i, (x, y) in enumerate(zip(shared_first, shared_second, strict=False))
                if x != y
            ),
            min(len(shared_first), len(shared_second)),
        )
        raise RowError(
            names[1], f"differs from {names[0]} at turn {at}, before the last assistant turn"
        )
    if not shared_first:
        raise RowError(names[0], "has no user turn before the assistant's reply")
    return shared_first, first[-1]["content"], second[-1]["content"]
