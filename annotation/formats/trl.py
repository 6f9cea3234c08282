"""TRL's preference format: ``prompt``/``chosen``/``rejected``, as strings or message lists.

Standard: ``{"prompt": "text", "chosen": "text", "rejected": "text"}``. Conversational: ``prompt``
a list of turns ending with the user's, ``chosen``/``rejected`` lists holding the assistant's reply.
Implicit prompt: no ``prompt``, ``chosen``/``rejected`` whole conversations that share every turn
before the last assistant reply. Chosen becomes response A (``metadata.trl_preferred = "a"``); with
``--label-as NAME`` the preference is also recorded as NAME's judgement. ``id``, ``model_a``,
``model_b``, ``gold``, ``answer`` (the prompt's reference answer) and ``metadata`` pass through.
"""

from __future__ import annotations

from typing import Any

from annotation.formats.base import ReadOptions, RowError, message_list, split_final_reply

NAME = "trl"
EXAMPLE = "python manage.py import_comparisons prefs.jsonl --format trl --project demo"
PASSTHROUGH = ("id", "model_a", "model_b", "gold", "answer", "metadata")


def matches(record: dict[str, Any]) -> bool:
    return "chosen" in record and "rejected" in record


def _reply(value: object, name: str) -> str:
    if isinstance(value, str):
        return value
    turns = message_list(value, name)
    if turns[-1]["role"] != "assistant":
        raise RowError(name, "must end with an assistant turn")
    return turns[-1]["content"]


def convert(record: dict[str, Any], *, options: ReadOptions) -> dict[str, Any]:
    for name in ("chosen", "rejected"):
        if record.get(name) is None:
            raise RowError(name, "is required")
    prompt = record.get("prompt")
    chosen_raw, rejected_raw = record["chosen"], record["rejected"]
    if prompt is None:
        if isinstance(chosen_raw, str) or isinstance(rejected_raw, str):
            raise RowError("prompt", "is required when chosen and rejected are texts")
        prompt, chosen, rejected = split_final_reply(
            message_list(chosen_raw, "chosen"),
            message_list(rejected_raw, "rejected"),
            ("chosen", "rejected"),
        )
    else:
        chosen, rejected = _reply(chosen_raw, "chosen"), _reply(rejected_raw, "rejected")
    row: dict[str, Any] = {k: record[k] for k in PASSTHROUGH if k in record}
    metadata = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}
    row.update(
        prompt=prompt,
        response_a=chosen,
        response_b=rejected,
        metadata={**metadata, "trl_preferred": "a"},
    )
    if options.label_as:
        row["judgements"] = [{"annotator": options.label_as, "choice": "a"}]
    return row
