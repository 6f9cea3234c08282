"""Anthropic HH-RLHF: ``chosen``/``rejected`` as whole "\\n\\nHuman: ... \\n\\nAssistant: ..." transcripts.

The two transcripts share the conversation up to the last assistant turn, where they split: the
shared part becomes the prompt (messages), the two final replies responses A (chosen) and B
(rejected). The split is the last "\\n\\nAssistant:" both transcripts have in common; a pair where
either continues with a new "\\n\\nHuman:" turn after it differs before its last assistant turn
and is a row error. A reply may itself contain "Assistant:" (the model imitating the dialogue): it
stays part of the reply. The crowdworker's preference becomes a judgement by ``hh-rlhf``
(``--label-as`` renames it; ``--label-as ""`` records none).
"""

from __future__ import annotations

import re
from typing import Any

from annotation.formats.base import ReadOptions, RowError, text_field

NAME = "hh-rlhf"
EXAMPLE = (
    "python manage.py import_comparisons harmless-base/test.jsonl.gz --format hh-rlhf "
    "--project harmless"
)
DEFAULT_ANNOTATOR = "hh-rlhf"
HUMAN, ASSISTANT = "\n\nHuman:", "\n\nAssistant:"
TURN = re.compile(r"\n\n(Human|Assistant):")
ROLE = {"Human": "user", "Assistant": "assistant"}


def matches(record: dict[str, Any]) -> bool:
    chosen = record.get("chosen")
    return "prompt" not in record and isinstance(chosen, str) and chosen.startswith(HUMAN)


def _common_prefix_length(first: str, second: str) -> int:
    length = min(len(first), len(second))
    return next((i for i in range(length) if first[i] != second[i]), length)


def _messages(transcript: str) -> list[dict[str, str]]:
    parts = TURN.split(transcript)
    if parts[0].strip():
        raise RowError("chosen", "text before the first Human: turn")
    turns = []
    for role, content in zip(parts[1::2], parts[2::2], strict=True):
        turns.append({"role": ROLE[role], "content": content.removeprefix(" ")})
    return turns


def convert(record: dict[str, Any], *, options: ReadOptions) -> dict[str, Any]:
    chosen = text_field(record, "chosen", options=options)
    rejected = text_field(record, "rejected", options=options)
    if not chosen.startswith(HUMAN):
        raise RowError("chosen", 'must start with "\\n\\nHuman:"')
    shared = _common_prefix_length(chosen, rejected)
    split = chosen.rfind(ASSISTANT, 0, shared)
    if split < 0:
        raise RowError("rejected", "has no assistant turn in common with chosen")
    replies = chosen[split + len(ASSISTANT) :], rejected[split + len(ASSISTANT) :]
    for name, reply in zip(("chosen", "rejected"), replies, strict=True):
        if HUMAN in reply:
            raise RowError(
                name,
                "the transcripts differ before the last assistant turn (a Human turn follows "
                "where they split)",
            )
    messages = _messages(chosen[:split])
    if not messages or messages[-1]["role"] != "user":
        raise RowError("chosen", "the conversation before the last reply must end with Human:")
    row: dict[str, Any] = {
        "prompt": messages,
        "response_a": replies[0].removeprefix(" "),
        "response_b": replies[1].removeprefix(" "),
        "metadata": {"source": NAME, "trl_preferred": "a"},
    }
    annotator = DEFAULT_ANNOTATOR if options.label_as is None else options.label_as
    if annotator:
        row["judgements"] = [{"annotator": annotator, "choice": "a"}]
    return row
