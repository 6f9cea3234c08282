"""Reads of an eval round's repeats: each reviewer's self-consistency, their repeat judgements
against their first rating of the same items (monitoring.stats.consistency)."""

from __future__ import annotations

from typing import Any

from monitoring.models import EvalJudgement, EvalRepeatJudgement, EvalRound
from monitoring.stats.consistency import repeat_consistency


def round_repeat_consistency(round_: EvalRound) -> list[dict[str, Any]]:
    """One row per reviewer with an answered repeat, by name: {reviewer (username), consistency
    (RepeatConsistency)}. A repeat whose first rating is gone (its item's assignment deleted) is
    left out."""
    repeats = list(
        EvalRepeatJudgement.objects.filter(assignment__item__round=round_)
        .select_related("assignment__reviewer")
        .order_by("pk")
    )
    firsts = {
        (j.assignment.item_id, j.assignment.reviewer_id): (j.preference, j.usefulness)
        for j in EvalJudgement.objects.filter(
            assignment__item__round=round_,
            assignment__reviewer_id__in={r.assignment.reviewer_id for r in repeats},
        ).select_related("assignment")
    }
    pairs: dict[str, tuple[list, list]] = {}
    for repeat in repeats:
        key = (repeat.assignment.item_id, repeat.assignment.reviewer_id)
        if key not in firsts:
            continue
        first, again = pairs.setdefault(repeat.assignment.reviewer.get_username(), ([], []))
        first.append(firsts[key])
        again.append((repeat.preference, repeat.usefulness))
    return [
        {"reviewer": name, "consistency": repeat_consistency(first, again)}
        for name, (first, again) in sorted(pairs.items())
    ]
