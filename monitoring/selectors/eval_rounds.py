"""Reads of human-eval rounds: a round's statistics for its results page, the rounds open to a
reviewer (a run's stopping panel, which combines them with a round judge's estimates, is in
``monitoring.selectors.stopping_panel``)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db.models import Count, Exists, OuterRef, QuerySet

from annotation.agreement import krippendorff_alpha
from monitoring.models import EvalAssignment, EvalItem, EvalJudgement, EvalRound
from monitoring.stats import stopping, win_rates
from monitoring.stats.intervals import Interval

# Rounds whose answers have been generated: before that both answers of every item are empty.
GENERATED = (EvalRound.Status.OPEN, EvalRound.Status.CLOSED)
OUTCOME = {"a": 1.0, "tie": 0.5, "b": 0.0}


def answers_identical(first: str, second: str) -> bool:
    """Whether two answers say the same words: whitespace runs (spaces, tabs, newlines) count as
    one space and the ends are stripped, so "Paris.\n" and " Paris." are identical."""
    return first.split() == second.split()


def identical_item_ids(round_: EvalRound) -> set[int]:
    """The round's items whose two answers are identical (``answers_identical``): never shown to a
    reviewer, each counted as ties. None before the answers are generated."""
    if round_.status not in GENERATED:
        return set()
    rows = EvalItem.objects.filter(round=round_).values_list(
        "pk", "checkpoint_text", "baseline_text"
    )
    return {pk for pk, mine, theirs in rows if answers_identical(mine, theirs)}


def rateable_items(round_: EvalRound) -> QuerySet[EvalItem]:
    """The round's items a reviewer can judge: those drawn for reviewers (every item when the
    round has no judge) but those with identical answers."""
    return EvalItem.objects.filter(round=round_, for_humans=True).exclude(
        pk__in=identical_item_ids(round_)
    )


def human_identical_item_ids(round_: EvalRound) -> set[int]:
    """The items drawn for reviewers whose two answers are identical: the ties the human-only
    figures count (every identical item when the round has no judge)."""
    identical = identical_item_ids(round_)
    if not identical:
        return set()
    drawn = EvalItem.objects.filter(pk__in=identical, for_humans=True)
    return set(drawn.values_list("pk", flat=True))


@dataclass(frozen=True)
class RoundOutcomes:
    """A round's outcomes from the checkpoint's side, [N] in {1, 0.5, 0}, with the item of each:
    first one tie per item with identical answers (drawn for reviewers: with a judge these are the
    humans' figures), then every human rating in arrival order. The statistics average each item's
    outcomes, so an identical item counts once, as much as a fully rated item."""

    outcomes: list[float]
    item_ids: list[int]
    n_identical: int

    @property
    def n_rated_items(self) -> int:
        """The items with at least one human rating."""
        return len(set(self.item_ids[self.n_identical :]))

    @property
    def n_ratings(self) -> int:
        """The human ratings among the outcomes (0: there is no human win rate)."""
        return len(self.outcomes) - self.n_identical

    def win_rate(self) -> Interval | None:
        """The human win rate with the item as the unit (``win_rates.win_rate``); None without a
        human rating (identical answers alone are no human judgement)."""
        if not self.n_ratings:
            return None
        return win_rates.win_rate(self.outcomes, self.item_ids)


def round_outcomes(round_: EvalRound) -> RoundOutcomes:
    """The round's ``RoundOutcomes``: the identical items' ties, then the ratings in arrival order."""
    identical = sorted(human_identical_item_ids(round_))
    rows = list(
        EvalJudgement.objects.filter(assignment__item__round=round_)
        .order_by("created_at", "pk")
        .values_list("assignment__item_id", "preference")
    )
    return RoundOutcomes(
        outcomes=[0.5] * len(identical) + [OUTCOME[preference] for _, preference in rows],
        item_ids=identical + [item_id for item_id, _ in rows],
        n_identical=len(identical),
    )


def round_judgements(round_: EvalRound) -> list[EvalJudgement]:
    """The round's judgements in the order they arrived, with their item and reviewer."""
    return list(
        EvalJudgement.objects.filter(assignment__item__round=round_)
        .select_related("assignment__item", "assignment__reviewer")
        .order_by("created_at", "pk")
    )


def usefulness_alpha(judgements: list[EvalJudgement], item_ids: list[int]) -> float:
    """Ordinal Krippendorff alpha of the judgements' usefulness ratings over the items
    ``item_ids`` (a reviewer x item table, NaN where a reviewer did not rate an item); NaN with
    fewer than two reviewers or when alpha is undefined (no variation)."""
    reviewers = sorted({j.assignment.reviewer_id for j in judgements})
    if len(reviewers) < 2 or not item_ids:
        return float("nan")
    column = {pk: k for k, pk in enumerate(item_ids)}
    row = {r: k for k, r in enumerate(reviewers)}
    data = np.full((len(reviewers), len(item_ids)), np.nan)
    for j in judgements:
        data[row[j.assignment.reviewer_id], column[j.assignment.item_id]] = j.usefulness
    try:
        return krippendorff_alpha(data, level="ordinal")
    except (ValueError, ZeroDivisionError):
        return float("nan")


def project_round_agreement(project_id: int) -> dict[str, Any]:
    """The reviewers' agreement in each eval round of a project (the ``eval_rating`` task type's
    agreement): {"rounds": [{"round", "n_judgements", "n_reviewers", "usefulness_alpha"}]}, the
    newest round first; alpha is NaN with fewer than two reviewers."""
    rounds = []
    for round_ in EvalRound.objects.filter(project_id=project_id).order_by("-pk"):
        judgements = round_judgements(round_)
        item_ids = list(round_.items.order_by("position").values_list("pk", flat=True))
        rounds.append(
            {
                "round": round_.pk,
                "n_judgements": len(judgements),
                "n_reviewers": len({j.assignment.reviewer_id for j in judgements}),
                "usefulness_alpha": usefulness_alpha(judgements, item_ids),
            }
        )
    return {"rounds": rounds}


def project_round_judgement_rows(project_id: int) -> list[dict[str, Any]]:
    """Every reviewer judgement of a project's eval rounds as a flat row (the ``eval_rating``
    task type's export), in round then arrival order: round, checkpoint (its id), position,
    prompt_id, reviewer, shown_left (the model shown on the left), preference (a = the checkpoint
    better, b = the baseline, tie), usefulness (1-5), note, elapsed_ms, created_at (ISO 8601)."""
    judgements = (
        EvalJudgement.objects.filter(assignment__item__round__project_id=project_id)
        .select_related("assignment__item__round", "assignment__reviewer")
        .order_by("assignment__item__round_id", "created_at", "pk")
    )
    return [
        {
            "round": j.assignment.item.round_id,
            "checkpoint": j.assignment.item.round.checkpoint_id,
            "position": j.assignment.item.position,
            "prompt_id": j.assignment.item.prompt_id,
            "reviewer": j.assignment.reviewer.get_username(),
            "shown_left": j.assignment.shown_left,
            "preference": j.preference,
            "usefulness": j.usefulness,
            "note": j.note,
            "elapsed_ms": j.elapsed_ms,
            "created_at": j.created_at.isoformat(),
        }
        for j in judgements
    ]


def round_win_rate_over_time(round_: EvalRound) -> list[dict[str, float]]:
    """[{n (ratings so far), items, estimate, low, high}] after each rating: the win rate over the
    identical items' ties and the ratings so far, item as the unit; [] before the first rating."""
    counted = round_outcomes(round_)
    return win_rates.win_rate_over_time(
        counted.outcomes, counted.item_ids, known=counted.n_identical
    )


def completed_item_outcomes(round_: EvalRound, judgements: list[EvalJudgement]) -> list[float]:
    """One outcome per item for the e-process: the mean of its ratings, items in the order they got
    their ``reviewers_per_item``-th rating (a mean must not change after the e-process bet on it).
    Once the round is closed the items it closed without all their ratings follow, in the order of
    their last rating, so the closed round's sequence extends the one shown while it was open."""
    by_item: dict[int, list[float]] = defaultdict(list)
    complete: list[int] = []
    last_rating: dict[int, int] = {}
    for k, j in enumerate(judgements):
        by_item[j.assignment.item_id].append(j.outcome)
        last_rating[j.assignment.item_id] = k
        if len(by_item[j.assignment.item_id]) == round_.reviewers_per_item:
            complete.append(j.assignment.item_id)
    order = list(complete)
    if round_.status == EvalRound.Status.CLOSED:
        done = set(complete)
        order += sorted(set(by_item) - done, key=last_rating.__getitem__)
    return [float(np.mean(by_item[item_id])) for item_id in order]


def round_results(round_: EvalRound, *, n_boot: int = 1000) -> dict[str, Any]:
    """Everything the results page shows.

    Returns {n_judgements, n_reviewers, n_identical (items with identical answers, one tie each),
    n_rated_items (items with a human rating), few_items (fewer than ``win_rates.MIN_RATED_ITEMS``
    rated items), min_rated_items, win_rate (Interval over the items, None without a human rating),
    over_time [{n, items, estimate, low, high}] after each rating, eprocess (item means in the
    order items were completed; a tie moves no wealth), usefulness (UsefulnessSummary, ratings
    only), alpha (ordinal Krippendorff on usefulness, NaN when < 2 raters), length_controlled (one
    row per item), repetition, items [{item, judgements, identical, disagree, mean_usefulness}],
    disagreements}.
    """
    judgements = round_judgements(round_)
    identical = human_identical_item_ids(round_)
    items = list(round_.items.select_related("prompt").order_by("position"))
    ratings = np.array([j.usefulness for j in judgements], dtype=float)
    item_ids = np.array([j.assignment.item_id for j in judgements], dtype=int)
    by_item: dict[int, list[EvalJudgement]] = defaultdict(list)
    for j in judgements:
        by_item[j.assignment.item_id].append(j)

    reviewers = sorted({j.assignment.reviewer_id for j in judgements})
    alpha = usefulness_alpha(judgements, [item.pk for item in items])

    counted = [item for item in items if by_item.get(item.pk) or item.pk in identical]
    # One row per item (the mean of its outcomes; an identical item one tie), as the win rate.
    lc = stopping.length_controlled_win_rate(
        [0.5 if item.pk in identical else np.mean([j.outcome for j in by_item[item.pk]])
         for item in counted],
        [max(1, item.checkpoint_tokens) for item in counted],
        [max(1, item.baseline_tokens) for item in counted],
    )  # fmt: skip
    outcomes = RoundOutcomes(
        outcomes=[0.5] * len(identical) + [j.outcome for j in judgements],
        item_ids=sorted(identical) + [j.assignment.item_id for j in judgements],
        n_identical=len(identical),
    )
    n_rated_items = len(by_item)
    rows = []
    for item in items:
        mine = by_item.get(item.pk, [])
        prefs = {j.preference for j in mine}
        spread = max((j.usefulness for j in mine), default=0) - min(
            (j.usefulness for j in mine), default=0
        )
        rows.append(
            {
                "item": item,
                "judgements": mine,
                "identical": item.pk in identical,
                "disagree": len(prefs) > 1 or spread >= 2,
                "mean_usefulness": float(np.mean([j.usefulness for j in mine])) if mine else None,
            }
        )
    return {
        "n_judgements": len(judgements),
        "n_reviewers": len(reviewers),
        "n_identical": len(identical),
        "n_rated_items": n_rated_items,
        "few_items": n_rated_items < win_rates.MIN_RATED_ITEMS,
        "min_rated_items": win_rates.MIN_RATED_ITEMS,
        "win_rate": outcomes.win_rate(),
        "over_time": win_rates.win_rate_over_time(
            outcomes.outcomes, outcomes.item_ids, known=outcomes.n_identical
        ),
        "eprocess": win_rates.win_rate_eprocess(completed_item_outcomes(round_, judgements)),
        "usefulness": stopping.usefulness_summary(ratings, item_ids, n_boot=n_boot),
        "alpha": alpha,
        "length_controlled": lc,
        "repetition": float(
            np.mean([stopping.text_repetition_rate(i.checkpoint_text) for i in counted])
        )
        if counted
        else None,
        "items": rows,
        "disagreements": [r for r in rows if r["disagree"]],
    }


def items_left_for(
    round_: EvalRound, reviewer_id: int, *, rateable: QuerySet[EvalItem] | None = None
) -> int:
    """Rateable items of the round this reviewer has neither rated nor skipped that still lack
    ratings (an upper bound on what they will be handed: other reviewers may take the last slots
    first). ``rateable``: the round's ``rateable_items`` when the caller has them already."""
    rated_by_me = EvalJudgement.objects.filter(
        assignment__item=OuterRef("pk"), assignment__reviewer_id=reviewer_id
    )
    skipped_by_me = EvalAssignment.objects.filter(
        item=OuterRef("pk"), reviewer_id=reviewer_id, status=EvalAssignment.Status.SKIPPED
    )
    items = rateable_items(round_) if rateable is None else rateable
    return (
        items.annotate(rated=Count("assignments__judgement"))
        .filter(rated__lt=round_.reviewers_per_item)
        .filter(~Exists(rated_by_me), ~Exists(skipped_by_me))
        .count()
    )


def rounds_open_for(reviewer_id: int) -> list[dict[str, Any]]:
    """Open rounds with their progress for this reviewer: [{round, needed (ratings the rateable
    items need in all), done (ratings so far), mine (this reviewer's ratings), left (rateable items
    this reviewer has not rated that still lack ratings), identical (items drawn for reviewers but
    not shown: identical answers), judge_only (items only the round's judge rates)}]."""
    rows = []
    for round_ in EvalRound.objects.filter(status=EvalRound.Status.OPEN).select_related(
        "checkpoint__run"
    ):
        rateable = rateable_items(round_)
        n_rateable = rateable.count()
        n_drawn = round_.items.filter(for_humans=True).count()
        left = items_left_for(round_, reviewer_id, rateable=rateable)
        done = EvalJudgement.objects.filter(assignment__item__round=round_).count()
        mine = EvalAssignment.objects.filter(
            item__round=round_, reviewer_id=reviewer_id, judgement__isnull=False
        ).count()
        rows.append(
            {
                "round": round_,
                "needed": n_rateable * round_.reviewers_per_item,
                "done": done,
                "mine": mine,
                "left": left,
                "identical": n_drawn - n_rateable,
                "judge_only": round_.size - n_drawn,
            }
        )
    return rows
