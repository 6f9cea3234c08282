"""A reviewer's self-consistency on repeats: how often the second rating of an item, shown again
a while later with the sides flipped, matches the first. Pure: no Django.

The usefulness shares are the usual test-retest figures for a 1-5 scale (exact agreement and
agreement within one point); the preference share is that of repeats whose stored verdict (from
the checkpoint's side, so comparable across flipped sides) is the same."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RepeatConsistency:
    """One reviewer's repeats. ``n``: repeats answered; ``usefulness_exact`` and
    ``usefulness_within_1``: shares (0-1) of repeats whose usefulness equals the first rating's,
    or is at most one point off; ``preference_same``: share with the same preference;
    ``mean_abs_change``: mean |second - first| usefulness, in points."""

    n: int
    usefulness_exact: float
    usefulness_within_1: float
    preference_same: float
    mean_abs_change: float


def repeat_consistency(
    first: Sequence[tuple[str, int]], again: Sequence[tuple[str, int]]
) -> RepeatConsistency:
    """``first[k]`` and ``again[k]``: the (preference, usefulness) of the k-th repeated item's
    first rating and of its repeat, by one reviewer. ValueError when the lengths differ or there
    are none (no figure without a repeat)."""
    if len(first) != len(again):
        raise ValueError(f"first and again differ in length: {len(first)} != {len(again)}")
    if not first:
        raise ValueError("first is empty: self-consistency needs at least one repeat")
    n = len(first)
    changes = [abs(u2 - u1) for (_, u1), (_, u2) in zip(first, again, strict=True)]
    same = sum(p1 == p2 for (p1, _), (p2, _) in zip(first, again, strict=True))
    return RepeatConsistency(
        n=n,
        usefulness_exact=sum(c == 0 for c in changes) / n,
        usefulness_within_1=sum(c <= 1 for c in changes) / n,
        preference_same=same / n,
        mean_abs_change=sum(changes) / n,
    )
