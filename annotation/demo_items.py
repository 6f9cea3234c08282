"""The demo's rating and ranking projects (issue 32's task types), beside the pairwise demo:

- ``demo-rating``: one SmolLM2 answer per item (the first responses of the demo comparisons with a
  one-turn prompt), scored 1-5 on helpfulness, correctness and verbosity, with thumbs;
- ``demo-ranking``: four team-written answers per prompt (``demo/ranking_items.jsonl``) to order.

Three of the demo annotators (ben, chloe, dev) have answered the first items, with simulated answers
drawn from a fixed seed, so the agreement pages have figures; ana's queue is untouched. Idempotent:
re-importing the same items adds nothing."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from django.conf import settings

from annotation.models import Project, TaskType
from annotation.services.importing import project_get_or_create
from annotation.services.task_items import project_task_setup, task_items_create

DEMO_RANKING_ITEMS = Path(settings.BASE_DIR) / "demo" / "ranking_items.jsonl"
RATING_ASPECTS = ["helpfulness", "correctness", "verbosity"]
RATING_ITEMS = 24
ANSWERED = 8  # the first items already answered by the simulated annotators
SIMULATED = ("ben", "chloe", "dev")
RATING_GUIDELINES = """\
# How to rate an answer

Score each aspect from 1 (poor) to 5 (excellent); thumbs up when you would be glad to receive it.

Keys: a digit scores the focused aspect, `Tab` moves to the next aspect, `T` thumbs up, `F` thumbs
down, `R` opens the reason box, `Enter` submits.
"""
RANKING_GUIDELINES = """\
# How to rank answers

Order the answers from best (1) to worst. Helpful, correct and safe first; length is not a merit.

Keys: the arrows move between answers, a number key places the focused answer at that rank, `Enter`
submits. Answers can also be dragged.
"""


def _rating_answers(rng: random.Random, response: str) -> list[dict[str, Any]]:
    """Simulated ratings of one response: a shared quality (longer answers a little better) plus
    each annotator's noise, clipped to 1-5."""
    quality = min(5, max(1, round(2 + len(response) / 250 + rng.uniform(-1, 1))))
    answers = []
    for name in SIMULATED:
        scores = {
            aspect: min(5, max(1, quality + rng.choice((-1, 0, 0, 1)))) for aspect in RATING_ASPECTS
        }
        answers.append({"annotator": name, "scores": scores, "thumbs": scores["helpfulness"] >= 3})
    return answers


def _ranking_answers(rng: random.Random, size: int, item: int) -> list[dict[str, Any]]:
    """Simulated rankings: the listed order (the file lists no order of merit) with one swap of
    neighbours per annotator at random, as competition ranks (1 = best). Each answer keeps the
    display order it was "shown" in, rotated per annotator and item as the screen rotates it, so
    the agreement page has position bias by screen slot to show (none, by construction)."""
    answers = []
    for k, name in enumerate(SIMULATED):
        order = list(range(size))
        swap = rng.randrange(size - 1)
        order[swap], order[swap + 1] = order[swap + 1], order[swap]
        ranks = [0] * size
        for rank, index in enumerate(order, start=1):
            ranks[index] = rank
        shown = [(slot + k + item) % size for slot in range(size)]
        answers.append({"annotator": name, "ranks": ranks, "order": shown})
    return answers


def _project(slug: str, name: str, guidelines: str, members: list, **setup: Any) -> Project:
    project, _ = project_get_or_create(slug=slug, name=name, guidelines=guidelines, overlap=3)
    project = project_task_setup(project=project, actor=None, **setup)
    project.members.add(*members)
    return project


def demo_items_load(*, comparison_rows: list[dict[str, Any]], members: list) -> dict[str, int]:
    """Create (or find) the demo's rating and ranking projects and their items; returns the
    number of items created in each (0 on a second load)."""
    rng = random.Random(32)  # noqa: S311  # nosec B311 (simulated answers, not a secret)
    rating = _project(
        "demo-rating", "Demo: rate SmolLM2's answers", RATING_GUIDELINES, members,
        task_type=TaskType.RATING, rating_aspects=RATING_ASPECTS, rating_thumbs=True,
    )  # fmt: skip
    one_turn = [row for row in comparison_rows if isinstance(row["prompt"], str)][:RATING_ITEMS]
    rating_rows = [
        {
            "id": f"{row['id']}-a",
            "prompt": row["prompt"],
            "responses": [row["response_a"]],
            "models": [row["model_a"]],
            "answers": _rating_answers(rng, row["response_a"]) if i < ANSWERED else [],
        }
        for i, row in enumerate(one_turn)
    ]
    ranking = _project(
        "demo-ranking", "Demo: rank four answers", RANKING_GUIDELINES, members,
        task_type=TaskType.RANKING,
    )  # fmt: skip
    ranking_rows = []
    for i, line in enumerate(DEMO_RANKING_ITEMS.read_text(encoding="utf-8").splitlines()):
        row = json.loads(line)
        row["answers"] = _ranking_answers(rng, len(row["responses"]), i) if i < 3 else []
        ranking_rows.append(row)
    return {
        "demo-rating": task_items_create(project=rating, rows=rating_rows).items_created,
        "demo-ranking": task_items_create(project=ranking, rows=ranking_rows).items_created,
    }
