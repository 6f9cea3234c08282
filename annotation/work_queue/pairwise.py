"""Pairwise labelling as a work-queue plug-in. Its claims, leases and submissions are
annotation/services/labelling.py's hand-tuned statements (they take the queue's shared rules from
``policy``); the plug-in names its screen, keys, validation, agreement and export."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from annotation.models import SCREEN_PAIR, Project, Side, TaskType
from annotation.work_queue.plugins import AnswerError, TaskTypePlugin


class PairwiseType(TaskTypePlugin):
    """Two responses; left / right / tie / both bad, with a strength."""

    name = TaskType.PAIRWISE
    template = "annotation/label.html"
    keys: ClassVar[dict[str, str]] = {
        "1 / ←": "left",
        "2 / →": "right",
        "3": "tie",
        "4": "both bad",
        "Q / W / E": "strength",
        "Enter": "submit",
        "S": "skip",
    }
    responses = (2, 2)
    export_formats = ("pairs",)

    def answer_from_form(self, project: Project, form: Mapping[str, str], size: int) -> dict:
        return {"pick": form.get("pick", ""), "strength": form.get("strength", "1")}

    def validate(
        self, project: Project, raw: Mapping[str, Any], order: list[int]
    ) -> dict[str, Any]:
        """``raw``: {"pick", "strength"}; ``order``: [0, 1] with A on the left, [1, 0] with B.
        Returns {"choice", "strength"} in stored terms (labelling's own rules)."""
        from annotation.services.labelling import LabellingError, Verdict, _validate

        try:
            strength = int(raw.get("strength", 1))
        except (TypeError, ValueError):
            strength = 0
        verdict = Verdict(pick=str(raw.get("pick", "")), strength=strength)
        try:
            _validate(project, verdict)
        except LabellingError as exc:
            raise AnswerError(str(exc)) from exc
        shown_left = SCREEN_PAIR[order[0]]
        choice = verdict.choice(shown_left)
        tie_like = choice not in SCREEN_PAIR
        return {"choice": choice, "strength": 1 if tie_like else verdict.strength}

    def agreement(self, project: Project) -> dict[str, Any]:
        from annotation.services.agreement import agreement_summary, project_agreement

        return agreement_summary(project_agreement(project=project))

    def export_rows(self, project: Project, row_format: str) -> list[dict[str, Any]]:
        raise AnswerError("pairwise projects export with `manage.py export_dataset`")


def pair_order(shown_left: str) -> list[int]:
    """A pair's display order in the work queue's terms: [0, 1] with A on the left."""
    return [0, 1] if shown_left == Side.A else [1, 0]
