"""PandaLM's test set: ``instruction``, ``input``, ``response1``, ``response2``, ``annotator1..3``.

Labels: 0 = tie, 1 = response1 better, 2 = response2 better; each annotator column becomes a
judgement by ``pandalm-annotator1`` .. ``pandalm-annotator3`` (the same three people throughout the
file, so their agreement is measurable). The prompt is the instruction, then the input after a
blank line (either alone when the other is blank). ``cmp_key`` ("model1_model2") names the models;
``idx`` is the id.
A response that is not a string is a row error (``--scalars-as-text`` imports JSON ``true`` as
the text "true").
"""

from __future__ import annotations

from typing import Any

from annotation.formats.base import ReadOptions, RowError, text_field

NAME = "pandalm"
EXAMPLE = (
    "python manage.py import_comparisons testset-v1.json --format pandalm --scalars-as-text "
    "--project pandalm"
)
ANNOTATORS = ("annotator1", "annotator2", "annotator3")
LABELS = {0: "tie", 1: "a", 2: "b"}


def matches(record: dict[str, Any]) -> bool:
    return "response1" in record and "response2" in record


def convert(record: dict[str, Any], *, options: ReadOptions) -> dict[str, Any]:
    instruction = text_field(record, "instruction", options=options)
    extra = record.get("input") or ""
    if not isinstance(extra, str):
        raise RowError("input", f"must be a string, not {type(extra).__name__}")
    prompt = "\n\n".join(part for part in (instruction, extra) if part.strip())
    if not prompt:
        raise RowError("instruction", "instruction and input are both empty")
    response1 = text_field(record, "response1", options=options)
    response2 = text_field(record, "response2", options=options)
    judgements = []
    for column in ANNOTATORS:
        if column not in record:
            continue
        label = record[column]
        if isinstance(label, bool) or label not in LABELS:
            raise RowError(column, f"must be 0 (tie), 1 or 2, got {label!r}")
        judgements.append({"annotator": f"pandalm-{column}", "choice": LABELS[label]})
    models = str(record.get("cmp_key") or "").split("_", 1)
    idx = record.get("idx")
    if idx is not None and (isinstance(idx, bool) or not isinstance(idx, int | str)):
        raise RowError("idx", "must be an integer or a string")
    metadata = {"source": NAME}
    if isinstance(record.get("motivation_app"), str):
        metadata["motivation_app"] = record["motivation_app"]
    row: dict[str, Any] = {
        "prompt": prompt,
        "response_a": response1,
        "response_b": response2,
        "judgements": judgements,
        "metadata": metadata,
    }
    if idx is not None:
        row["id"] = f"pandalm-{idx}"
    if len(models) == 2:
        row["model_a"], row["model_b"] = models
    return row
