"""The eval rounds' rating of checkpoint answers as a task type of the shared work queue
(annotation.work_queue): a plug-in with its screen, keyboard map, answer validation, agreement
and export. MonitoringConfig.ready registers it (``register(EVAL_RATING, hosted=True)``); the
queue knows nothing of monitoring.

The display order of an eval item is its assignment's side in the queue's terms
(``assignment_order``): stored position 0 is the checkpoint's answer, 1 the baseline's
(``EVAL_PAIR``), so [0, 1] shows the checkpoint on the left and [1, 0] the baseline.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from annotation.models import Project
from annotation.work_queue.plugins import AnswerError, TaskTypePlugin
from common.sides import stored_side
from monitoring.models import EVAL_PAIR, EvalJudgement

EVAL_RATING_NAME = "eval_rating"
PICKS = ("left", "right", "tie")
USEFULNESS = (1, 5)
Preference = EvalJudgement.Preference


def assignment_order(shown_left: str) -> list[int]:
    """An assignment's display order: [0, 1] with the checkpoint on the left, [1, 0] with the
    baseline (ValueError for another side)."""
    if shown_left not in EVAL_PAIR:
        raise ValueError(f"shown_left must be one of {EVAL_PAIR}, got {shown_left!r}")
    return [0, 1] if shown_left == EVAL_PAIR[0] else [1, 0]


class EvalRatingType(TaskTypePlugin):
    """Two models' answers to a held-out prompt, blind: which is better (left / right / tie)
    and how useful the checkpoint's answer is (1-5)."""

    name = EVAL_RATING_NAME
    template = "monitoring/eval/rate.html"
    keys: ClassVar[dict[str, str]] = {
        "1": "left",
        "2": "right",
        "3": "tie",
        "Shift+1-5": "usefulness of the named answer",
        "Enter": "submit",
        "S": "skip",
    }
    responses = (2, 2)
    export_formats = ("judgements",)

    def answer_from_form(self, project: Project, form: Mapping[str, str], size: int) -> dict:
        """Fields ``pick`` and ``usefulness`` (a digit; anything else is passed on and refused)."""
        usefulness: Any = str(form.get("usefulness", "")).strip()
        if usefulness.isdigit():
            usefulness = int(usefulness)
        return {"pick": form.get("pick", ""), "usefulness": usefulness}

    def validate(
        self, project: Project, raw: Mapping[str, Any], order: list[int]
    ) -> dict[str, Any]:
        """``raw``: {"pick": "left" | "right" | "tie", "usefulness": 1-5 (an int)}; ``order``: the
        assignment's display order (``assignment_order``). Returns {"preference": "a" (the
        checkpoint better) | "b" (the baseline better) | "tie", "usefulness": int}."""
        pick, usefulness = raw.get("pick"), raw.get("usefulness")
        if pick not in PICKS:
            raise AnswerError(f"pick must be one of {PICKS}, got {pick!r}")
        low, high = USEFULNESS
        if (
            isinstance(usefulness, bool)
            or not isinstance(usefulness, int)
            or not low <= usefulness <= high
        ):
            raise AnswerError(
                f"usefulness must be an integer from {low} to {high}, got {usefulness!r}"
            )
        if sorted(order) != [0, 1]:
            raise AnswerError(
                f"an eval item shows two answers: order [0, 1] or [1, 0], got {order}"
            )
        if pick == "tie":
            return {"preference": Preference.TIE, "usefulness": usefulness}
        picked = stored_side(pick, shown_left=EVAL_PAIR[order[0]], pair=EVAL_PAIR)
        preference = Preference.CHECKPOINT if picked == EVAL_PAIR[0] else Preference.BASELINE
        return {"preference": preference, "usefulness": usefulness}

    def agreement(self, project: Project) -> dict[str, Any]:
        from monitoring.selectors.eval_rounds import project_round_agreement

        return project_round_agreement(project.pk)

    def export_rows(self, project: Project, row_format: str) -> list[dict[str, Any]]:
        if row_format not in self.export_formats:
            raise AnswerError(f"eval ratings export as {self.export_formats}, not {row_format!r}")
        from monitoring.selectors.eval_rounds import project_round_judgement_rows

        return project_round_judgement_rows(project.pk)


EVAL_RATING = EvalRatingType()
