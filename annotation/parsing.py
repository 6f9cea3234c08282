"""Parse and validate comparison JSONL (the import format of ARCHITECTURE.md) before anything is written.

Each line becomes an ``ImportedComparison`` or a list of ``LineError``s naming the line and field. The
service writes only when the whole file is clean (all or nothing).

Accepted rows::

    {"prompt": "text" | [{"role": "user", "content": "..."}, ...],
     "response_a": "text", "response_b": "text", "model_a": "...", "model_b": "...",
     "id": "...", "gold": "a" | "b" | "tie",
     "judgements": [{"annotator": "name", "choice": "a" | "b" | "tie", "strength": 1,
                     "rationale": "...", "shown_left": "a" | "b", "elapsed_ms": 1234}],
     "answer": "reference answer" | number, "metadata": {..., "answer": ...}}

or TRL style ``{"prompt", "chosen", "rejected"}`` (chosen becomes response A, recorded in metadata).
Files in other public formats are turned into these rows by ``annotation.formats``. A row's identity
is its ``id`` when it has one, else its content with the model names (``comparison_hash``); empty and
whitespace-only responses are answers like any other.

``answer`` (top level, or ``metadata.answer``) is the prompt's reference answer, for GRPO's
answer-checking rewards: a non-empty text or a number (kept as its text, "42"); both given must agree.
It belongs to the prompt (``Prompt.metadata["answer"]``), not to the comparison.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from annotation.formats.base import MAX_RECORD_BYTES, RowError, load_record
from annotation.models import MAX_STRENGTH, Choice, Side

MAX_LINE_BYTES = MAX_RECORD_BYTES
MAX_NAME_CHARS = 200  # external ids and model names (the columns' length)
MAX_ELAPSED_MS = 2**31 - 1  # the column's largest value (24 days: anything above is not a timing)
ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class LineError:
    """What is wrong with one record of the file: its 1-based number (``line`` of a JSONL file,
    ``item`` of a JSON array, ``row`` of a Parquet file: ``unit``), field (or '' for the record)."""

    line: int
    field: str
    message: str
    unit: str = "line"

    def __str__(self) -> str:
        where = f"{self.unit} {self.line}" + (f", field {self.field!r}" if self.field else "")
        return f"{where}: {self.message}"


class ImportValidationError(Exception):
    """The file has errors; nothing was imported. ``errors`` lists every one found."""

    def __init__(self, errors: list[LineError], *, total: int | None = None) -> None:
        self.errors = errors
        self.total = len(errors) if total is None else total
        shown = "; ".join(str(e) for e in errors[:20])
        more = f" (and {self.total - 20} more)" if self.total > 20 else ""
        super().__init__(f"{self.total} error(s), nothing imported: {shown}{more}")


class ImportedJudgement(NamedTuple):
    """One checked judgement of a row (a named tuple: made three times a row, a frozen dataclass
    costs several times as much to build)."""

    annotator: str
    choice: str
    strength: int
    rationale: str
    shown_left: str
    elapsed_ms: int | None


@dataclass(frozen=True)
class ImportedComparison:
    """One validated row. ``prompt_text`` is the text, or the last user turn of ``messages``.

    Its hashes are computed once (cached on the instance): the import asks for each several times.
    A changed copy is made with ``dataclasses.replace``, which leaves the cache behind."""

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
    answer: str | None = None  # the prompt's reference answer (text), when the row gives one

    @cached_property
    def prompt_hash(self) -> str:
        return content_hash(self.messages if self.messages is not None else self.prompt_text)

    @cached_property
    def content_key(self) -> str:
        """Hash of what the comparison shows: prompt, both responses and, when named, the models."""
        prompt = self.messages if self.messages is not None else self.prompt_text
        if self.model_a or self.model_b:
            return content_hash(
                [prompt, self.response_a, self.response_b, self.model_a, self.model_b]
            )
        return content_hash([prompt, self.response_a, self.response_b])

    @cached_property
    def comparison_hash(self) -> str:
        """The comparison's identity in its project: its ``id`` when it has one, else its content.

        Two rows with their own ids are two comparisons even when their texts are equal (two models
        can give the same answer); re-importing a row finds its comparison by the same key.
        """
        if self.external_id:
            return content_hash(["id", self.external_id])
        return self.content_key

    @cached_property
    def hash_a(self) -> str:
        """Response A's key under its prompt (``response_hash``)."""
        return response_hash(self.response_a, self.model_a)

    @cached_property
    def hash_b(self) -> str:
        """Response B's key under its prompt (``response_hash``)."""
        return response_hash(self.response_b, self.model_b)

    def hashed(self) -> ImportedComparison:
        """This row with every hash the import asks for computed (and cached); returns itself."""
        self.prompt_hash, self.content_key, self.comparison_hash, self.hash_a, self.hash_b  # noqa: B018
        return self

    @property
    def empty_responses(self) -> int:
        """How many of the two responses are empty or whitespace only (0-2)."""
        return sum(not text.strip() for text in (self.response_a, self.response_b))


def response_hash(text: str, model: str) -> str:
    """A response's key under its prompt: its text, and its model when named (two models may give
    the same text; each keeps its own name)."""
    return content_hash(text) if not model else content_hash([text, model])


# json.dumps with these options builds a new encoder on every call; one made once writes the same
# text (a hash is computed five times a row on import).
_CANONICAL = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"))
_json_string = json.encoder.encode_basestring  # a str as JSON, non-ASCII kept (ensure_ascii off)


def content_hash(value: object) -> str:
    """SHA-256 of the value's canonical JSON: equal content, equal hash, whatever the key order.

    A text, or a list of texts (what the import hashes for every row), is written here from its
    strings' JSON forms, the text the encoder would write, without its walk."""
    if isinstance(value, str):
        canonical = _json_string(value)
    elif isinstance(value, list) and all(type(item) is str for item in value):
        canonical = "[" + ",".join(map(_json_string, value)) + "]"
    else:
        canonical = _CANONICAL.encode(value)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class _Row:
    """Collects the errors of one line while its fields are read."""

    def __init__(self, line: int, data: dict[str, Any], unit: str) -> None:
        self.line, self.data, self.unit, self.errors = line, data, unit, []

    def fail(self, name: str, message: str) -> None:
        self.errors.append(LineError(self.line, name, message, self.unit))

    def text(self, name: str, *, required: bool, allow_empty: bool = False) -> str:
        value = self.data.get(name)
        if value is None:
            if required:
                self.fail(name, "is required")
            return ""
        if not isinstance(value, str):
            self.fail(name, f"must be a string, not {type(value).__name__}")
            return ""
        if required and not allow_empty and not value.strip():
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


def _parse_answer(row: _Row, metadata: dict[str, Any]) -> str | None:
    """The prompt's reference answer from ``answer`` or ``metadata.answer`` (null: none), as text;
    a number becomes its text (``str(42)`` = "42", as GRPO's loader reads it)."""
    found: list[tuple[str, str]] = []
    for name, value in (
        ("answer", row.data.get("answer")),
        ("metadata.answer", metadata.get("answer")),
    ):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            row.fail(name, f"must be a text or a number, not {type(value).__name__}")
            return None
        if not str(value).strip():
            row.fail(name, "must not be empty")
            return None
        found.append((name, str(value)))
    if len({text for _, text in found}) > 1:
        row.fail("answer", f"{found[0][1]!r} differs from metadata.answer {found[1][1]!r}")
        return None
    return found[0][1] if found else None


_CHOICES = frozenset(c.value for c in Choice)  # read once: an enum's members are slow to walk
_SIDES = frozenset(("", *(s.value for s in Side)))


def _parse_judgements(row: _Row) -> tuple[ImportedJudgement, ...]:
    raw = row.data.get("judgements", [])
    if not isinstance(raw, list):
        row.fail("judgements", "must be a list")
        return ()
    parsed: list[ImportedJudgement] = []
    seen: set[str] = set()
    choices = _CHOICES
    for index, item in enumerate(raw):
        # the field's name ("judgements[0].choice") is written only for an error
        if not isinstance(item, dict):
            row.fail(f"judgements[{index}]", "must be an object")
            continue
        name = item.get("annotator")
        if not isinstance(name, str) or not name.strip() or len(name) > 150:
            row.fail(
                f"judgements[{index}].annotator",
                "must be a non-empty name of at most 150 characters",
            )
            continue
        if name in seen:
            row.fail(f"judgements[{index}].annotator", f"{name!r} judges this comparison twice")
            continue
        seen.add(name)
        choice = item.get("choice")
        if choice not in choices:
            row.fail(
                f"judgements[{index}].choice",
                f"unknown choice {choice!r}; expected one of {sorted(choices)}",
            )
            continue
        strength = item.get("strength", 1)
        if isinstance(strength, bool) or not isinstance(strength, int):
            row.fail(f"judgements[{index}].strength", "must be an integer")
            continue
        if not 1 <= strength <= MAX_STRENGTH:
            row.fail(
                f"judgements[{index}].strength",
                f"must be between 1 and {MAX_STRENGTH}, got {strength}",
            )
            continue
        shown_left = item.get("shown_left", "")
        if shown_left not in _SIDES:
            row.fail(f"judgements[{index}].shown_left", "must be 'a' or 'b'")
            continue
        elapsed = item.get("elapsed_ms")
        if elapsed is not None and (
            isinstance(elapsed, bool)
            or not isinstance(elapsed, int)
            or not 0 <= elapsed <= MAX_ELAPSED_MS
        ):
            row.fail(
                f"judgements[{index}].elapsed_ms", f"must be an integer from 0 to {MAX_ELAPSED_MS}"
            )
            continue
        rationale = item.get("rationale", "")
        if not isinstance(rationale, str):
            row.fail(f"judgements[{index}].rationale", "must be a string")
            continue
        parsed.append(
            ImportedJudgement(name.strip(), choice, strength, rationale, shown_left, elapsed)
        )
    return tuple(parsed)


def parse_row(line: int, raw: str) -> ImportedComparison | list[LineError]:
    """Validate one JSONL line of Concord's format; returns the comparison or the line's errors."""
    try:
        data = load_record(raw)
    except RowError as exc:
        return [LineError(line, exc.field, exc.message)]
    return parse_record(line, data)


def parse_record(
    line: int, data: dict[str, Any], *, unit: str = "line"
) -> ImportedComparison | list[LineError]:
    """Validate one row of Concord's format (a parsed JSON object, already checked storable)."""
    row = _Row(line, data, unit)
    prompt_text, messages = _parse_prompt(row)
    metadata = data.get("metadata", {})
    if not isinstance(metadata, dict):
        row.fail("metadata", "must be an object")
        metadata = {}
    answer = _parse_answer(row, metadata)
    if "chosen" in data or "rejected" in data:  # TRL style: chosen is A, rejected is B
        response_a = row.text("chosen", required=True, allow_empty=True)
        response_b = row.text("rejected", required=True, allow_empty=True)
        metadata = {**metadata, "trl_preferred": "a"}
    else:
        response_a = row.text("response_a", required=True, allow_empty=True)
        response_b = row.text("response_b", required=True, allow_empty=True)
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
    # An empty answer is a real answer (usually the loser); two equal ones compare nothing, unless
    # two different models gave them (MT-Bench: 13 pairs of models answering a short factual
    # question alike, which the experts voted on, mostly as ties; the paper's figures count them).
    if (
        response_a == response_b
        and not row.errors
        and not (model_a and model_b and model_a != model_b)
    ):
        row.fail("response_b", "is identical to response_a")
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
        answer=answer,
    )
