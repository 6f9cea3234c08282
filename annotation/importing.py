"""Parse and validate comparison JSONL (the import format of ARCHITECTURE.md) before anything is written.

Each line becomes an ``ImportedComparison`` or a list of ``LineError``s naming the line and field. The
service writes only when the whole file is clean (all or nothing).

Accepted rows::

    {"prompt": "text" | [{"role": "user", "content": "..."}, ...],
     "response_a": "text", "response_b": "text", "model_a": "...", "model_b": "...",
     "id": "...", "gold": "a" | "b" | "tie",
     "judgements": [{"annotator": "name", "choice": "a" | "b" | "tie", "strength": 1,
                     "rationale": "...", "shown_left": "a" | "b", "elapsed_ms": 1234}],
     "metadata": {...}}

or TRL style ``{"prompt", "chosen", "rejected"}`` (chosen becomes response A, recorded in metadata).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from annotation.models import MAX_STRENGTH, Choice, Side

MAX_LINE_BYTES = 1_000_000
# Deeper JSON is refused: Python's parser gives up near 1,000 levels, and storing or exporting a
# value nearly that deep could fail later, half-way through a write.
MAX_DEPTH = 64
MAX_NAME_CHARS = 200  # external ids and model names (the columns' length)
MAX_ELAPSED_MS = 2**31 - 1  # the column's largest value (24 days: anything above is not a timing)
ROLES = ("system", "user", "assistant")
# The first bytes of compressed files: an upload is plain JSONL, never decompressed on the server.
COMPRESSED_MAGIC = {
    b"\x1f\x8b": "gzip",
    b"PK\x03\x04": "zip",
    b"PK\x05\x06": "zip",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"7z\xbc\xaf\x27\x1c": "7z",
}


def compression_of(head: bytes) -> str | None:
    """The compression format whose signature starts ``head`` (a file's first bytes), or None."""
    for magic, name in COMPRESSED_MAGIC.items():
        if head.startswith(magic):
            return name
    return None


def compressed_file_message(name: str, compression: str) -> str:
    return (
        f"{name} is a {compression}-compressed file; compressed files are not accepted: "
        "upload the uncompressed JSONL"
    )


@dataclass(frozen=True)
class LineError:
    """What is wrong with one line of the file: 1-based line number, field (or '' for the line)."""

    line: int
    field: str
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}" + (f", field {self.field!r}" if self.field else "")
        return f"{where}: {self.message}"


class ImportValidationError(Exception):
    """The file has errors; nothing was imported. ``errors`` lists every one found."""

    def __init__(self, errors: list[LineError], *, total: int | None = None) -> None:
        self.errors = errors
        self.total = len(errors) if total is None else total
        shown = "; ".join(str(e) for e in errors[:20])
        more = f" (and {self.total - 20} more)" if self.total > 20 else ""
        super().__init__(f"{self.total} error(s), nothing imported: {shown}{more}")


@dataclass(frozen=True)
class ImportedJudgement:
    annotator: str
    choice: str
    strength: int
    rationale: str
    shown_left: str
    elapsed_ms: int | None


@dataclass(frozen=True)
class ImportedComparison:
    """One validated row. ``prompt_text`` is the text, or the last user turn of ``messages``."""

    line: int
    prompt_text: str
    messages: list[dict[str, str]] | None
    response_a: str
    response_b: str
    model_a: str
    model_b: str
    external_id: str
    gold: str
    judgements: tuple[ImportedJudgement, ...]
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt_hash(self) -> str:
        return content_hash(self.messages if self.messages is not None else self.prompt_text)

    @property
    def comparison_hash(self) -> str:
        prompt = self.messages if self.messages is not None else self.prompt_text
        return content_hash([prompt, self.response_a, self.response_b])


def content_hash(value: object) -> str:
    """SHA-256 of the value's canonical JSON: equal content, equal hash, whatever the key order."""
    canonical = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class _Row:
    """Collects the errors of one line while its fields are read."""

    def __init__(self, line: int, data: dict[str, Any]) -> None:
        self.line, self.data, self.errors = line, data, []

    def fail(self, name: str, message: str) -> None:
        self.errors.append(LineError(self.line, name, message))

    def text(self, name: str, *, required: bool) -> str:
        value = self.data.get(name)
        if value is None:
            if required:
                self.fail(name, "is required")
            return ""
        if not isinstance(value, str):
            self.fail(name, f"must be a string, not {type(value).__name__}")
            return ""
        if required and not value.strip():
            self.fail(name, "must not be empty")
        return value


def _parse_prompt(row: _Row) -> tuple[str, list[dict[str, str]] | None]:
    value = row.data.get("prompt")
    if isinstance(value, str):
        if not value.strip():
            row.fail("prompt", "must not be empty")
        return value, None
    if isinstance(value, list) and value:
        messages: list[dict[str, str]] = []
        for turn_no, turn in enumerate(value):
            if (
                not isinstance(turn, dict)
                or turn.get("role") not in ROLES
                or not isinstance(turn.get("content"), str)
            ):
                row.fail(f"prompt[{turn_no}]", f"must be {{role: one of {ROLES}, content: string}}")
                return "", None
            messages.append({"role": turn["role"], "content": turn["content"]})
        if messages[-1]["role"] != "user":
            row.fail("prompt", "a conversation must end with a user turn")
        return messages[-1]["content"], messages
    if value is None:
        row.fail("prompt", "is required")
    else:
        row.fail("prompt", "must be a string or a non-empty list of {role, content} turns")
    return "", None


def _parse_judgements(row: _Row) -> tuple[ImportedJudgement, ...]:
    raw = row.data.get("judgements", [])
    if not isinstance(raw, list):
        row.fail("judgements", "must be a list")
        return ()
    parsed: list[ImportedJudgement] = []
    seen: set[str] = set()
    choices = {c.value for c in Choice}
    for index, item in enumerate(raw):
        where = f"judgements[{index}]"
        if not isinstance(item, dict):
            row.fail(where, "must be an object")
            continue
        name = item.get("annotator")
        if not isinstance(name, str) or not name.strip() or len(name) > 150:
            row.fail(f"{where}.annotator", "must be a non-empty name of at most 150 characters")
            continue
        if name in seen:
            row.fail(f"{where}.annotator", f"{name!r} judges this comparison twice")
            continue
        seen.add(name)
        choice = item.get("choice")
        if choice not in choices:
            row.fail(
                f"{where}.choice", f"unknown choice {choice!r}; expected one of {sorted(choices)}"
            )
            continue
        strength = item.get("strength", 1)
        if isinstance(strength, bool) or not isinstance(strength, int):
            row.fail(f"{where}.strength", "must be an integer")
            continue
        if not 1 <= strength <= MAX_STRENGTH:
            row.fail(f"{where}.strength", f"must be between 1 and {MAX_STRENGTH}, got {strength}")
            continue
        shown_left = item.get("shown_left", "")
        if shown_left not in ("", *(s.value for s in Side)):
            row.fail(f"{where}.shown_left", "must be 'a' or 'b'")
            continue
        elapsed = item.get("elapsed_ms")
        if elapsed is not None and (
            isinstance(elapsed, bool)
            or not isinstance(elapsed, int)
            or not 0 <= elapsed <= MAX_ELAPSED_MS
        ):
            row.fail(f"{where}.elapsed_ms", f"must be an integer from 0 to {MAX_ELAPSED_MS}")
            continue
        rationale = item.get("rationale", "")
        if not isinstance(rationale, str):
            row.fail(f"{where}.rationale", "must be a string")
            continue
        parsed.append(
            ImportedJudgement(name.strip(), choice, strength, rationale, shown_left, elapsed)
        )
    return tuple(parsed)


def _refuse_constant(token: str) -> float:
    raise ValueError(f"{token} is not a number JSON allows")


def _finite_float(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):
        raise ValueError(f"{token[:40]} is out of the range of a double")
    return value


def _unstorable(data: object) -> str | None:
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


def parse_row(line: int, raw: str) -> ImportedComparison | list[LineError]:
    """Validate one JSONL line; returns the comparison or the line's errors."""
    if len(raw.encode("utf-8")) > MAX_LINE_BYTES:
        return [LineError(line, "", f"line is longer than {MAX_LINE_BYTES} bytes")]
    try:
        data = json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        return [LineError(line, "", f"malformed JSON: {exc.msg} at column {exc.colno}")]
    except RecursionError:
        return [LineError(line, "", f"JSON nested too deeply (at most {MAX_DEPTH} levels)")]
    except ValueError as exc:  # a number token that is out of range (see the parse hooks)
        return [LineError(line, "", f"unacceptable JSON number: {exc}")]
    if not isinstance(data, dict):
        return [LineError(line, "", "each line must be a JSON object")]
    if problem := _unstorable(data):
        return [LineError(line, "", problem)]
    row = _Row(line, data)
    prompt_text, messages = _parse_prompt(row)
    metadata = data.get("metadata", {})
    if not isinstance(metadata, dict):
        row.fail("metadata", "must be an object")
        metadata = {}
    if "chosen" in data or "rejected" in data:  # TRL style: chosen is A, rejected is B
        response_a = row.text("chosen", required=True)
        response_b = row.text("rejected", required=True)
        metadata = {**metadata, "trl_preferred": "a"}
    else:
        response_a = row.text("response_a", required=True)
        response_b = row.text("response_b", required=True)
    if response_a and response_a == response_b:
        row.fail("response_b", "is identical to response_a")
    gold = data.get("gold") or ""
    if gold not in ("", Choice.A, Choice.B, Choice.TIE):
        row.fail("gold", f"unknown gold answer {gold!r}; expected 'a', 'b' or 'tie'")
    external_id = data.get("id", "")
    if not isinstance(external_id, str | int) or isinstance(external_id, bool):
        row.fail("id", "must be a string or an integer")
        external_id = ""
    elif len(str(external_id)) > MAX_NAME_CHARS:
        row.fail("id", f"must be at most {MAX_NAME_CHARS} characters")
        external_id = ""
    judgements = _parse_judgements(row)
    model_a, model_b = row.text("model_a", required=False), row.text("model_b", required=False)
    for name, value in (("model_a", model_a), ("model_b", model_b)):
        if len(value) > MAX_NAME_CHARS:
            row.fail(name, f"must be at most {MAX_NAME_CHARS} characters")
    if row.errors:
        return row.errors
    return ImportedComparison(
        line=line,
        prompt_text=prompt_text,
        messages=messages,
        response_a=response_a,
        response_b=response_b,
        model_a=model_a,
        model_b=model_b,
        external_id=str(external_id),
        gold=gold,
        judgements=judgements,
        metadata=metadata,
    )
