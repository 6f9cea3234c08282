"""A task type as a small plug-in of the work queue: its screen template, its keyboard map, its
answer validation (screen terms in, stored terms out), its agreement and its export.

``validate`` takes what the screen sent and the display order the annotator saw (``order[j]``: the
stored position shown in screen slot ``j``) and returns the answer's fields in stored terms, or
raises AnswerError (nothing is written). Agreement and export are services (Django reads); the
plug-in names them and imports them when asked, so registering a type costs no import.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from annotation.models import MAX_RANKED, MIN_RANKED, RATING_SCALE, Project, TaskType
from common.errors import ConcordError


class AnswerError(ConcordError):
    """An answer that cannot be accepted as it is (the message says why); nothing was written."""


class TaskTypePlugin:
    """The parts of a task type the work queue does not own. Subclasses set the class attributes
    and implement ``validate``, ``agreement`` and ``export_rows``."""

    name: ClassVar[str]
    # The screen part of the type (its answer form) and its keys (key -> what it does).
    template: ClassVar[str]
    keys: ClassVar[dict[str, str]]
    # Responses per item: (fewest, most).
    responses: ClassVar[tuple[int, int]]
    # Export row formats (annotation/services/task_export.py), the first is the default.
    export_formats: ClassVar[tuple[str, ...]]

    def validate(
        self, project: Project, raw: Mapping[str, Any], order: list[int]
    ) -> dict[str, Any]:
        raise NotImplementedError

    def answer_from_form(self, project: Project, form: Mapping[str, str], size: int) -> dict:
        """The screen's form fields as the ``raw`` answer ``validate`` takes."""
        raise NotImplementedError

    def agreement(self, project: Project) -> dict[str, Any]:
        from annotation.services.task_agreement import task_agreement

        return task_agreement(project=project)

    def export_rows(self, project: Project, row_format: str) -> list[dict[str, Any]]:
        from annotation.services.task_export import task_export_rows

        return task_export_rows(project=project, row_format=row_format)


def _integer(value: object, name: str) -> int:
    """``value`` as an int (a form's digit string or a JSON number), AnswerError otherwise."""
    if isinstance(value, bool):
        raise AnswerError(f"{name} must be a whole number, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    raise AnswerError(f"{name} must be a whole number, got {value!r}")


THUMBS = {"up": True, "down": False, True: True, False: False, "true": True, "false": False}


class RatingType(TaskTypePlugin):
    """One response; a 1-5 score per aspect the lead defined and/or a thumbs up or down."""

    name = TaskType.RATING
    template = "annotation/_rating_form.html"
    keys: ClassVar[dict[str, str]] = {
        "1-5": "score the focused aspect",
        "Tab / Shift+Tab": "next / previous aspect",
        "T or U": "thumbs up",
        "F or D": "thumbs down",
        "R": "reason box (Esc leaves it)",
        "Enter": "submit",
        "S": "skip",
    }
    responses = (1, 1)
    export_formats = ("items", "kto", "aspects")

    def answer_from_form(self, project: Project, form: Mapping[str, str], size: int) -> dict:
        """Fields ``score-<aspect>`` (a digit) and ``thumbs`` ("up" / "down")."""
        scores = {a: form.get(f"score-{a}", "") for a in project.rating_aspects or []}
        return {"scores": scores, "thumbs": form.get("thumbs") or None}

    def validate(
        self, project: Project, raw: Mapping[str, Any], order: list[int]
    ) -> dict[str, Any]:
        """``raw``: {"scores": {aspect: 1-5}, "thumbs": "up" | "down"}. Every aspect of the
        project must be scored, none other; thumbs exactly when the project asks for them.
        Returns {"scores": {aspect: int}, "thumbs": bool | None, "ranks": []}."""
        aspects = list(project.rating_aspects or [])
        if not aspects and not project.rating_thumbs:
            raise AnswerError("this rating project asks for no aspect and no thumbs")
        given = raw.get("scores") or {}
        if not isinstance(given, Mapping):
            raise AnswerError("scores must map each aspect to a score")
        unknown = sorted(set(given) - set(aspects))
        if unknown:
            raise AnswerError(f"unknown aspect(s) {', '.join(unknown)}; expected {aspects}")
        low, high = RATING_SCALE
        scores = {}
        for aspect in aspects:
            if given.get(aspect) in (None, ""):
                raise AnswerError(f"score {aspect} ({low}-{high}) before submitting")
            value = _integer(given[aspect], aspect)
            if not low <= value <= high:
                raise AnswerError(f"{aspect} must be from {low} to {high}, got {value}")
            scores[aspect] = value
        thumbs = None
        if project.rating_thumbs:
            key = raw.get("thumbs")
            key = key.lower() if isinstance(key, str) else key
            if key not in THUMBS:
                raise AnswerError("give a thumbs up or down before submitting")
            thumbs = THUMBS[key]
        elif raw.get("thumbs") not in (None, ""):
            raise AnswerError("this project does not ask for thumbs")
        return {"scores": scores, "thumbs": thumbs, "ranks": []}


def competition_ranks(values: list[int]) -> list[int]:
    """Standard competition ranks ("1224") of rank values where equal values are ties: each
    becomes 1 + the number of strictly better (smaller) values. [1, 1, 2] -> [1, 1, 3]."""
    return [1 + sum(other < value for other in values) for value in values]


class RankingType(TaskTypePlugin):
    """K responses (3-8) to one prompt, put in order; ties when the project allows them."""

    name = TaskType.RANKING
    template = "annotation/_ranking_form.html"
    keys: ClassVar[dict[str, str]] = {
        "↑ / ↓": "focus the previous / next response",
        "1-8": "place the focused response at that rank",
        "Drag": "drag a response to its place",
        "R": "reason box (Esc leaves it)",
        "Enter": "submit",
        "S": "skip",
    }
    responses = (MIN_RANKED, MAX_RANKED)
    export_formats = ("items", "listwise", "pairs")

    def answer_from_form(self, project: Project, form: Mapping[str, str], size: int) -> dict:
        """Fields ``rank-<slot>`` (slot 0 = shown first): the rank given to each shown response."""
        return {"ranks": [form.get(f"rank-{slot}", "") for slot in range(size)]}

    def validate(
        self, project: Project, raw: Mapping[str, Any], order: list[int]
    ) -> dict[str, Any]:
        """``raw``: {"ranks": [rank of the response in screen slot j]} (1 = best). Without ties
        every rank 1..K once; with ties allowed, equal ranks are stored as competition ranks.
        Returns {"ranks": [rank of the response at stored position p], "scores": {}, "thumbs": None}."""
        given = raw.get("ranks")
        size = len(order)
        if (
            not isinstance(given, list | tuple)
            or len(given) != size
            or any(value in (None, "") for value in given)
        ):
            raise AnswerError(f"rank all {size} responses before submitting")
        screen = [_integer(value, f"the rank of response {j + 1}") for j, value in enumerate(given)]
        if any(not 1 <= value <= size for value in screen):
            raise AnswerError(f"ranks run from 1 to {size}, got {screen}")
        if len(set(screen)) < size:
            if not project.allow_ties:
                raise AnswerError(
                    "this project does not allow ties: give each response its own rank"
                )
            screen = competition_ranks(screen)
        stored = [0] * size
        for slot, position in enumerate(order):
            stored[position] = screen[slot]
        return {"ranks": stored, "scores": {}, "thumbs": None}
