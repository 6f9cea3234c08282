"""UltraFeedback binarized: ``prompt``, ``chosen``/``rejected`` message lists, ``score_chosen`` /
``score_rejected`` (GPT-4's 1-10 ratings).

The last assistant turns of chosen and rejected become responses A and B; the shared turns before
them, the prompt. The score gap becomes a judgement by ``ultrafeedback-gpt4`` (``--label-as``
renames it): gap 0 is a tie; otherwise A wins with strength 1 for a gap up to 3, 2 up to 6, and 3
above (thirds of the 9-point scale). A negative gap (rejected scored higher) is a row error.

``items``: the unbinarized openbmb/UltraFeedback rows (``instruction``, ``completions`` with
per-aspect ``annotations``) as ranking or rating items (annotation.formats.items).
"""

from __future__ import annotations

import math
from typing import Any

from annotation.formats.base import ReadOptions, RowError, message_list, split_final_reply
from annotation.formats.items import (
    RANKING,
    RATING,
    SCALE,
    checked_item,
    competition_ranks,
    text_value,
)

NAME = "ultrafeedback"
EXAMPLE = (
    "python manage.py import_comparisons train_prefs.parquet --format ultrafeedback "
    "--project ultrafeedback"
)
DEFAULT_ANNOTATOR = "ultrafeedback-gpt4"
ASPECTS = ("helpfulness", "honesty", "instruction_following", "truthfulness")


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


def _ultrafeedback_rating(value: object) -> int | None:
    """An UltraFeedback aspect rating ("1"-"5"; "N/A" -> None)."""
    rating = value.get("Rating") if isinstance(value, dict) else value
    if rating in (None, "N/A", ""):
        return None
    try:
        number = int(str(rating).strip())
    except ValueError:
        raise RowError("annotations", f"rating {rating!r} is not 1-5 or N/A") from None
    if not SCALE[0] <= number <= SCALE[1]:
        raise RowError("annotations", f"rating {number} is not 1-5")
    return number


def items(record: dict[str, Any], task_type: str) -> list[dict[str, Any]]:
    """An UltraFeedback row as one ranking item (completions ranked by their mean aspect rating,
    ties sharing a rank) or as one rating item per completion."""
    prompt = text_value(record.get("instruction"), "instruction")
    completions = record.get("completions")
    if not isinstance(completions, list) or not completions:
        raise RowError("completions", "must be a list of completions")
    texts, models, scores = [], [], []
    for i, completion in enumerate(completions):
        if not isinstance(completion, dict):
            raise RowError(f"completions[{i}]", "must be an object")
        texts.append(text_value(completion.get("response"), f"completions[{i}].response"))
        models.append(str(completion.get("model") or ""))
        annotations = completion.get("annotations") or {}
        rated = {a: _ultrafeedback_rating(annotations.get(a)) for a in ASPECTS}
        scores.append({a: v for a, v in rated.items() if v is not None})
    source = {"source": "ultrafeedback", "source_id": str(record.get("source") or "")}
    if task_type == RATING:
        return [
            checked_item(
                {
                    "prompt": prompt,
                    "responses": [text],
                    "models": [model],
                    "metadata": source,
                    "answers": [{"annotator": DEFAULT_ANNOTATOR, "scores": score}] if score else [],
                },
                RATING,
            )
            for text, model, score in zip(texts, models, scores, strict=True)
        ]
    means = [sum(s.values()) / len(s) if s else math.nan for s in scores]
    if any(math.isnan(m) for m in means):
        raise RowError("completions", "a completion without any aspect rating cannot be ranked")
    ranks = competition_ranks(means, higher_is_better=True)
    answer = {"annotator": DEFAULT_ANNOTATOR, "ranks": ranks}
    item = {"prompt": prompt, "responses": texts, "models": models, "metadata": source}
    return [checked_item({**item, "answers": [answer]}, RANKING)]
