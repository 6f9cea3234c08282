"""HelpSteer2 preference: ``prompt``, ``response_1``, ``response_2``, ``preference_strength``.

``preference_strength`` runs from -3 (response 1 much better) to 3 (response 2 much better); 0 is a
tie. Its sign gives the choice and its size the strength (1-3). The aggregate becomes a judgement by
``helpsteer2`` (``--label-as`` renames it). When the row also has ``all_preferences_unprocessed``
(each annotator's own score, same scale), those become judgements by ``helpsteer2-rater1``,
``helpsteer2-rater2``, ... instead: positions, not people (HelpSteer2 does not say who rated what),
so agreement between them is between rating slots.

``items``: HelpSteer2's per-aspect rows (``prompt``, ``response``, five aspects rated 0-4) as rating
items, the aspects shifted to 1-5 (annotation.formats.items).
"""

from __future__ import annotations

from typing import Any

from annotation.formats.base import ReadOptions, RowError, text_field
from annotation.formats.items import RATING, checked_item, text_value

NAME = "helpsteer2"
EXAMPLE = (
    "python manage.py import_comparisons preference.jsonl.gz --format helpsteer2 "
    "--project helpsteer2"
)
DEFAULT_ANNOTATOR = "helpsteer2"
ASPECTS = ("helpfulness", "correctness", "coherence", "complexity", "verbosity")


def matches(record: dict[str, Any]) -> bool:
    return "response_1" in record and "response_2" in record


def _judgement(annotator: str, value: object, field: str) -> dict[str, Any]:
    if isinstance(value, bool) or not isinstance(value, int) or not -3 <= value <= 3:
        raise RowError(field, f"must be an integer from -3 to 3, got {value!r}")
    if value == 0:
        return {"annotator": annotator, "choice": "tie", "strength": 1}
    return {"annotator": annotator, "choice": "a" if value < 0 else "b", "strength": abs(value)}


def convert(record: dict[str, Any], *, options: ReadOptions) -> dict[str, Any]:
    prompt = text_field(record, "prompt", options=options, allow_empty=False)
    row: dict[str, Any] = {
        "prompt": prompt,
        "response_a": text_field(record, "response_1", options=options),
        "response_b": text_field(record, "response_2", options=options),
        "metadata": {"source": NAME, "preference_strength": record.get("preference_strength")},
    }
    aggregate = _judgement("", record.get("preference_strength"), "preference_strength")
    raters = record.get("all_preferences_unprocessed")
    if raters:
        if not isinstance(raters, list):
            raise RowError("all_preferences_unprocessed", "must be a list of integers")
        row["judgements"] = [
            _judgement(f"helpsteer2-rater{i}", value, f"all_preferences_unprocessed[{i - 1}]")
            for i, value in enumerate(raters, start=1)
        ]
    else:
        annotator = DEFAULT_ANNOTATOR if options.label_as is None else options.label_as
        if annotator:
            row["judgements"] = [{**aggregate, "annotator": annotator}]
    return row


def items(record: dict[str, Any], task_type: str) -> list[dict[str, Any]]:
    """A HelpSteer2 per-aspect row as one rating item answered by ``helpsteer2``."""
    if task_type != RATING:
        raise RowError("format", "HelpSteer2's per-aspect ratings import as rating items")
    scores = {}
    for aspect in ASPECTS:
        value = record.get(aspect)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 4:
            raise RowError(aspect, f"must be an integer from 0 to 4, got {value!r}")
        scores[aspect] = value + 1
    row = {
        "prompt": text_value(record.get("prompt"), "prompt"),
        "responses": [text_value(record.get("response"), "response")],
        "metadata": {"source": "helpsteer2"},
        "answers": [{"annotator": DEFAULT_ANNOTATOR, "scores": scores}],
    }
    return [checked_item(row, RATING)]
