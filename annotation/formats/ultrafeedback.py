"""UltraFeedback binarized: ``prompt``, ``chosen``/``rejected`` message lists, ``score_chosen`` /
``score_rejected`` (GPT-4's 1-10 ratings).

The last assistant turns of chosen and rejected become responses A and B; the shared turns before
them, the prompt. The score gap becomes a judgement by ``ultrafeedback-gpt4`` (``--label-as``
renames it): gap 0 is a tie; otherwise A wins with strength 1 for a gap up to 3, 2 up to 6, and 3
above (thirds of the 9-point scale). A negative gap (rejected scored higher) is a row error.
"""

from __future__ import annotations

import math
from typing import Any

from annotation.formats.base import ReadOptions, RowError, message_list, split_final_reply

NAME = "ultrafeedback"
EXAMPLE = (
    "python manage.py import_comparisons train_prefs.parquet --format ultrafeedback "
    "--project ultrafeedback"
)
DEFAULT_ANNOTATOR = "ultrafeedback-gpt4"


def matches(record: dict[str, Any]) -> bool:
    return "score_chosen" in record and "chosen" in record


def strength_of(gap: float) -> int:
    """The strength (1-3) of a score gap > 0 on the 1-10 scale: thirds of the 9-point range."""
    return min(3, math.ceil(gap / 3))


def _score(record: dict[str, Any], name: str) -> float:
    value = record.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RowError(name, f"must be a number, got {value!r}")
    return float(value)


def convert(record: dict[str, Any], *, options: ReadOptions) -> dict[str, Any]:
    prompt, chosen, rejected = split_final_reply(
        message_list(record.get("chosen"), "chosen"),
        message_list(record.get("rejected"), "rejected"),
        ("chosen", "rejected"),
    )
    gap = _score(record, "score_chosen") - _score(record, "score_rejected")
    if gap < 0:
        raise RowError("score_rejected", "is higher than score_chosen")
    metadata: dict[str, Any] = {
        "source": NAME,
        "score_chosen": record["score_chosen"],
        "score_rejected": record["score_rejected"],
    }
    if isinstance(record.get("prompt_id"), str):
        metadata["prompt_id"] = record["prompt_id"]
    row: dict[str, Any] = {
        "prompt": prompt,
        "response_a": chosen,
        "response_b": rejected,
        "metadata": metadata,
    }
    annotator = DEFAULT_ANNOTATOR if options.label_as is None else options.label_as
    if annotator:
        judgement = {"annotator": annotator, "choice": "tie", "strength": 1}
        if gap > 0:
            judgement.update(choice="a", strength=strength_of(gap))
        row["judgements"] = [judgement]
    return row
