"""Does any checkpoint beat the base model? Pure Python, no Django (PIPELINE.md "When to stop").

A run's human-eval rounds against its base model (the model training started from) each give the
checkpoint's win rate with an interval. When every one of them is under 0.5, no checkpoint the
reviewers rated is better than what the run started from: rolling back to the best of them still
ships a worse model, and the stopping panel should say to keep the base. The gold farm
(bench/README.md, 2026-12-07) met this in half of its runs: RL against a weak reward model made a
good starting policy worse at every checkpoint, and the panel's advice was to keep the final one
or roll back to the best round.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from monitoring.stats.intervals import Interval

EVEN = 0.5  # a win rate of one half: as good as the base


@dataclass(frozen=True)
class BaseComparison:
    """The rated rounds against the base model, summed up.

    rounds: how many there are; best: the highest win rate among them (None without rounds) and
    best_round its index in ``win_rates``' order; all_below: every win rate under 0.5 (False
    without rounds); all_clearly_below: every interval's upper end under 0.5 too."""

    rounds: int
    best: Interval | None
    best_round: int | None
    all_below: bool
    all_clearly_below: bool


def base_comparison(win_rates: Sequence[Interval | None]) -> BaseComparison:
    """``win_rates``: [R] one per rated round in order, the checkpoint's win rate against the base
    model with its interval, or None for a round against another baseline (skipped, but kept in
    the numbering of ``best_round``)."""
    against = [(i, w) for i, w in enumerate(win_rates) if w is not None]
    if not against:
        return BaseComparison(0, None, None, False, False)
    best_round, best = max(against, key=lambda pair: pair[1].estimate)
    return BaseComparison(
        rounds=len(against),
        best=best,
        best_round=best_round,
        all_below=all(w.estimate < EVEN for _, w in against),
        all_clearly_below=all(w.high < EVEN for _, w in against),
    )


def keep_base_advice(comparison: BaseComparison, *, finished: bool) -> str | None:
    """The panel's advice when no rated checkpoint beats the base, else None. A finished run: keep
    the base as soon as every round against it is under 0.5. A running one: only when every
    interval is under 0.5 too (more training may still help a checkpoint that is merely not ahead
    yet)."""
    best = comparison.best
    if best is None or not comparison.all_below:
        return None
    if not finished and not comparison.all_clearly_below:
        return None
    clearly = ", each interval under 0.5" if comparison.all_clearly_below else ""
    rounds = {1: "the round", 2: "both rounds"}.get(
        comparison.rounds, f"all {comparison.rounds} rounds"
    )
    figures = (
        f"{rounds} against it gave a win rate under 0.5 (best {best.estimate:.2f}, interval "
        f"{best.low:.2f}-{best.high:.2f}{clearly})"
    )
    if finished:
        return (
            f"No rated checkpoint beats the base model: {figures}. Keep the base model rather "
            "than a checkpoint of this run, and fix the reward model before training again."
        )
    return (
        f"Every rated checkpoint loses to the base model: {figures}. Stop, keep the base model, "
        "and fix the reward model before training on."
    )
